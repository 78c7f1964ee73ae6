"""Fixed-shape ``nearest``: one result per point, so the shape was never
data-dependent; this version also runs without pyg-lib and marks points
whose example has no candidate.

Example::

    >>> x = torch.tensor([[-1., -1.], [-1., 1.], [1., -1.], [5., 5.]])
    >>> y = torch.tensor([[-1., 0.], [1., 0.]])
    >>> nearest(x, y, torch.tensor([0, 0, 0, 1]), torch.tensor([0, 0]))
    tensor([ 0,  0,  1, -1])
"""
from typing import Optional

import torch
from torch import Tensor

from .neighbour_search import as_points, batch_vector, check_batch, distances

__all__ = ["nearest"]


def nearest(x: Tensor, y: Tensor, batch_x: Optional[Tensor] = None,
            batch_y: Optional[Tensor] = None) -> Tensor:
    """For each row of ``x``, the index of the nearest row of ``y`` in the
    same example (ties: the lower index), as
    ``torch_geometric.nn.nearest``; -1 when its example has no row in
    ``y``."""
    x, y = as_points("x", x), as_points("y", y)
    batch_x, batch_y = batch_vector(batch_x, x), batch_vector(batch_y, y)
    check_batch("batch_x", batch_x, x)
    check_batch("batch_y", batch_y, y)
    dist = distances(y, x, batch_y, batch_x)
    if dist.size(1) == 0:
        return torch.full((x.size(0), ), -1, dtype=torch.long,
                          device=x.device)
    # argmin returns the first minimum: the lower index on ties.
    best = dist.argmin(dim=1)
    return torch.where(dist.min(dim=1).values.isfinite(), best, -1)
