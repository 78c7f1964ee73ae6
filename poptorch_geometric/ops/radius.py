"""Fixed-shape ``radius`` and ``radius_graph``: ``min(N, max_num_neighbors)``
slots per query whatever the data.

A query keeps its nearest points within distance ``r`` (strictly closer,
as ``torch_cluster``), nearest first; when more than ``max_num_neighbors``
are within ``r`` the nearest ones are kept (PyG's CPU kernels keep whichever
they find first). Unused slots have both entries -1. Ties: the lower index
first.

Example::

    >>> x = torch.tensor([[0.], [1.], [3.], [10.], [11.]])
    >>> batch = torch.tensor([0, 0, 0, 1, 1])
    >>> radius_graph(x, 1.5, batch, max_num_neighbors=2)
    tensor([[ 1, -1,  0, -1, -1, -1,  4, -1,  3, -1],
            [ 0, -1,  1, -1, -1, -1,  3, -1,  4, -1]])
"""
from typing import Optional

from torch import Tensor

from .neighbour_search import (as_points, batch_vector, check_batch, distances,
                          nearest_slots, to_edge_slots)
from .knn import check_flow

__all__ = ["radius", "radius_graph"]


def _search(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor],
            batch_y: Optional[Tensor], max_num_neighbors: int,
            exclude_self: bool) -> Tensor:
    if isinstance(max_num_neighbors, bool) or \
            not isinstance(max_num_neighbors, int) or max_num_neighbors < 1:
        raise ValueError("max_num_neighbors must be a positive int (the "
                         "fixed number of slots per query), got "
                         f"{max_num_neighbors!r}.")
    x, y = as_points("x", x), as_points("y", y)
    batch_x, batch_y = batch_vector(batch_x, x), batch_vector(batch_y, y)
    check_batch("batch_x", batch_x, x)
    check_batch("batch_y", batch_y, y)
    dist = distances(x, y, batch_x, batch_y, exclude_self=exclude_self)
    candidates = max(x.size(0) - int(exclude_self), 0)
    slots = min(candidates, max_num_neighbors)
    return to_edge_slots(*nearest_slots(dist, slots, limit=float(r)))


def radius(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor] = None,
           batch_y: Optional[Tensor] = None, max_num_neighbors: int = 32,
           num_workers: int = 1, batch_size: Optional[int] = None) -> Tensor:
    """For each row of ``y``, the rows of ``x`` of the same example closer
    than ``r``: ``[2, M * min(N, max_num_neighbors)]`` pairs (index into
    ``y``, index into ``x``), as ``torch_geometric.nn.radius``; unused
    slots are ``(-1, -1)``. ``num_workers`` and ``batch_size`` are accepted
    and ignored."""
    return _search(x, y, r, batch_x, batch_y, max_num_neighbors,
                   exclude_self=False)


def radius_graph(x: Tensor, r: float, batch: Optional[Tensor] = None,
                 loop: bool = False, max_num_neighbors: int = 32,
                 flow: str = "source_to_target", num_workers: int = 1,
                 batch_size: Optional[int] = None) -> Tensor:
    """Edges between the nodes of a graph closer than ``r``, as
    ``torch_geometric.nn.radius_graph``: ``[2, N * K]`` with ``K`` the
    number of slots per node, ``min(N, max_num_neighbors)`` with ``loop``
    and ``min(N - 1, max_num_neighbors)`` without (a node is then never its
    own neighbour). Unused slots are ``(-1, -1)``."""
    check_flow(flow)
    pairs = _search(x, x, r, batch, batch, max_num_neighbors,
                    exclude_self=not loop)
    return pairs.flip([0]) if flow == "source_to_target" else pairs
