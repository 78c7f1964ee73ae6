"""``InstanceNorm`` for traced models: the running statistics are updated
in place (PyG reassigns the buffers, which a traced model may not do).
Give ``batch_size`` with a batch vector: otherwise it is read from the
batch's values, as PyG does, which a traced model may not do either.

Example::

    >>> norm = InstanceNorm(2)
    >>> x = torch.tensor([[1., 2.], [3., 6.], [5., 5.]])
    >>> norm(x, torch.tensor([0, 0, 1]), batch_size=2)
    tensor([[-1.0000, -1.0000],
            [ 1.0000,  1.0000],
            [ 0.0000,  0.0000]])
"""
from typing import Optional

import torch
import torch_geometric.nn
from torch import Tensor
from torch_geometric.utils import degree, scatter

__all__ = ["InstanceNorm"]

_PYG_FORWARD = torch_geometric.nn.InstanceNorm.forward


class InstanceNorm(torch_geometric.nn.InstanceNorm):
    """``torch_geometric.nn.InstanceNorm`` for fixed-size batches.

    ``InstanceNorm(in_channels, eps=1e-5, momentum=0.1, affine=False,
    track_running_stats=False)`` as PyG. Each graph's nodes are normalised
    by that graph's mean and variance; ``batch_size`` is the number of
    graphs of the batch (padding graphs included). Running statistics
    average over all ``batch_size`` graphs.
    """

    def forward(self, x: Tensor, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None) -> Tensor:
        """Normalises each graph's nodes (all nodes without ``batch``)."""
        if batch is None:
            return _PYG_FORWARD(self, x)
        if batch_size is None:   # as PyG; inside a traced model: pass it
            batch_size = int(batch.max()) + 1
        if self.training or not self.track_running_stats:
            norm = degree(batch, batch_size, dtype=x.dtype).clamp(min=1)
            norm = norm.view(-1, 1)
            mean = scatter(x, batch, 0, batch_size, reduce="sum") / norm
            x = x - mean.index_select(0, batch)
            var = scatter(x * x, batch, 0, batch_size, reduce="sum")
            unbiased_var = var / (norm - 1).clamp(min=1)
            var = var / norm
            _update_running_stats(self, mean, unbiased_var)
        else:
            mean = self.running_mean.view(1, -1).expand(batch_size, -1)
            var = self.running_var.view(1, -1).expand(batch_size, -1)
            x = x - mean.index_select(0, batch)
        out = x / (var + self.eps).sqrt().index_select(0, batch)
        if self.weight is not None and self.bias is not None:
            out = out * self.weight.view(1, -1) + self.bias.view(1, -1)
        return out


def _update_running_stats(norm: torch.nn.Module, mean: Tensor,
                          var: Tensor) -> None:
    """PyG's running-average update, in place (a module function: the
    override runs :meth:`InstanceNorm.forward` on PyG's class)."""
    momentum = norm.momentum
    with torch.no_grad():
        if norm.running_mean is not None:
            norm.running_mean.mul_(1 - momentum).add_(momentum * mean.mean(0))
        if norm.running_var is not None:
            norm.running_var.mul_(1 - momentum).add_(momentum * var.mean(0))
