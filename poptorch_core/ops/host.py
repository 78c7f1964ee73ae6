"""``poptorch.CPU``: run a host function in the middle of an IPU model.

On the simulated IPU the call becomes the op
``torch.ops.poptorch.host_callback(Tensor[] inputs, int callback_id)``,
whose kernel hands copies of the inputs to the wrapped function each time
the captured graph runs (once more while the model is traced, to learn the
outputs' structure). Host callbacks are inference only. Plain CPU calls
just call the function.

Example::

    >>> def log_stats(x):
    ...     print(float(x.mean()))   # host code, real values
    ...     return x
    >>> host_op = poptorch.CPU(log_stats, "log_stats")
    >>> # in forward: y = host_op(y)
"""
import itertools
import weakref
from typing import Any, Callable, List, Optional, Tuple

import torch

from .. import _impl
from ._registration import define_op

__all__ = ["CPU"]


class _Callback:
    """A registered host function and what its outputs look like."""

    def __init__(self, fn: Callable[..., Any], name: str):
        self.fn = fn
        self.name = name
        self.returns_tensor = False
        self.output_specs: Optional[List[Tuple[torch.Size, torch.dtype]]] = None

    def __call__(self, inputs: List[torch.Tensor]) -> List[torch.Tensor]:
        outputs = self.fn(*[t.detach().clone() for t in inputs])
        self.returns_tensor = isinstance(outputs, torch.Tensor)
        outputs = [outputs] if self.returns_tensor else list(outputs)
        if not all(isinstance(o, torch.Tensor) for o in outputs):
            raise TypeError(
                f"The host function of poptorch.CPU op {self.name!r} must "
                "return a tensor or a list or tuple of tensors.")
        self.output_specs = [(o.shape, o.dtype) for o in outputs]
        # Custom ops must not return their inputs or views of them.
        return [o.detach().clone() for o in outputs]


# Weak: a callback lives as long as its CPU op (usually a model attribute),
# so discarded models do not pile up host functions.
_callbacks: "weakref.WeakValueDictionary[int, _Callback]" = (
    weakref.WeakValueDictionary())
_callback_ids = itertools.count()


def _lookup(callback_id: int) -> _Callback:
    callback = _callbacks.get(callback_id)
    if callback is None:
        raise RuntimeError(
            f"The poptorch.CPU op with id {callback_id} no longer exists: "
            "keep the poptorch.CPU object (for example as a model attribute) "
            "alive as long as the graphs that call it.")
    return callback


def _kernel(inputs: List[torch.Tensor],
            callback_id: int) -> List[torch.Tensor]:
    return _lookup(callback_id)(inputs)


def _fake(inputs: List[torch.Tensor],
          callback_id: int) -> List[torch.Tensor]:
    callback = _lookup(callback_id)
    if callback.output_specs is None:  # learn the outputs from dummy values
        callback([torch.zeros(t.shape, dtype=t.dtype) for t in inputs])
    return [
        torch.empty(shape, dtype=dtype, device=inputs[0].device if inputs
                    else "cpu") for shape, dtype in callback.output_specs
    ]


_host_callback = define_op("host_callback",
                           "(Tensor[] inputs, int callback_id) -> Tensor[]",
                           _kernel, _fake)


class CPU:
    """Wraps ``func`` so that the IPU model calls it on the host.

    Args:
        func: the host function, called with tensors.
        ID: a name for the op, used in messages.
    """

    def __init__(self, func: Callable[..., Any], ID: str):
        if not callable(func):
            raise TypeError("poptorch.CPU expects a callable, got "
                            f"{type(func).__name__}.")
        self._func = func
        self.ID = ID
        self._callback_id = next(_callback_ids)
        self._callback = _Callback(func, str(ID))
        _callbacks[self._callback_id] = self._callback

    def __call__(self, *inputs: torch.Tensor) -> Any:
        if not _impl.isRunningOnIpu():
            return self._func(*inputs)
        if _impl.is_tracing_training():
            raise _impl.cpp_error(
                f"poptorch.CPU op {self.ID!r}: host callbacks are only "
                "supported in inference.")
        for index, value in enumerate(inputs):
            if not isinstance(value, torch.Tensor):
                raise ValueError(
                    f"poptorch.CPU op {self.ID!r} takes tensors only; "
                    f"argument {index} is a {type(value).__name__}.")
        outputs = _host_callback(list(inputs), self._callback_id)
        if self._callback.returns_tensor:
            return outputs[0]
        return outputs
