"""Fixed-shape ``knn``: ``k`` slots per query whatever the data, so a model
that searches neighbours in ``forward`` traces once (``knn_graph``, in its
own module as upstream lays it out, searches the same way).

A query whose example has fewer than ``k`` candidate points gets its nearest
ones first, then slots whose both entries are -1. Points of other examples
(padding graphs included) are never neighbours. Among points at the same
distance, the lower index comes first.

Example::

    >>> x = torch.tensor([[0.], [1.], [3.], [10.], [11.]])
    >>> batch = torch.tensor([0, 0, 0, 1, 1])
    >>> knn(x, torch.tensor([[0.9], [10.4]]), 2, batch, torch.tensor([0, 1]))
    tensor([[0, 0, 1, 1],
            [1, 0, 3, 4]])
"""
from typing import Optional

from torch import Tensor

from .neighbour_search import (as_points, batch_vector, check_batch, distances,
                          nearest_slots, to_edge_slots)

__all__ = ["knn", "knn_pairs", "check_flow"]

_FLOWS = ("source_to_target", "target_to_source")


def check_flow(flow: str) -> None:
    """Raises ``ValueError`` unless ``flow`` is one of PyG's two flows."""
    if flow not in _FLOWS:
        raise ValueError(f"flow must be one of {_FLOWS}, got {flow!r}.")


def knn_pairs(x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor],
              batch_y: Optional[Tensor], cosine: bool,
              exclude_self: bool) -> Tensor:
    """``[2, M * k]`` pairs (index into ``y``, index into ``x``), nearest
    first; ``exclude_self`` never pairs row ``i`` of ``y`` with row ``i``
    of ``x`` (a graph searched against itself)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}.")
    x, y = as_points("x", x), as_points("y", y)
    batch_x, batch_y = batch_vector(batch_x, x), batch_vector(batch_y, y)
    check_batch("batch_x", batch_x, x)
    check_batch("batch_y", batch_y, y)
    dist = distances(x, y, batch_x, batch_y, cosine, exclude_self)
    return to_edge_slots(*nearest_slots(dist, k))


def knn(x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor] = None,
        batch_y: Optional[Tensor] = None, cosine: bool = False,
        num_workers: int = 1, batch_size: Optional[int] = None) -> Tensor:
    """For each row of ``y``, its ``k`` nearest rows of ``x`` in the same
    example, nearest first: ``[2, M * k]`` pairs (index into ``y``, index
    into ``x``), as ``torch_geometric.nn.knn``; empty slots are ``(-1, -1)``.

    ``cosine`` uses ``1 - cosine similarity`` as the distance.
    ``num_workers`` and ``batch_size`` are accepted and ignored.
    """
    return knn_pairs(x, y, k, batch_x, batch_y, cosine, exclude_self=False)
