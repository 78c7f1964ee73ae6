"""``InstanceNorm`` for traced models: the running statistics are updated
in place (PyG reassigns the buffers, which a traced model may not do), and
padding is left out of the statistics of a fixed-size batch.

Give ``batch_size`` with a batch vector, or pass the batch's own ``batch``
vector of a fixed-size batch that the traced model receives (its number of
graph slots is then known): otherwise it is read from the batch's values,
as PyG does, which a traced model may not do.

While traced on a fixed-size batch, the running statistics average over
the real graphs only (PyG's average over all graph slots would count every
padding graph), and without ``batch`` (all nodes as one graph, as inside
``models.GIN``'s MLPs) the statistics are those of the real nodes. A
mini-batch of padding only leaves the running statistics unchanged.

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

from .._padding_masks import graph_slots, real_rows
from .batch_norm import masked_batch_norm

__all__ = ["InstanceNorm"]

_PYG_FORWARD = torch_geometric.nn.InstanceNorm.forward


class InstanceNorm(torch_geometric.nn.InstanceNorm):
    """``torch_geometric.nn.InstanceNorm`` for fixed-size batches.

    ``InstanceNorm(in_channels, eps=1e-5, momentum=0.1, affine=False,
    track_running_stats=False)`` as PyG. Each graph's nodes are normalised
    by that graph's mean and variance; ``batch_size`` is the number of
    graphs of the batch (padding graphs included). Running statistics
    average over the real graphs of a traced fixed-size batch (over all
    ``batch_size`` graphs otherwise).
    """

    def forward(self, x: Tensor, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None) -> Tensor:
        """Normalises each graph's nodes (all nodes without ``batch``)."""
        input_stats = self.training or not self.track_running_stats
        if batch is None:
            real = real_rows(self, x.shape[0]) if input_stats else None
            if real is None:
                return _PYG_FORWARD(self, x)
            return masked_batch_norm(
                x, real, self.running_mean if self.training else None,
                self.running_var if self.training else None, self.weight,
                self.bias, self.momentum, self.eps)
        if batch_size is None:
            batch_size = graph_slots(batch)
        if batch_size is None:   # as PyG; inside a traced model: pass it
            batch_size = int(batch.max()) + 1
        if input_stats:
            norm = degree(batch, batch_size, dtype=x.dtype).clamp(min=1)
            norm = norm.view(-1, 1)
            mean = scatter(x, batch, 0, batch_size, reduce="sum") / norm
            x = x - mean.index_select(0, batch)
            var = scatter(x * x, batch, 0, batch_size, reduce="sum")
            unbiased_var = var / (norm - 1).clamp(min=1)
            var = var / norm
            if self.training:
                _update_running_stats(self, mean, unbiased_var, batch_size)
        else:
            mean = self.running_mean.view(1, -1).expand(batch_size, -1)
            var = self.running_var.view(1, -1).expand(batch_size, -1)
            x = x - mean.index_select(0, batch)
        out = x / (var + self.eps).sqrt().index_select(0, batch)
        if self.weight is not None and self.bias is not None:
            out = out * self.weight.view(1, -1) + self.bias.view(1, -1)
        return out


def _update_running_stats(norm: torch.nn.Module, mean: Tensor, var: Tensor,
                          batch_size: int) -> None:
    """PyG's running-average update, in place, over the real graphs (a
    module function: the override runs :meth:`InstanceNorm.forward` on
    PyG's class)."""
    if norm.running_mean is None and norm.running_var is None:
        return
    real = real_rows(norm, batch_size)
    if real is None:
        real = torch.ones(batch_size, dtype=torch.bool, device=mean.device)
    momentum = norm.momentum
    with torch.no_grad():
        count = real.sum().to(mean.dtype)
        seen = count > 0
        for running, value in ((norm.running_mean, mean),
                               (norm.running_var, var)):
            if running is not None:
                average = torch.where(real.view(-1, 1), value,
                                      torch.zeros_like(value)).sum(0)
                average = average / count.clamp(min=1)
                updated = (1 - momentum) * running + momentum * average
                running.copy_(torch.where(seen, updated, running))
