"""Global to local node ids of one sampled subgraph, in first-seen order.

Example::

    >>> nodes = NodeMap(num_nodes=10)
    >>> nodes.start(torch.tensor([7, 3]))
    >>> new, local = nodes.add(torch.tensor([3, 5, 9, 5]))
    >>> new.tolist(), local.tolist()
    ([5, 9], [1, 2, 3, 2])
    >>> nodes.ids().tolist(), nodes.hops
    ([7, 3, 5, 9], [2, 2])
    >>> nodes.reset()
"""
from typing import List, Tuple

import torch
from torch import Tensor

__all__ = ["NodeMap"]

# int32 scratch halves the memory that the random accesses touch.
_INDEX = torch.int32
_UNSEEN = torch.iinfo(_INDEX).max


class NodeMap:
    """Numbers the nodes of one subgraph: seeds first, then every new node
    in the order it is first seen.

    Two scratch arrays of ``num_nodes`` entries are allocated once and
    cleaned after each subgraph by :meth:`reset`, so a subgraph costs time
    in proportion to its own size (no hashing, no sort), and memory does not
    grow with the number of subgraphs.
    """

    def __init__(self, num_nodes: int) -> None:
        if num_nodes >= _UNSEEN:
            raise ValueError(f"NodeMap numbers at most {_UNSEEN - 1} nodes "
                             f"per type, got {num_nodes}.")
        self.num_nodes = num_nodes
        self._local = torch.full((num_nodes,), _UNSEEN, dtype=_INDEX)
        self._first = torch.full((num_nodes,), _UNSEEN, dtype=_INDEX)
        self._chunks: List[Tensor] = []
        #: Nodes added by :meth:`start` and each :meth:`add`.
        self.hops: List[int] = []
        self.count = 0

    def start(self, seeds: Tensor) -> None:
        """Begins a subgraph whose first nodes are ``seeds``, in order (a
        repeated seed keeps its slots; later references map to the first)."""
        if self._chunks:
            self.reset()
        positions = torch.arange(seeds.numel(), dtype=_INDEX)
        self._local.scatter_reduce_(0, seeds, positions, "amin")
        self._chunks, self.hops, self.count = [seeds], [seeds.numel()], \
            seeds.numel()

    def add(self, candidates: Tensor) -> Tuple[Tensor, Tensor]:
        """Adds the candidates not seen yet, in first-seen order.

        Returns:
            the new nodes (global ids) and the local id of every candidate.
        """
        # index_select, masked_select and index_copy_ are several times
        # faster than the equivalent [] indexing on the CPU.
        unseen = candidates.masked_select(
            self._local.index_select(0, candidates) == _UNSEEN)
        order = torch.arange(unseen.numel(), dtype=_INDEX)
        self._first.scatter_reduce_(0, unseen, order, "amin")
        new = unseen.masked_select(
            self._first.index_select(0, unseen) == order)
        self._first.index_fill_(0, unseen, _UNSEEN)
        self._local.index_copy_(0, new, torch.arange(
            self.count, self.count + new.numel(), dtype=_INDEX))
        self._chunks.append(new)
        self.hops.append(new.numel())
        self.count += new.numel()
        return new, self._local.index_select(0, candidates).long()

    def local(self, ids: Tensor) -> Tensor:
        """Local ids of ``ids``; ``-1`` where a node is not in the
        subgraph."""
        local = self._local.index_select(0, ids).long()
        return local.masked_fill_(local == _UNSEEN, -1)

    def ids(self) -> Tensor:
        """Global ids of the subgraph's nodes, by local id."""
        if len(self._chunks) == 1:
            return self._chunks[0]
        self._chunks = [torch.cat(self._chunks)]
        return self._chunks[0]

    def reset(self) -> None:
        """Forgets the subgraph (cleans only the entries it used)."""
        if self._chunks:
            self._local.index_fill_(0, self.ids(), _UNSEEN)
        self._chunks, self.hops, self.count = [], [], 0
