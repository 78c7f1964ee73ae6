"""Fixed-shape ``QuantileAggregation`` (and ``MedianAggregation``, its
subclass): group sizes come from a scatter with ``dim_size`` instead of
``bincount``, whose length depends on the largest index.

Example::

    >>> from torch_geometric.nn.aggr import MedianAggregation
    >>> median = MedianAggregation()
    >>> x = torch.tensor([[3.], [1.], [2.], [7.]])
    >>> QuantileAggregation.forward(median, x, torch.tensor([0, 0, 0, 2]),
    ...                             dim_size=3)
    tensor([[2.],
            [0.],
            [7.]])
"""
from typing import Optional

import torch
import torch_geometric.nn.aggr
from torch import Tensor
from torch_geometric.utils import cumsum

from .empty_slots import scatter, to_sink

__all__ = ["QuantileAggregation"]


def _pick(layer, x: Tensor, q_point: Tensor, dim: int, shape) -> Tensor:
    """The quantiles at fractional sorted positions ``q_point``."""
    lower = x.index_select(dim, q_point.floor().long())
    upper = x.index_select(dim, q_point.ceil().long())
    if layer.interpolation == "lower":
        return lower
    if layer.interpolation == "higher":
        return upper
    if layer.interpolation == "nearest":
        return x.index_select(dim, q_point.round().long())
    if layer.interpolation == "linear":
        return lower + (upper - lower) * q_point.frac().view(shape)
    return 0.5 * lower + 0.5 * upper


class QuantileAggregation(torch_geometric.nn.aggr.QuantileAggregation):
    """``torch_geometric.nn.aggr.QuantileAggregation`` with a fixed-shape
    forward (given ``dim_size``, which aggregations need when traced)."""

    def forward(self, x: Tensor, index: Optional[Tensor] = None,
                ptr: Optional[Tensor] = None,
                dim_size: Optional[int] = None, dim: int = -2) -> Tensor:
        """The quantiles ``q`` of each group of ``index``."""
        dim = x.dim() + dim if dim < 0 else dim
        self.assert_index_present(index)
        if dim_size is None:   # as PyG; inside a traced model: pass it
            dim_size = int(index.max()) + 1 if index.numel() else 0
        # Empty slots sort after every group and count in none.
        index = to_sink(index, dim_size)
        count = scatter(torch.ones_like(index), index, 0, dim_size,
                        reduce="sum")
        start = cumsum(count)[:-1].clamp(max=x.size(dim) - 1)
        q_point = (self.q * (count - 1) + start).t().reshape(-1)
        shape = [1] * x.dim()
        shape[dim] = -1
        index = index.view(shape).expand_as(x)
        # Sort by value, then stably by group: each group's values in order.
        x, x_perm = torch.sort(x, dim=dim)
        index = index.take_along_dim(x_perm, dim=dim)
        index, index_perm = torch.sort(index, dim=dim, stable=True)
        x = x.take_along_dim(index_perm, dim=dim)
        quantile = _pick(self, x, q_point, dim, shape)
        repeats = self.q.numel()
        empty = (count == 0).repeat_interleave(
            repeats, output_size=repeats * count.numel()).view(shape)
        out = quantile.masked_fill(empty, self.fill_value)
        if repeats > 1:
            size = list(out.shape)
            out = out.view(size[:dim] + [size[dim] // repeats, -1] +
                           size[dim + 2:])
        return out
