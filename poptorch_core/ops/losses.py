"""``identity_loss``: marks the value the backward pass starts from.

The op is ``torch.ops.poptorch.identity_loss(Tensor x, int reduction)`` with
reduction 0 = sum, 1 = mean, 2 = none (a copy). The executor finds a model's
losses by that node in the captured graph.

Example::

    >>> x = torch.tensor([1.0, 2.0, 3.0])
    >>> poptorch.identity_loss(x, reduction="mean")
    tensor(2.)
"""
from typing import Any, Tuple

import torch

from ._registration import define_op

__all__ = ["identity_loss"]

_REDUCTIONS = {"sum": 0, "mean": 1, "none": 2}
_SUM, _MEAN, _NONE = 0, 1, 2


def _check_reduction(reduction: int) -> None:
    if reduction not in (_SUM, _MEAN, _NONE):
        raise ValueError(
            f"poptorch.identity_loss reduction must be 0 (sum), 1 (mean) or "
            f"2 (none), got {reduction}.")


def _kernel(x: torch.Tensor, reduction: int) -> torch.Tensor:
    _check_reduction(reduction)
    if reduction == _SUM:
        return x.sum()
    if reduction == _MEAN:
        return x.mean()
    return x.clone()


def _fake(x: torch.Tensor, reduction: int) -> torch.Tensor:
    _check_reduction(reduction)
    return torch.empty_like(x) if reduction == _NONE else x.new_empty(())


def _setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    del output
    x, ctx.reduction = inputs
    ctx.shape, ctx.numel = x.shape, x.numel()


def _backward(ctx: Any, grad: torch.Tensor) -> Tuple[Any, None]:
    if ctx.reduction == _NONE:
        return grad, None
    grad = grad.expand(ctx.shape)
    if ctx.reduction == _MEAN:
        grad = grad / ctx.numel
    return grad, None


_identity_loss = define_op("identity_loss",
                           "(Tensor x, int reduction) -> Tensor", _kernel,
                           _fake, _backward, _setup_context)


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Marks ``x`` as the model's loss and reduces it.

    Args:
        x: the loss values.
        reduction: ``"sum"``, ``"mean"`` or ``"none"`` (``x`` unchanged).

    The same op runs on plain CPU calls and inside the simulated IPU, where
    training starts the backward from it (seeded with ones for ``"none"``).
    """
    if isinstance(reduction, str) and reduction in _REDUCTIONS:
        return _identity_loss(x, _REDUCTIONS[reduction])
    # PopTorch asserts here; raise explicitly so that -O cannot skip it.
    raise AssertionError("Unsupported reduction type!")
