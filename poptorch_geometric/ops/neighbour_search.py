"""What the fixed-shape neighbour searches share: input checks, the masked
distance matrix and the choice of the nearest slots.

Every search computes all query-to-point distances (the matrix is small for
fixed-size batches), sets those between different examples to infinity,
and sorts each query's row with a stable sort. So the tie-break rule is:
among points at the same distance, the one with the lower index in ``x``
comes first.
"""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from .empty_slots import mark_empty_slots

__all__ = ["as_points", "batch_vector", "check_batch", "distances",
           "nearest_slots", "to_edge_slots"]


def as_points(name: str, value: Tensor) -> Tensor:
    """``value`` as a float matrix of points (a 1-D tensor is a column)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got "
                        f"{type(value).__name__}.")
    if value.dim() == 1:
        value = value.unsqueeze(-1)
    if value.dim() != 2:
        raise ValueError(f"{name} must be 1-D or 2-D (one row per point), "
                         f"got shape {tuple(value.shape)}.")
    return value if value.is_floating_point() else value.float()


def batch_vector(batch: Optional[Tensor], points: Tensor) -> Tensor:
    """``batch``, or every point in example 0 when it is None."""
    if batch is None:
        return torch.zeros(points.size(0), dtype=torch.long,
                           device=points.device)
    return batch


def check_batch(name: str, batch: Tensor, points: Tensor) -> None:
    """A batch vector has one example index per point."""
    if batch.dim() != 1 or batch.size(0) != points.size(0):
        raise ValueError(f"{name} must be 1-D with one example index per "
                         f"point ({points.size(0)}), got shape "
                         f"{tuple(batch.shape)}.")


def distances(x: Tensor, y: Tensor, batch_x: Tensor, batch_y: Tensor,
              cosine: bool = False, exclude_self: bool = False) -> Tensor:
    """``[M, N]`` distances from each row of ``y`` to each row of ``x``:
    Euclidean, or ``1 - cosine similarity``; infinite between points of
    different examples (and on the diagonal with ``exclude_self``)."""
    if x.size(1) != y.size(1):
        raise ValueError(f"x and y must have the same number of features, "
                         f"got {x.size(1)} and {y.size(1)}.")
    if cosine:
        dist = 1 - torch.nn.functional.normalize(y, dim=-1) @ \
            torch.nn.functional.normalize(x, dim=-1).t()
    else:
        # The exact difference-based distance: the matrix-product shortcut
        # loses precision for nearby points and reorders near-ties.
        dist = torch.cdist(y.unsqueeze(0), x.unsqueeze(0),
                           compute_mode="donot_use_mm_for_euclid_dist")[0]
    other = batch_y.unsqueeze(1) != batch_x.unsqueeze(0)
    if exclude_self:
        other = other | torch.eye(y.size(0), x.size(0), dtype=torch.bool,
                                  device=x.device)
    return dist.masked_fill(other, math.inf)


def nearest_slots(dist: Tensor, slots: int,
                  limit: float = math.inf) -> Tuple[Tensor, Tensor]:
    """The ``slots`` nearest points of each query row of ``dist``, nearest
    first (ties: lower index first), as ``(index, valid)`` of shape
    ``[M, slots]``; a slot is valid when its distance is below ``limit``.
    Slots beyond the number of points are invalid."""
    values, index = torch.sort(dist, dim=1, stable=True)
    values, index = values[:, :slots], index[:, :slots]
    missing = slots - index.size(1)
    if missing > 0:
        values = torch.nn.functional.pad(values, (0, missing),
                                         value=math.inf)
        index = torch.nn.functional.pad(index, (0, missing), value=0)
    return index, values < limit


def to_edge_slots(index: Tensor, valid: Tensor) -> Tensor:
    """``[2, M * slots]`` (query, point) pairs, query-major; both entries of
    an invalid slot are -1."""
    query = torch.arange(index.size(0), device=index.device).unsqueeze(1)
    row = torch.where(valid, query.expand_as(index), -1)
    col = torch.where(valid, index, -1)
    return mark_empty_slots(torch.stack([row.reshape(-1), col.reshape(-1)]))
