"""Fixed-fanout neighbour picks for a whole frontier of nodes at once.

Every function here works on all nodes of a frontier with a handful of
tensor operations: there is no Python loop over nodes (the loop of
:func:`_floyd` runs ``fanout`` times, over all nodes together).

Example::

    >>> from poptorch_geometric._sampling.csc import csc_of
    >>> csc = csc_of(torch.tensor([[1, 2, 3, 0], [0, 0, 0, 1]]), 4, 4)
    >>> slot, owner = pick_neighbors(csc, torch.tensor([0, 1]), 2,
    ...                              replace=False)
    >>> owner.tolist()                   # node 0 gets 2 of 3, node 1 its 1
    [0, 0, 1]
    >>> set(csc.sources(slot[:2]).tolist()) <= {1, 2, 3}
    True
"""
from typing import Tuple

import torch
from torch import Tensor

from .csc import CSC

__all__ = ["pick_neighbors", "expand_ranges"]


def pick_neighbors(csc: CSC, nodes: Tensor, fanout: int,
                   replace: bool) -> Tuple[Tensor, Tensor]:
    """Draws up to ``fanout`` in-edges of each of ``nodes`` uniformly at
    random (all of them when ``fanout < 0``).

    Without replacement a node of in-degree ``d`` gets ``min(d, fanout)``
    distinct edges, every subset of that size being equally likely; with
    replacement it gets ``fanout`` independent uniform draws (none when
    ``d == 0``). Random numbers come from torch's global generator, so
    ``torch.manual_seed`` makes the picks reproducible.

    Returns:
        the CSC slots of the picked edges (for ``csc.sources`` and
        ``csc.edge_ids``) and, for each, the position in ``nodes`` of the node
        that picked it; grouped by node, in the order of ``nodes``.
    """
    start, degree = csc.degree(nodes)
    if fanout < 0:
        return expand_ranges(start, degree)
    if fanout == 0 or nodes.numel() == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty
    if replace:
        offsets = (torch.rand(nodes.numel(), fanout, dtype=torch.float64)
                   * degree.unsqueeze(1)).long()
        valid = (degree > 0).unsqueeze(1).expand(-1, fanout)
    else:
        offsets = torch.arange(fanout).expand(nodes.numel(), -1).clone()
        valid = offsets < degree.unsqueeze(1)
        crowded = (degree > fanout).nonzero().view(-1)
        if crowded.numel():
            offsets.index_copy_(0, crowded,
                                _floyd(degree.index_select(0, crowded),
                                       fanout))
    owner = torch.arange(nodes.numel()).unsqueeze(1).expand(-1, fanout)
    return ((start.unsqueeze(1) + offsets).masked_select(valid),
            owner.masked_select(valid))


def _floyd(degree: Tensor, k: int) -> Tensor:
    """``k`` distinct offsets in ``[0, degree)`` per row (every ``degree >
    k``), each ``k``-subset equally likely: Floyd's algorithm, one step for
    all rows at a time. Step ``t`` draws ``r`` in ``[0, degree - k + t]``
    and takes ``degree - k + t`` instead when ``r`` was taken already."""
    # The draws do not depend on earlier steps: make them all at once, so
    # that each step is three tensor operations.
    tops = degree - k + torch.arange(k).unsqueeze(1)
    picks = (torch.rand(k, degree.numel(), dtype=torch.float64)
             * (tops + 1)).long()
    for t in range(1, k):
        taken = (picks[:t] == picks[t]).any(dim=0)
        torch.where(taken, tops[t], picks[t], out=picks[t])
    # Sorted offsets read each node's neighbour list front to back.
    return picks.t().sort(dim=1).values


def expand_ranges(start: Tensor, count: Tensor) -> Tuple[Tensor, Tensor]:
    """The slots ``start[i] .. start[i] + count[i] - 1`` of every ``i``,
    concatenated, and for each slot its ``i``."""
    owner = torch.repeat_interleave(torch.arange(count.numel()), count)
    first = torch.cumsum(count, 0) - count
    slots = torch.arange(owner.numel()) + (start - first)[owner]
    return slots, owner
