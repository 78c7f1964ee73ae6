"""``torch.ops.pyg.knn``, ``radius`` and ``nearest`` in plain PyTorch, for
PyG where pyg-lib does not provide them.

PyG 2.8's ``knn``, ``knn_graph``, ``radius``, ``radius_graph``,
``nearest``, ``knn_interpolate``, ``DynamicEdgeConv``, ``GravNetConv`` and
``XConv`` call these ops directly. The kernels here keep pyg-lib's
contract: examples are given as ``ptr`` vectors (example ``b`` holds rows
``ptr[b]:ptr[b + 1]``, so its rows are contiguous), and the result holds
the pairs found only, a dynamic number of them. Each query's pairs come
nearest first; among points at the same distance the lower index comes
first (the rule of the fixed-shape :mod:`poptorch_geometric.ops`, which
the kernels run on one example and one block of queries at a time, then
drop the empty slots).

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
from typing import Callable, Iterator, List, Optional, Tuple

import torch
from torch import Tensor

import poptorch_core as poptorch

from .. import ops
from ..ops._neighbours import as_points

__all__ = ["knn_kernel", "radius_kernel", "nearest_kernel", "SCHEMAS",
           "KERNELS"]

#: Query rows per block times points: bounds the distance matrix of one
#: block (16M entries, 64 MB in float32) for large point sets.
_BLOCK_ENTRIES = 1 << 24

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


def _blocks(x: Tensor, y: Tensor, ptr_x: Optional[Tensor],
            ptr_y: Optional[Tensor]
            ) -> Iterator[Tuple[int, int, int, int]]:
    """``(x_start, x_end, y_start, y_end)``: an example's points and a
    block of its queries, for every example with both."""
    examples = max(1 if p is None else p.numel() - 1 for p in (ptr_x, ptr_y))
    bx = _bounds("ptr_x", ptr_x, x.size(0), examples)
    by = _bounds("ptr_y", ptr_y, y.size(0), examples)
    for b in range(examples):
        points = bx[b + 1] - bx[b]
        if points == 0:
            continue
        step = max(1, _BLOCK_ENTRIES // points)
        for start in range(by[b], by[b + 1], step):
            yield bx[b], bx[b + 1], start, min(start + step, by[b + 1])


def _pairs(x: Tensor, y: Tensor, ptr_x: Optional[Tensor],
           ptr_y: Optional[Tensor],
           search: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """Runs the fixed-shape ``search(points, queries)`` block by block and
    keeps its filled slots, in global indices."""
    x, y = as_points("x", x), as_points("y", y)
    parts = []
    for xs, xe, ys, ye in _blocks(x, y, ptr_x, ptr_y):
        slots = search(x[xs:xe], y[ys:ye])
        slots = slots[:, slots[0] >= 0]
        parts.append(slots + torch.tensor([[ys], [xs]], device=x.device))
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
    return _pairs(x, y, ptr_x, ptr_y, lambda p, q: ops.knn(
        p, q, min(k, p.size(0)), cosine=cosine))


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

    def search(points: Tensor, queries: Tensor) -> Tensor:
        slots = points.size(0) if limit is None else \
            min(points.size(0), limit + extra)
        return ops.radius(points, queries, r, max_num_neighbors=slots)

    pairs = _pairs(x, y, ptr_x, ptr_y, search)
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
    # Both roles swap here: pyg-lib's nearest answers a query per row of x.
    pairs = _pairs(y, x, ptr_y, ptr_x,
                   lambda p, q: ops.knn(p, q, 1))
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
