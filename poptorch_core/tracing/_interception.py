"""Python-level interception while a model is traced for the IPU.

:class:`IpuFunctionMode` is a ``TorchFunctionMode`` active during the single
traced forward pass. It sees torch calls as the user wrote them, before they
are lowered to ATen, which is where these rules are best enforced:

- reading values back to the host (``.item()``, ``.tolist()``, ``.numpy()``,
  ``bool(t)``, ``int(t)``) and moves to the CPU are errors, as on an IPU;
- ``backward()`` inside forward is an error (PopTorch builds the backward);
- tensor factories called without ``device=`` are placed on the simulated
  device (the host device), as PopTorch forces them onto the IPU;
- every built-in torch loss is marked with ``poptorch::identity_loss``
  (reduction "none", an identity) so the executor can find the final loss,
  exactly as PopTorch lowers each torch loss to an identity loss.
"""
from typing import Any, Callable, Dict, Optional, Sequence, Set

import torch
import torch.nn.functional as F
import torch.fx.traceback as fx_traceback
from torch.overrides import TorchFunctionMode

from .._logging import logger
from . import rules

__all__: list = []

_LOSS_NAMES = (
    "l1_loss", "mse_loss", "nll_loss", "cross_entropy", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "kl_div", "smooth_l1_loss",
    "huber_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
    "multilabel_margin_loss", "multi_margin_loss", "cosine_embedding_loss",
    "margin_ranking_loss", "hinge_embedding_loss", "poisson_nll_loss",
    "gaussian_nll_loss", "triplet_margin_loss",
    "triplet_margin_with_distance_loss", "ctc_loss")
LOSS_FUNCTIONS: Set[Callable] = {
    getattr(F, name) for name in _LOSS_NAMES if hasattr(F, name)}

_HOST_READS: Dict[Callable, str] = {
    torch.Tensor.item: ".item()",
    torch.Tensor.tolist: ".tolist()",
    torch.Tensor.numpy: ".numpy()",
    torch.Tensor.__bool__: "bool(tensor) (a Python branch on a tensor value)",
    torch.Tensor.__int__: "int(tensor)",
    torch.Tensor.__float__: "float(tensor)",
    torch.Tensor.__index__: "using a tensor as a Python index",
}
_BACKWARD_CALLS = {torch.Tensor.backward, torch.autograd.backward,
                   torch.autograd.grad}
_FACTORIES = {
    getattr(torch, name) for name in (
        "zeros", "ones", "empty", "full", "rand", "randn", "randint",
        "randperm", "arange", "range", "linspace", "logspace", "eye",
        "tensor", "as_tensor", "scalar_tensor", "empty_strided")
    if hasattr(torch, name)}


def _is_cpu_target(args: Sequence[Any], kwargs: Dict[str, Any]) -> bool:
    candidates = list(args[1:]) + [kwargs.get("device")]
    for arg in candidates:
        if isinstance(arg, str) and arg.split(":")[0] == "cpu":
            return True
        if isinstance(arg, torch.device) and arg.type == "cpu":
            return True
    return False


class IpuFunctionMode(TorchFunctionMode):
    """Enforces the host-interaction rules and marks losses while tracing.

    Args:
        device: the simulated device's host device; factories without an
            explicit device are created there.
        identity_loss: the ``poptorch::identity_loss`` op overload.
        excludes: path fragments never reported as the user's source line.
        on_op: called before each intercepted torch call (the executor
            records which block each op belongs to).
    """

    def __init__(self, device: torch.device, identity_loss: Callable,
                 excludes: Sequence[str] = (),
                 on_op: Optional[Callable[[], None]] = None):
        super().__init__()
        self._on_op = on_op
        self._device = device
        self._identity_loss = identity_loss
        self._excludes = tuple(excludes)
        self._warned_factories: Set[str] = set()

    def _location(self) -> str:
        return rules.current_user_location(self._excludes)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _HOST_READS:
            raise rules.rule_error(
                f"Illegal call to {_HOST_READS[func]} while the model is "
                "traced for the IPU: IPU tensors have no values on the host "
                "while the model is compiled, and Python control flow is "
                "frozen at trace time. Keep the value as a tensor; for "
                "data-dependent choices use torch.where or poptorch.cond, and "
                "pass sizes (for example global_add_pool(x, batch, "
                "size=num_graphs)) as Python ints.", self._location())
        if func is torch.Tensor.cpu or (func is torch.Tensor.to and
                                        _is_cpu_target(args, kwargs)):
            raise rules.rule_error(rules.MOVE_TO_CPU_MSG, self._location())
        if func in _BACKWARD_CALLS:
            raise rules.rule_error(
                "Calling backward() inside the model's forward is not "
                "supported: PopTorch builds the backward pass itself. Return "
                "the loss from forward (wrap it in poptorch.identity_loss if "
                "it is not a torch loss) and run the model with "
                "poptorch.trainingModel.", self._location())
        if func in _FACTORIES and kwargs.get("device") is None:
            kwargs = dict(kwargs, device=self._device)
            name = func.__name__
            if name not in self._warned_factories:
                self._warned_factories.add(name)
                logger.warning("No device set in torch.%s(): forcing to IPU",
                               name)
        if self._on_op is not None:
            self._on_op()
        out = func(*args, **kwargs)
        if func in LOSS_FUNCTIONS and isinstance(out, torch.Tensor):
            # reduction 2 ("none") is an identity: the loss keeps the value
            # and the reduction torch computed, and becomes findable. The
            # torch loss's name is kept for messages about the loss.
            name = (f"F.{func.__name__}(reduction="
                    f"{kwargs.get('reduction', 'mean')!r})")
            with fx_traceback.annotate({"poptorch_loss": name}):
                out = self._identity_loss(out, 2)
        return out


def make_mode(device: torch.device,
              excludes: Optional[Sequence[str]] = None,
              on_op: Optional[Callable[[], None]] = None) -> IpuFunctionMode:
    from .. import ops  # noqa: F401  (registers poptorch::identity_loss)
    return IpuFunctionMode(device, torch.ops.poptorch.identity_loss.default,
                           excludes or (), on_op)
