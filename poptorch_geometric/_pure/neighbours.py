"""``torch.ops.pyg.knn``, ``radius`` and ``nearest`` in plain PyTorch, for
PyG where pyg-lib does not provide them.

PyG 2.8's ``knn``, ``knn_graph``, ``radius``, ``radius_graph``,
``nearest``, ``knn_interpolate``, ``DynamicEdgeConv``, ``GravNetConv`` and
``XConv`` call these ops directly. The kernels here keep pyg-lib's
contract: examples are given as ``ptr`` vectors (example ``b`` holds rows
``ptr[b]:ptr[b + 1]``, so its rows are contiguous), and the result holds
the pairs found only, a dynamic number of them. Each query's pairs come
nearest first; among points at the same distance the lower index comes
first: the rule of the fixed-shape :mod:`poptorch_geometric.ops`, whose
distances and slots the kernels share, then drop the empty slots. The
search is brute force, ``O(points x queries)`` per example, on blocks of
bounded memory: several small examples at once (the distances between
them masked), or part of one large example's queries.

While PopTorch traces a model, PyG's functions and layers take the
fixed-shape versions instead (:mod:`poptorch_geometric.override`); the ops
themselves refuse to be traced, since the number of pairs they return
depends on the data.

Example::

    >>> x = torch.tensor([[0.], [1.], [3.], [10.], [11.]])
    >>> ptr = torch.tensor([0, 3, 5])
    >>> knn_kernel(x, x, ptr, ptr, k=2)
    tensor([[0, 0, 1, 1, 2, 2, 3, 3, 4, 4],
            [0, 1, 1, 0, 2, 1, 3, 4, 4, 3]])
    >>> radius_kernel(x, x, ptr, ptr, 1.5, ignore_same_index=True)
    tensor([[0, 1, 3, 4],
            [1, 0, 4, 3]])
"""
import dataclasses
import math
from typing import Callable, Iterator, List, Optional, Tuple

import torch
from torch import Tensor

import poptorch_core as poptorch

from ..ops.neighbour_search import (as_points, distances, nearest_slots,
                               to_edge_slots)

__all__ = ["knn_kernel", "radius_kernel", "nearest_kernel", "SCHEMAS",
           "KERNELS"]

#: Query rows times points of one block: bounds the distance matrix
#: (16M entries, 64 MB in float32) of a large example.
_BLOCK_ENTRIES = 1 << 24
#: Small examples are searched together, up to this many entries (the
#: distances between examples are masked): one call per example would cost
#: more than the search.
_GROUP_ENTRIES = 1 << 16
#: Rows up to this long are sorted whole; longer ones take the k smallest
#: first (a sort of every point per query costs far more than the search).
_SORT_WHOLE = 256

#: pyg-lib's schemas of the ops (PyG passes every argument by position).
SCHEMAS = {
    "knn": "knn(Tensor x, Tensor y, Tensor? ptr_x=None, Tensor? ptr_y=None, "
           "int k=1, bool cosine=False, int num_workers=1) -> Tensor",
    "radius": "radius(Tensor x, Tensor y, Tensor? ptr_x=None, "
              "Tensor? ptr_y=None, float r=1.0, int? max_num_neighbors=32, "
              "int num_workers=1, bool ignore_same_index=False) -> Tensor",
    "nearest": "nearest(Tensor x, Tensor y, Tensor? ptr_x=None, "
               "Tensor? ptr_y=None) -> Tensor",
}


def _refuse_tracing(name: str) -> None:
    if poptorch.isRunningOnIpu():
        raise poptorch.Error(
            f"torch.ops.pyg.{name} returns a number of pairs that depends on "
            "the data, which a traced model cannot have. Call "
            f"poptorch_geometric.ops.{name} (a fixed number of slots per "
            "query, empty ones -1); PyG's knn, knn_graph, radius, "
            "radius_graph, nearest, knn_interpolate, DynamicEdgeConv, "
            "GravNetConv and XConv take it by themselves while traced.")


def _bounds(name: str, ptr: Optional[Tensor], rows: int,
            examples: int) -> List[int]:
    """``ptr`` as a list padded to ``examples + 1`` entries (None: every
    row in example 0); checks it describes ``rows`` rows."""
    if ptr is None:
        return [0] + [rows] * examples
    bounds = ptr.tolist()
    if ptr.dim() != 1 or not bounds or bounds[0] != 0 or \
            bounds[-1] != rows or \
            any(a > b for a, b in zip(bounds, bounds[1:])):
        raise ValueError(
            f"{name} must be a non-decreasing vector from 0 to the number of "
            f"rows ({rows}); got {bounds[:8]}{'...' if len(bounds) > 8 else ''}."
            " PyG makes it from a sorted batch vector (index2ptr).")
    return bounds + [rows] * (examples + 1 - len(bounds))


@dataclasses.dataclass
class _Block:
    """Points ``x[xs:xe]`` and queries ``y[ys:ye]`` of whole examples, or
    of one example and part of its queries; ``batch_x`` / ``batch_y`` number
    the examples within the block."""
    xs: int
    xe: int
    ys: int
    ye: int
    batch_x: Tensor
    batch_y: Tensor


def _local_batch(sizes: List[int]) -> Tensor:
    return torch.repeat_interleave(torch.arange(len(sizes)),
                                   torch.tensor(sizes, dtype=torch.long))


def _blocks(x: Tensor, y: Tensor, ptr_x: Optional[Tensor],
            ptr_y: Optional[Tensor]) -> Iterator[_Block]:
    """Consecutive small examples together, large ones alone in blocks of
    their queries; blocks without points or queries are skipped (no
    pairs)."""
    examples = max(1 if p is None else p.numel() - 1 for p in (ptr_x, ptr_y))
    bx = _bounds("ptr_x", ptr_x, x.size(0), examples)
    by = _bounds("ptr_y", ptr_y, y.size(0), examples)
    group: List[int] = []   # consecutive examples

    def flush() -> Iterator[_Block]:
        first, last = group[0], group[-1] + 1
        if bx[last] > bx[first] and by[last] > by[first]:
            members = range(first, last)
            yield _Block(bx[first], bx[last], by[first], by[last],
                         _local_batch([bx[b + 1] - bx[b] for b in members]),
                         _local_batch([by[b + 1] - by[b] for b in members]))
        group.clear()

    for b in range(examples):
        points, queries = bx[b + 1] - bx[b], by[b + 1] - by[b]
        large = points * queries > _GROUP_ENTRIES
        if group and (large or (bx[b + 1] - bx[group[0]]) *
                      (by[b + 1] - by[group[0]]) > _GROUP_ENTRIES):
            yield from flush()
        if not large:
            group.append(b)
            continue
        step = max(1, _BLOCK_ENTRIES // points)
        for start in range(by[b], by[b + 1], step):
            stop = min(start + step, by[b + 1])
            yield _Block(bx[b], bx[b + 1], start, stop,
                         torch.zeros(points, dtype=torch.long),
                         torch.zeros(stop - start, dtype=torch.long))
    if group:
        yield from flush()


def _smallest(dist: Tensor, slots: int,
              limit: float = math.inf) -> Tuple[Tensor, Tensor]:
    """:func:`~poptorch_geometric.ops.neighbour_search.nearest_slots` (the
    ``slots`` nearest, ties to the lower index) for long rows: the
    ``slots``-th smallest distance bounds the candidates, and only those
    are ordered."""
    if slots == 0 or dist.size(1) <= max(_SORT_WHOLE, slots):
        return nearest_slots(dist, slots, limit)
    bound = dist.topk(slots, dim=1, largest=False).values.amax(1, True)
    row, col = (dist <= bound).nonzero(as_tuple=True)   # row, then index
    value = dist[row, col]
    order = torch.sort(value, stable=True).indices
    order = order[torch.sort(row[order], stable=True).indices]
    row, col, value = row[order], col[order], value[order]
    keep = _rank_in_query(row) < slots
    value = value[keep].view(-1, slots)
    return col[keep].view(-1, slots), value < limit


def _pairs(x: Tensor, y: Tensor, ptr_x: Optional[Tensor],
           ptr_y: Optional[Tensor], slots: Callable[[int], int],
           limit: float = math.inf, cosine: bool = False) -> Tensor:
    """For each query row of ``y``, the ``slots(points)`` nearest rows of
    ``x`` in its example closer than ``limit``, block by block: ``[2,
    pairs]`` in global indices, by query, nearest first."""
    x, y = as_points("x", x), as_points("y", y)
    parts = []
    for block in _blocks(x, y, ptr_x, ptr_y):
        dist = distances(x[block.xs:block.xe], y[block.ys:block.ye],
                         block.batch_x.to(x.device),
                         block.batch_y.to(x.device), cosine)
        index, valid = _smallest(dist, min(slots(int(torch.bincount(
            block.batch_x).max())), dist.size(1)), limit)
        found = to_edge_slots(index, valid)
        found = found[:, found[0] >= 0]
        parts.append(found + torch.tensor([[block.ys], [block.xs]],
                                          device=x.device))
    if not parts:
        return torch.zeros(2, 0, dtype=torch.long, device=x.device)
    return torch.cat(parts, dim=1)


def knn_kernel(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None,
               ptr_y: Optional[Tensor] = None, k: int = 1,
               cosine: bool = False, num_workers: int = 1) -> Tensor:
    """``pyg::knn``: for each row of ``y``, its ``min(k, points)`` nearest
    rows of ``x`` in the same example, as ``[2, pairs]`` (index into
    ``y``, index into ``x``). ``num_workers`` is ignored."""
    _refuse_tracing("knn")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}.")
    return _pairs(x, y, ptr_x, ptr_y, lambda points: min(k, points),
                  cosine=cosine)


def radius_kernel(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None,
                  ptr_y: Optional[Tensor] = None, r: float = 1.0,
                  max_num_neighbors: Optional[int] = 32,
                  num_workers: int = 1,
                  ignore_same_index: bool = False) -> Tensor:
    """``pyg::radius``: for each row of ``y``, the rows of ``x`` of the same
    example closer than ``r``, the nearest ``max_num_neighbors`` of them
    (all when None); with ``ignore_same_index`` never the row of ``x``
    with the query's own index (``radius_graph`` without loops)."""
    _refuse_tracing("radius")
    limit = max_num_neighbors
    extra = int(bool(ignore_same_index))
    pairs = _pairs(x, y, ptr_x, ptr_y, lambda points: points if limit is None
                   else min(points, limit + extra), limit=float(r))
    if ignore_same_index:
        pairs = pairs[:, pairs[0] != pairs[1]]
        if limit is not None:
            pairs = pairs[:, _rank_in_query(pairs[0]) < limit]
    return pairs


def _rank_in_query(query: Tensor) -> Tensor:
    """Each pair's position among its query's pairs (pairs come sorted by
    query)."""
    counts = torch.bincount(query, minlength=1)
    starts = torch.cumsum(counts, 0) - counts
    return torch.arange(query.numel(), device=query.device) - starts[query]


def nearest_kernel(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None,
                   ptr_y: Optional[Tensor] = None) -> Tensor:
    """``pyg::nearest``: for each row of ``x``, the index of the nearest row
    of ``y`` in the same example (ties: the lower index)."""
    _refuse_tracing("nearest")
    x, y = as_points("x", x), as_points("y", y)
    # The roles swap: pyg-lib's nearest answers a query per row of x.
    pairs = _pairs(y, x, ptr_y, ptr_x, lambda points: 1)
    out = torch.full((x.size(0), ), -1, dtype=torch.long, device=x.device)
    out[pairs[0]] = pairs[1]
    if bool((out < 0).any()):
        row = int((out < 0).nonzero()[0])
        raise ValueError(
            f"nearest: row {row} of x has no row of y in its example; give "
            "every example of x at least one point in y.")
    return out


#: op name -> kernel.
KERNELS = {"knn": knn_kernel, "radius": radius_kernel,
           "nearest": nearest_kernel}
