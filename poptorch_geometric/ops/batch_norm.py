"""Batch normalisation over the real rows of a fixed-size batch.

While a model that receives a fixed-size batch is traced, torch's
``BatchNorm1d`` (also inside PyG's ``BatchNorm``, ``MLP``, ``models.GIN``
and ``DiffGroupNorm``) takes its batch statistics over the real nodes,
edges or graphs only (the batch's mask with as many entries as the input
has rows): the mean, the variance, the running statistics and
``num_batches_tracked`` are those of eager PyTorch on the unpadded batch.
A mini-batch of padding only leaves the running statistics and
``num_batches_tracked`` as they were. Padding rows are normalised with the
real rows' statistics, so they stay finite. Without a fixed-size batch (or
in eval mode with running statistics) it is torch's own forward.

Example::

    >>> x = torch.tensor([[1., 10.], [3., 30.], [99., -99.]])
    >>> real = torch.tensor([True, True, False])
    >>> norm = torch.nn.BatchNorm1d(2, affine=False)
    >>> masked_batch_norm(x, real, norm.running_mean, norm.running_var,
    ...                   None, None, 0.1, 1e-5, norm.num_batches_tracked)
    tensor([[ -1.0000,  -1.0000],
            [  1.0000,   1.0000],
            [ 96.9995, -11.9000]])
    >>> norm.running_mean, norm.num_batches_tracked
    (tensor([0.2000, 2.0000]), tensor(1))
"""
from typing import Optional

import torch
from torch import Tensor

from .._padding_masks import real_rows
from ._masked import masked_mean

__all__ = ["BatchNorm1d", "masked_batch_norm"]

_TORCH_FORWARD = torch.nn.modules.batchnorm._BatchNorm.forward


class BatchNorm1d(torch.nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` whose batch statistics leave padding out
    while traced; its :meth:`forward` serves every ``_BatchNorm``
    (``BatchNorm1d/2d/3d``: rows are dim 0, channels dim 1)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 - torch's name
        """Normalises ``input`` with the statistics of its real rows."""
        batch_stats = self.training or (self.running_mean is None and
                                        self.running_var is None)
        real = real_rows(self, input.shape[0]) if batch_stats else None
        if real is None:
            return _TORCH_FORWARD(self, input)
        self._check_input_dim(input)
        track = self.training and self.track_running_stats
        return masked_batch_norm(
            input, real, self.running_mean if track else None,
            self.running_var if track else None, self.weight, self.bias,
            self.momentum, self.eps,
            self.num_batches_tracked if track else None)


def masked_batch_norm(x: Tensor, real: Tensor,
                      running_mean: Optional[Tensor],
                      running_var: Optional[Tensor],
                      weight: Optional[Tensor], bias: Optional[Tensor],
                      momentum: Optional[float], eps: float,
                      num_batches_tracked: Optional[Tensor] = None
                      ) -> Tensor:
    """``F.batch_norm(x, ..., training=True)`` over the rows of ``x`` where
    ``real`` is True. The running statistics given are updated in place as
    torch does (unbiased variance; ``momentum=None``: a cumulative average
    over ``num_batches_tracked``), unless no row is real."""
    dims = [0] + list(range(2, x.dim()))
    shape = (1, -1) + (1, ) * (x.dim() - 2)
    stats_x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    mean, count = masked_mean(stats_x, real, dims)
    centred = stats_x - mean
    var, _ = masked_mean(centred * centred, real, dims)
    out = centred * torch.rsqrt(var + eps)
    if weight is not None:
        out = out * weight.view(shape)
    if bias is not None:
        out = out + bias.view(shape)
    _update_running_stats(mean.flatten(), var.flatten(), count,
                          running_mean, running_var, momentum,
                          num_batches_tracked)
    return out.to(x.dtype)


def _update_running_stats(mean: Tensor, var: Tensor, count: Tensor,
                          running_mean: Optional[Tensor],
                          running_var: Optional[Tensor],
                          momentum: Optional[float],
                          num_batches_tracked: Optional[Tensor]) -> None:
    """In place, as a traced graph may only update buffers; a batch with no
    real row changes nothing (``torch.where`` keeps the old values)."""
    with torch.no_grad():
        seen = count > 0
        if num_batches_tracked is not None:
            num_batches_tracked.add_(seen.to(num_batches_tracked.dtype))
        if momentum is None:
            factor = 1.0 / num_batches_tracked.clamp(min=1).to(mean.dtype)
        else:
            factor = momentum
        unbiased = var * count / (count - 1).clamp(min=1)
        for running, value in ((running_mean, mean),
                               (running_var, unbiased)):
            if running is not None:
                updated = running * (1 - factor) + value * factor
                running.copy_(torch.where(seen, updated.to(running.dtype),
                                          running))
