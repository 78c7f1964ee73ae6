"""PopTorch's optimizer classes: torch's optimizers plus IPU arguments.

Each class takes torch 2.13's constructor arguments, in torch's order,
followed by PopTorch's extra arguments. Every argument defaults to ``None``,
meaning "use the default" (torch's default for torch's arguments). Arguments
passed explicitly are *variable* (they may change after compilation through
``setOptimizer``); the others are constant (see :class:`VariableAttributes`).
"""
import inspect
from typing import Any, Callable, Iterable, Optional, Tuple

import torch

from .._logging import logger
from ._algorithms import init_state, update
from ._base import Optimizer
from ._types import OptimizerType

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "LAMB"]

_Params = Iterable[Any]
_Beta = Tuple[float, float]


class SGD(Optimizer, torch.optim.SGD):
    """Stochastic gradient descent with PopTorch's IPU options.

    Extra args:
        loss_scaling: the loss is multiplied by it before the backward pass
            and the gradients divided by it before the update (default 1.0).
        velocity_scaling: scaling of the velocity tensor; only used with
            ``use_combined_accum=True`` (a per-group attribute then).
            Default 1.0.
        use_combined_accum: combine the gradient accumulator and the
            momentum in one tensor (``SGD1``); default False (``SGD2``).
        accum_type: dtype of the gradient accumulator (float16/float32).
        velocity_accum_type: dtype of the velocity (float16/float32).
        max_grad_norm: clip the global gradient norm to this (default inf).

    Example::

        >>> class Regression(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = torch.nn.Linear(4, 1)
        ...     def forward(self, x):
        ...         return poptorch.identity_loss(self.fc(x) ** 2, "mean")
        >>> model = Regression()
        >>> opt = poptorch.optim.SGD(model.parameters(), lr=0.01,
        ...                          momentum=0.9, loss_scaling=128.0)
        >>> training_model = poptorch.trainingModel(model, optimizer=opt)
        >>> before = model.fc.weight.detach().clone()
        >>> loss = training_model(torch.randn(2, 4))
        >>> torch.equal(model.fc.weight, before)   # one step was taken
        False
    """
    _torch_class = torch.optim.SGD
    _extra_args = ("loss_scaling", "velocity_scaling", "use_combined_accum",
                   "accum_type", "velocity_accum_type", "max_grad_norm")

    def __init__(self,
                 params: _Params,
                 lr: Optional[float] = None,
                 momentum: Optional[float] = None,
                 dampening: Optional[float] = None,
                 weight_decay: Optional[float] = None,
                 nesterov: Optional[bool] = None,
                 *,
                 maximize: Optional[bool] = None,
                 foreach: Optional[bool] = None,
                 differentiable: Optional[bool] = None,
                 fused: Optional[bool] = None,
                 loss_scaling: Optional[float] = None,
                 velocity_scaling: Optional[float] = None,
                 use_combined_accum: Optional[bool] = None,
                 accum_type: Optional[torch.dtype] = None,
                 velocity_accum_type: Optional[torch.dtype] = None,
                 max_grad_norm: Optional[float] = None) -> None:
        args = dict(locals())
        self._init_torch_optimizer(params, args)
        if use_combined_accum:
            self._init_poptorch(args, group_extras=("velocity_scaling", ))
            return
        if velocity_scaling is not None:
            logger.warning(
                "velocity_scaling value ignored: it only applies to SGD with "
                "use_combined_accum=True (the separate variant scales the "
                "velocity by the loss scaling instead).")
        self._init_poptorch(args, ignored_extras=("velocity_scaling", ))


class Adam(Optimizer, torch.optim.Adam):
    """Adam with PopTorch's IPU options (``amsgrad`` is not supported).

    Extra args:
        loss_scaling: see :class:`SGD` (default 1.0).
        accum_type: dtype of the gradient accumulator (float16/float32).
        first_order_momentum_accum_type: dtype of the first moment.
        second_order_momentum_accum_type: dtype of the second moment.
        max_grad_norm: clip the global gradient norm to this (default inf).

    Example::

        >>> model = torch.nn.Linear(4, 2)
        >>> opt = poptorch.optim.Adam(model.parameters(), lr=1e-3,
        ...     first_order_momentum_accum_type=torch.float16)
        >>> opt.first_order_momentum_accum_type
        torch.float16
    """
    _torch_class = torch.optim.Adam
    _extra_args = ("loss_scaling", "accum_type",
                   "first_order_momentum_accum_type",
                   "second_order_momentum_accum_type", "max_grad_norm")

    def __init__(self,
                 params: _Params,
                 lr: Optional[float] = None,
                 betas: Optional[_Beta] = None,
                 eps: Optional[float] = None,
                 weight_decay: Optional[float] = None,
                 amsgrad: Optional[bool] = None,
                 *,
                 foreach: Optional[bool] = None,
                 maximize: Optional[bool] = None,
                 capturable: Optional[bool] = None,
                 differentiable: Optional[bool] = None,
                 fused: Optional[bool] = None,
                 decoupled_weight_decay: Optional[bool] = None,
                 loss_scaling: Optional[float] = None,
                 accum_type: Optional[torch.dtype] = None,
                 first_order_momentum_accum_type: Optional[torch.dtype] = None,
                 second_order_momentum_accum_type: Optional[torch.dtype] = None,
                 max_grad_norm: Optional[float] = None) -> None:
        args = dict(locals())
        self._init_torch_optimizer(params, args)
        self._init_poptorch(args)


class AdamW(Optimizer, torch.optim.AdamW):
    """AdamW with PopTorch's IPU options (``amsgrad`` is not supported).

    Extra args:
        loss_scaling: see :class:`SGD` (default 1.0).
        bias_correction: apply Adam's bias correction (default True).
        accum_type: see :class:`Adam`.
        first_order_momentum_accum_type: see :class:`Adam`.
        second_order_momentum_accum_type: see :class:`Adam`.
        max_grad_norm: clip the global gradient norm to this (default inf).

    Example::

        >>> model = torch.nn.Linear(4, 2)
        >>> opt = poptorch.optim.AdamW(model.parameters(), lr=1e-3,
        ...                            bias_correction=False)
        >>> opt.bias_correction
        False
    """
    _torch_class = torch.optim.AdamW
    _extra_args = ("loss_scaling", "bias_correction", "accum_type",
                   "first_order_momentum_accum_type",
                   "second_order_momentum_accum_type", "max_grad_norm")

    def __init__(self,
                 params: _Params,
                 lr: Optional[float] = None,
                 betas: Optional[_Beta] = None,
                 eps: Optional[float] = None,
                 weight_decay: Optional[float] = None,
                 amsgrad: Optional[bool] = None,
                 *,
                 maximize: Optional[bool] = None,
                 foreach: Optional[bool] = None,
                 capturable: Optional[bool] = None,
                 differentiable: Optional[bool] = None,
                 fused: Optional[bool] = None,
                 loss_scaling: Optional[float] = None,
                 bias_correction: Optional[bool] = None,
                 accum_type: Optional[torch.dtype] = None,
                 first_order_momentum_accum_type: Optional[torch.dtype] = None,
                 second_order_momentum_accum_type: Optional[torch.dtype] = None,
                 max_grad_norm: Optional[float] = None) -> None:
        args = dict(locals())
        self._init_torch_optimizer(params, args)
        self._init_poptorch(args)


class RMSprop(Optimizer, torch.optim.RMSprop):
    """RMSprop with PopTorch's IPU options.

    All parameter groups must agree on ``centered``.

    Extra args:
        loss_scaling: see :class:`SGD` (default 1.0).
        accum_type: dtype of the gradient accumulator.
        first_order_momentum_accum_type: dtype of the momentum (and of the
            centred mean).
        second_order_momentum_accum_type: dtype of the mean square.
        use_tf_variant: TensorFlow's RMSprop: the mean square starts at 1,
            eps goes inside the square root, and the learning rate is folded
            into the momentum buffer (default False).

    Example::

        >>> model = torch.nn.Linear(4, 2)
        >>> opt = poptorch.optim.RMSprop(model.parameters(), lr=0.01,
        ...                              momentum=0.9, use_tf_variant=True)
        >>> opt.use_tf_variant
        True
    """
    _torch_class = torch.optim.RMSprop
    _extra_args = ("loss_scaling", "accum_type",
                   "first_order_momentum_accum_type",
                   "second_order_momentum_accum_type", "use_tf_variant")

    def __init__(self,
                 params: _Params,
                 lr: Optional[float] = None,
                 alpha: Optional[float] = None,
                 eps: Optional[float] = None,
                 weight_decay: Optional[float] = None,
                 momentum: Optional[float] = None,
                 centered: Optional[bool] = None,
                 capturable: Optional[bool] = None,
                 foreach: Optional[bool] = None,
                 maximize: Optional[bool] = None,
                 differentiable: Optional[bool] = None,
                 loss_scaling: Optional[float] = None,
                 accum_type: Optional[torch.dtype] = None,
                 first_order_momentum_accum_type: Optional[torch.dtype] = None,
                 second_order_momentum_accum_type: Optional[torch.dtype] = None,
                 use_tf_variant: Optional[bool] = None) -> None:
        args = dict(locals())
        self._init_torch_optimizer(params, args)
        self._init_poptorch(args)


_LAMB_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                  "weight_decay": 1e-2}


class LAMB(Optimizer, torch.optim.Optimizer):
    """Layer-wise Adaptive Moments optimizer (You et al., 2019).

    Adam-style moments with a per-tensor trust ratio:
    ``upd = (m/bc1) / (sqrt(v)/sqrt(bc2) + eps) + weight_decay*p``,
    ``p -= lr * trust * upd`` with ``trust = min(||p||, max_weight_norm) /
    ||upd||`` (1 when either norm is 0). ``step()`` runs this on the CPU;
    the IPU uses the same rule.

    Args:
        lr: learning rate (default 1e-3).
        betas: moment decay rates (default (0.9, 0.999)).
        eps: added to the denominator (default 1e-8).
        weight_decay: decoupled weight decay (default 1e-2).
        bias_correction: correct the moments' bias (default True).
        loss_scaling: see :class:`SGD` (default 1.0).
        max_weight_norm: clamp of the weight norm in the trust ratio
            (default 65500.0).
        accum_type: see :class:`Adam`.
        first_order_momentum_accum_type: see :class:`Adam`.
        second_order_momentum_accum_type: see :class:`Adam`.

    Example::

        >>> model = torch.nn.Linear(4, 1)
        >>> opt = poptorch.optim.LAMB(model.parameters(), lr=1e-2)
        >>> before = model.weight.detach().clone()
        >>> model(torch.randn(2, 4)).sum().backward()
        >>> opt.step()      # LAMB also runs on the host
        >>> torch.equal(model.weight, before)
        False
    """
    _extra_args = ("bias_correction", "loss_scaling", "max_weight_norm",
                   "accum_type", "first_order_momentum_accum_type",
                   "second_order_momentum_accum_type")

    def __init__(self,
                 params: _Params,
                 lr: Optional[float] = None,
                 betas: Optional[_Beta] = None,
                 eps: Optional[float] = None,
                 weight_decay: Optional[float] = None,
                 bias_correction: Optional[bool] = None,
                 loss_scaling: Optional[float] = None,
                 max_weight_norm: Optional[float] = None,
                 accum_type: Optional[torch.dtype] = None,
                 first_order_momentum_accum_type: Optional[torch.dtype] = None,
                 second_order_momentum_accum_type: Optional[torch.dtype] = None
                 ) -> None:
        args = dict(locals())
        defaults = {name: default if args[name] is None else args[name]
                    for name, default in _LAMB_DEFAULTS.items()}
        _check_lamb_defaults(defaults)
        torch.optim.Optimizer.__init__(self, params, defaults)
        self._init_poptorch(args, group_extras=("max_weight_norm", ))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One LAMB update of every parameter that has a gradient (CPU)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        kind = (OptimizerType.LAMB
                if self.bias_correction else OptimizerType.LAMB_NO_BIAS)
        attrs = vars(self)
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                init_state(kind, param, group, attrs, state)
                update(kind, param, param.grad, state, group, attrs)
        return loss


def _check_lamb_defaults(defaults: dict) -> None:
    if not defaults["lr"] >= 0.0:
        raise ValueError(f"Invalid learning rate: {defaults['lr']}")
    if not defaults["eps"] >= 0.0:
        raise ValueError(f"Invalid epsilon value: {defaults['eps']}")
    if not all(0.0 <= beta < 1.0 for beta in defaults["betas"]):
        raise ValueError(f"Invalid betas: {defaults['betas']} (each must be "
                         "in [0, 1))")


def _check_signature(cls: type) -> None:
    """Asserts that ``cls.__init__`` takes torch's arguments, in torch's
    order and kinds, then PopTorch's extra arguments, all defaulting to
    None. Run at import so that a torch upgrade that changes a signature
    fails loudly instead of silently dropping an argument."""
    ours = list(inspect.signature(cls.__init__).parameters.values())
    theirs = list(inspect.signature(
        cls._torch_class.__init__).parameters.values())
    names = [p.name for p in ours]
    expected = [p.name for p in theirs] + list(cls._extra_args)
    if names != expected:
        raise AssertionError(
            f"poptorch.optim.{cls.__name__} arguments {names} must be "
            f"{cls._torch_class.__name__}'s followed by the extras: {expected}")
    for mine, torch_param in zip(ours, theirs):
        if mine.kind != torch_param.kind:
            raise AssertionError(
                f"poptorch.optim.{cls.__name__}: argument {mine.name} must be "
                f"{torch_param.kind.description} as in torch")
    if not all(p.default is None for p in ours[2:]):
        raise AssertionError(
            f"poptorch.optim.{cls.__name__}: every argument must default to None")


for _cls in (SGD, Adam, AdamW, RMSprop):
    _check_signature(_cls)
del _cls
