"""The in-edges of every node (CSC), built once per graph.

Example::

    >>> edge_index = torch.tensor([[0, 2, 1, 0], [1, 1, 2, 2]])
    >>> csc = csc_of(edge_index, num_src=3, num_dst=3)
    >>> csc.colptr.tolist(), csc.row.tolist(), csc.perm.tolist()
    ([0, 0, 2, 4], [0, 2, 1, 0], [0, 1, 2, 3])
    >>> csc.sources(torch.tensor([3, 1])).tolist()
    [0, 2]
    >>> csc_of(edge_index, 3, 3) is csc      # built once per graph
    True
"""
import dataclasses
import threading
import weakref
from typing import Dict, Tuple

import torch
from torch import Tensor

__all__ = ["CSC", "csc_of"]


@dataclasses.dataclass(frozen=True)
class CSC:
    """Node ``v``'s in-edges come from ``row[colptr[v]:colptr[v + 1]]``;
    ``perm`` holds their ids in the original ``edge_index``. ``row`` and
    ``perm`` are int32 when the ids fit."""
    colptr: Tensor
    row: Tensor
    perm: Tensor

    def degree(self, nodes: Tensor) -> Tuple[Tensor, Tensor]:
        """First CSC slot and in-degree of each of ``nodes``."""
        start = self.colptr.index_select(0, nodes)
        return start, self.colptr.index_select(0, nodes + 1) - start

    def sources(self, slots: Tensor) -> Tensor:
        """Source node of the edges in CSC ``slots`` (int64)."""
        return self.row.index_select(0, slots).long()

    def edge_ids(self, slots: Tensor) -> Tensor:
        """Original ids of the edges in CSC ``slots`` (int64)."""
        return self.perm.index_select(0, slots).long()

    def share_memory_(self) -> "CSC":
        """Moves the arrays to shared memory, for loader worker processes."""
        for tensor in (self.colptr, self.row, self.perm):
            tensor.share_memory_()
        return self


# id(edge_index) -> (weak reference, key, CSC). The weak reference tells a
# live tensor from a new one that reuses the id; the key holds the tensor's
# version counter, so an in-place edit of the edges rebuilds the CSC.
_CACHE: Dict[int, Tuple[weakref.ref, tuple, CSC]] = {}
_LOCK = threading.Lock()


def csc_of(edge_index: Tensor, num_src: int, num_dst: int) -> CSC:
    """The CSC of ``edge_index`` ([2, E]: sources, then targets), built on
    the first call for this tensor and reused until it is modified or freed,
    so every loader and sampler over one graph shares one copy."""
    key = (edge_index._version, num_src, num_dst)
    with _LOCK:
        hit = _CACHE.get(id(edge_index))
        if hit is not None and hit[0]() is edge_index and hit[1] == key:
            return hit[2]
    csc = build_csc(edge_index, num_src, num_dst)
    ident = id(edge_index)
    with _LOCK:
        _CACHE[ident] = (weakref.ref(edge_index), key, csc)
    weakref.finalize(edge_index, _forget, ident, key)
    return csc


def _forget(ident: int, key: tuple) -> None:
    with _LOCK:
        hit = _CACHE.get(ident)
        if hit is not None and hit[1] == key and hit[0]() is None:
            del _CACHE[ident]


def build_csc(edge_index: Tensor, num_src: int, num_dst: int) -> CSC:
    """Sorts the edges by target (stably, so each node's in-edges keep their
    order); raises ``ValueError`` for indices out of range."""
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must have shape [2, num_edges], got "
                         f"{list(edge_index.shape)}.")
    edge_index = edge_index.to("cpu", torch.long)
    src, dst = edge_index[0], edge_index[1]
    for name, ids, bound in (("source", src, num_src),
                             ("target", dst, num_dst)):
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= bound):
            raise ValueError(
                f"edge_index has {name} indices outside [0, {bound}): "
                f"found {int(ids.min())}..{int(ids.max())}. Set num_nodes "
                "on the graph (or the node type) to cover every node.")
    if bool((dst[1:] >= dst[:-1]).all()):
        perm = torch.arange(dst.numel())
        row = src
    else:
        perm = torch.sort(dst, stable=True).indices
        row = src.index_select(0, perm)
    colptr = torch.zeros(num_dst + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(dst, minlength=num_dst), 0, out=colptr[1:])
    return CSC(colptr, _narrow(row, num_src), _narrow(perm, dst.numel()))


def _narrow(ids: Tensor, bound: int) -> Tensor:
    """int32 when every id fits: half the memory, and sampling reads these
    arrays at random."""
    return ids.to(torch.int32) if bound <= torch.iinfo(torch.int32).max \
        else ids
