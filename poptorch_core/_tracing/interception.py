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
from . import dynamic_index, half_casting, host_values, integer_operands, rules

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


class IpuFunctionMode(TorchFunctionMode):
    """Enforces the host-interaction rules and marks losses while tracing.

    Args:
        device: the simulated device's host device; factories without an
            explicit device are created there.
        identity_loss: the ``poptorch::identity_loss`` op overload.
        excludes: path fragments never reported as the user's source line.
        on_op: called before each intercepted torch call on IPU values (the
            executor records which block each op belongs to).
    """

    def __init__(self, device: torch.device, identity_loss: Callable,
                 excludes: Sequence[str] = (),
                 on_op: Optional[Callable[[], None]] = None):
        super().__init__()
        self._on_op = on_op
        self._device = device
        self._devices = host_values.Devices(device)
        self._cpu_tensors = host_values.CpuTensors()
        self._identity_loss = identity_loss
        self._excludes = tuple(excludes)
        self._warned_factories: Set[str] = set()

    def _location(self) -> str:
        return rules.current_user_location(self._excludes)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tracer = host_values.active_tracer()
        if tracer is None:  # make_fx's own set-up, before the model runs
            return func(*args, **kwargs)
        args, kwargs = self._devices.map_ipu(args, kwargs)
        tensors = host_values.tensor_leaves(args, kwargs)
        on_ipu = any(host_values.is_ipu_value(t, tracer) for t in tensors)
        if func in _FACTORIES:
            return self._factory(func, args, kwargs)
        if tensors and not on_ipu:
            return self._host_call(func, args, kwargs, tensors)
        self._check_ipu_call(func, args, kwargs, tensors)
        special = self._dynamic_index(func, args, kwargs, tracer)
        if special is not _NOT_SPECIAL:
            return special
        if self._on_op is not None:
            self._on_op()
        cast_call = half_casting.cast_mixed(func, args, kwargs)
        out = self._call(func, args, kwargs) if cast_call is None else \
            self._call(cast_call, (), {}, name=_name(func))
        if func in LOSS_FUNCTIONS and isinstance(out, torch.Tensor):
            # reduction 2 ("none") is an identity: the loss keeps the value
            # and the reduction torch computed, and becomes findable. The
            # torch loss's name is kept for messages about the loss.
            name = (f"F.{func.__name__}(reduction="
                    f"{kwargs.get('reduction', 'mean')!r})")
            with fx_traceback.annotate({"poptorch_loss": name}):
                out = self._identity_loss(out, 2)
        return out

    # --- Host constants ------------------------------------------------------
    def _factory(self, func, args, kwargs):
        if self._devices.is_cpu(kwargs.get("device")):
            # An explicit CPU tensor: made on the host, outside the graph.
            return self._cpu_tensors.mark(
                host_values.run_on_host(func, args, kwargs))
        if kwargs.get("device") is None:
            kwargs = dict(kwargs, device=self._device)
            name = func.__name__
            if name not in self._warned_factories:
                self._warned_factories.add(name)
                logger.warning("No device set in torch.%s(): forcing to IPU",
                               name)
        if self._on_op is not None:
            self._on_op()
        return self._call(func, args, kwargs)

    def _host_call(self, func, args, kwargs, tensors):
        """An op on host constants only: evaluated now, as in eager mode;
        moving a host constant to the IPU makes it a graph constant."""
        moves_to_ipu = func is torch.Tensor.to and _to_target(
            args, kwargs, self._devices.is_ipu)
        if moves_to_ipu:
            out = func(*args, **kwargs)
            return out.clone() if out is args[0] else out
        out = host_values.run_on_host(func, args, kwargs)
        explicit_cpu = func is torch.Tensor.cpu or (
            func is torch.Tensor.to and
            _to_target(args, kwargs, self._devices.is_cpu))
        if explicit_cpu or self._cpu_tensors.any_marked(tensors):
            self._cpu_tensors.mark(out)
        return out

    # --- IPU values ------------------------------------------------------------
    def _check_ipu_call(self, func, args, kwargs, tensors) -> None:
        if func in _HOST_READS:
            raise rules.rule_error(
                f"Illegal call to {_HOST_READS[func]} while the model is "
                "traced for the IPU: IPU tensors have no values on the host "
                "while the model is compiled, and Python control flow is "
                "frozen at trace time. Keep the value as a tensor; for "
                "data-dependent choices use torch.where or poptorch.cond, and "
                "pass sizes (for example global_add_pool(x, batch, "
                "size=num_graphs)) as Python ints. Tensors captured from "
                "Python (not parameters, buffers or inputs) are host "
                "constants and may be read.", self._location())
        if func is torch.Tensor.cpu or (
                func is torch.Tensor.to and
                _to_target(args, kwargs, self._devices.is_cpu)):
            raise rules.rule_error(rules.MOVE_TO_CPU_MSG, self._location())
        if func in _BACKWARD_CALLS:
            raise rules.rule_error(
                "Calling backward() inside the model's forward is not "
                "supported: PopTorch builds the backward pass itself. Return "
                "the loss from forward (wrap it in poptorch.identity_loss if "
                "it is not a torch loss) and run the model with "
                "poptorch.trainingModel.", self._location())
        if func is F.one_hot:
            rules.check_one_hot(args, kwargs, self._location())
        cpu_tensor = self._cpu_tensors.first_mixed(tensors)
        if cpu_tensor is not None:
            raise rules.rule_error(
                "Expected an IPU tensor but got "
                f"{host_values.describe(cpu_tensor)}. It was created on the "
                "CPU inside the model; create it without device= (or with "
                "device=x.device), or move it with .to(x.device).",
                self._location())

    def _dynamic_index(self, func, args, kwargs, tracer):
        if func is torch.Tensor.__getitem__ and \
                dynamic_index.has_dynamic_slice(args[1], tracer):
            return dynamic_index.dynamic_getitem(args[0], args[1], tracer,
                                                  self._location())
        if func is torch.Tensor.__setitem__ and \
                dynamic_index.has_dynamic_slice(args[1], tracer):
            return dynamic_index.dynamic_setitem(args[0], args[1], args[2],
                                                  tracer, self._location())
        if func in _NARROWS:
            bound = _bind_narrow(args, kwargs)
            if isinstance(bound[2], torch.Tensor) and \
                    host_values.is_ipu_value(bound[2], tracer):
                return dynamic_index.dynamic_narrow(*bound,
                                                     self._location())
        return _NOT_SPECIAL

    def _call(self, func, args, kwargs, name=None):
        try:
            return func(*args, **kwargs)
        except RuntimeError as error:
            if name is None and func is F.one_hot:
                _check_one_hot_values(error, args, kwargs, self._location())
            integer_operands.check(name or _name(func), args, kwargs,
                                    error, self._location())
            if _TRACER_VALUE_READ not in str(error):
                raise
            name = name or _name(func)
            raise rules.rule_error(
                f"{name} needs the value of an IPU tensor on the host (for "
                "example as a size, an index or a slice bound), and IPU "
                "tensors have no values while the model is compiled. Pass "
                "the value as a Python int, keep it as a tensor and use "
                "torch.where / poptorch.dynamic_slice, or slice with a "
                "constant length (x[s:s + K]).", self._location()) from None


def _check_one_hot_values(error: RuntimeError, args, kwargs,
                          location: str) -> None:
    """Eager PyTorch's error for class values of the traced inputs that
    ``num_classes`` does not cover, with the user's line; other errors
    pass."""
    if "smaller than num_classes" in str(error):
        num_classes = args[1] if len(args) > 1 else kwargs.get("num_classes")
        raise rules.rule_error(
            f"{rules.ONE_HOT_TOO_SMALL} one_hot: a class value of the traced "
            f"inputs is not smaller than num_classes ({num_classes}). Pass "
            "the number of classes as num_classes.", location) from None
    if "non-negative" in str(error):
        raise rules.rule_error(
            "Class values must be non-negative. one_hot: a class value of "
            "the traced inputs is negative. Give one_hot class indices from "
            "0 to num_classes - 1.", location) from None


def _name(func: Callable) -> str:
    return getattr(func, "__name__", str(func))


_NOT_SPECIAL = object()
_TRACER_VALUE_READ = "trying to get value out of a tracing tensor"
_NARROWS = {torch.narrow, torch.Tensor.narrow}


def _bind_narrow(args, kwargs):
    names = ("input", "dim", "start", "length")
    values = dict(zip(names, args))
    values.update(kwargs)
    return tuple(values.get(name) for name in names)


def _to_target(args: Sequence[Any], kwargs: Dict[str, Any],
               predicate: Callable[[Any], bool]) -> bool:
    """Whether a ``Tensor.to`` call moves to a device ``predicate`` likes."""
    return any(predicate(arg) for arg in
               list(args[1:]) + [kwargs.get("device")])


def make_mode(device: torch.device,
              excludes: Optional[Sequence[str]] = None,
              on_op: Optional[Callable[[], None]] = None) -> IpuFunctionMode:
    from .. import ops  # noqa: F401  (registers poptorch::identity_loss)
    return IpuFunctionMode(device, torch.ops.poptorch.identity_loss.default,
                           excludes or (), on_op)
