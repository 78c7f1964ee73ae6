"""Fixed-shape ``knn_interpolate``: PyG's inverse-distance interpolation
over the ``k`` nearest points, on the fixed-shape :func:`knn`.

Example::

    >>> x = torch.tensor([[1.], [3.], [5.]])
    >>> pos_x = torch.tensor([[0.], [1.], [10.]])
    >>> pos_y = torch.tensor([[0.5], [9.]])
    >>> knn_interpolate(x, pos_x, pos_y, torch.tensor([0, 0, 1]),
    ...                 torch.tensor([0, 1]), k=2)
    tensor([[2.],
            [5.]])
"""
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter

from .neighbour_search import as_points
from .knn import knn

__all__ = ["knn_interpolate"]


def knn_interpolate(x: Tensor, pos_x: Tensor, pos_y: Tensor,
                    batch_x: Optional[Tensor] = None,
                    batch_y: Optional[Tensor] = None, k: int = 3,
                    num_workers: int = 1) -> Tensor:
    """Features at ``pos_y`` as the inverse-squared-distance weighted mean of
    ``x`` at the ``k`` nearest ``pos_x`` of the same example, as
    ``torch_geometric.nn.knn_interpolate``: ``[M, F]``.

    A query whose example has fewer than ``k`` points averages over those
    it has (empty slots weigh 0), as PyG; one whose example has no point at
    all gets zeros, where PyG divides 0 by 0.
    """
    pos_x, pos_y = as_points("pos_x", pos_x), as_points("pos_y", pos_y)
    num_queries = pos_y.size(0)
    if pos_x.size(0) == 0:   # no point anywhere: no neighbour for anyone
        return x.new_zeros((num_queries, ) + x.shape[1:])
    # Each query owns k consecutive slots: a static target index.
    y_idx = torch.arange(num_queries, device=x.device).repeat_interleave(k)
    with torch.no_grad():
        x_idx = knn(pos_x, pos_y, k, batch_x, batch_y)[1]
        valid = x_idx >= 0
        x_idx = x_idx.clamp(min=0)
        diff = pos_x.index_select(0, x_idx) - pos_y.index_select(0, y_idx)
        squared = (diff * diff).sum(dim=-1, keepdim=True)
        weights = valid.unsqueeze(-1) / squared.clamp(min=1e-16)
    weighted = x.index_select(0, x_idx) * weights.to(x.dtype)
    numerator = scatter(weighted, y_idx, 0, num_queries, reduce="sum")
    denominator = scatter(weights, y_idx, 0, num_queries, reduce="sum")
    return torch.where(denominator > 0,
                       numerator / denominator.clamp(min=1e-16).to(x.dtype),
                       torch.zeros_like(numerator))
