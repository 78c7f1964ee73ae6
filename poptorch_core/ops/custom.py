"""``custom_op``: PopART custom operations, with Python implementations for
the simulated IPU.

On an IPU, ``custom_op`` calls a C++ PopART op. The simulator calls instead
the Python function registered for ``(name, domain, domain_version)`` with
:func:`registerCustomOp`: it receives the input tensors positionally and the
attributes as keyword arguments, and returns a tensor or a sequence of
tensors shaped like ``example_outputs``. The function is traced like the
rest of the model, so it must be written with tensor ops (and is then
differentiable). Plain CPU calls return zeros shaped like
``example_outputs``, as PopTorch's CPU kernel does.

Example::

    >>> poptorch.registerCustomOp(
    ...     "LeakyRelu", "custom.ops", 1,
    ...     lambda x, alpha=0.01: torch.nn.functional.leaky_relu(x, alpha))
    >>> class Model(torch.nn.Module):
    ...     def forward(self, x):
    ...         out = poptorch.custom_op([x], "LeakyRelu", "custom.ops", 1,
    ...                                  example_outputs=[x],
    ...                                  attributes={"alpha": 0.1})
    ...         return out[0]
    >>> poptorch.inferenceModel(Model())(torch.tensor([-1.0, 2.0]))
    tensor([-0.1000,  2.0000])
"""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .. import _impl
from ..errors import createPoptorchError

__all__ = ["custom_op", "registerCustomOp"]

_OpKey = Tuple[str, str, int]
_implementations: Dict[_OpKey, Callable[..., Any]] = {}


def registerCustomOp(name: str, domain: str, domain_version: int,
                     fn: Optional[Callable[..., Any]]) -> None:
    """Registers ``fn`` as the simulated-IPU implementation of a custom op;
    ``fn=None`` unregisters it.

    ``fn(*inputs, **attributes)`` must return a tensor or a sequence of
    tensors matching the ``example_outputs`` given to :func:`custom_op`.
    """
    key = (name, domain, domain_version)
    if fn is None:
        _implementations.pop(key, None)
        return
    if not callable(fn):
        raise TypeError("registerCustomOp expects a callable implementation, "
                        f"got {type(fn).__name__}.")
    _implementations[key] = fn


def _error_on_non_ascii(value: Any) -> None:
    if isinstance(value, (list, tuple)):
        for item in value:
            _error_on_non_ascii(item)
    elif isinstance(value, str) and not value.isascii():
        raise ValueError(f"{value} contains non-ASCII characters.")


def validate_attributes(attributes: Dict[Any, Any]) -> None:
    """PopART attribute rules: str keys; float, int or str values or
    homogeneous lists/tuples of them; ASCII text only."""
    for key, value in attributes.items():
        if not isinstance(key, str):
            raise ValueError("All attribute keys must be strings.")
        if not isinstance(value, (float, int, str, list, tuple)):
            raise ValueError("Attribute values must be floats, ints, strings "
                             "or a list/tuple of floats, ints or strings.")
        if isinstance(value, (list, tuple)):
            if any(not isinstance(v, (float, int, str)) for v in value):
                raise ValueError(
                    "Attribute values must be floats, ints, strings or a "
                    "list/tuple of floats, ints or strings.")
            if any(type(v) is not type(value[0]) for v in value):
                raise ValueError("The types in a list/tuple attribute must "
                                 "all be the same.")
        _error_on_non_ascii(key)
        _error_on_non_ascii(value)


def _check_tensors(values: Any, what: str) -> List[torch.Tensor]:
    if not isinstance(values, (list, tuple)) or not all(
            isinstance(v, torch.Tensor) for v in values):
        raise ValueError(f"custom_op expects {what} to be a list or tuple of "
                         "tensors.")
    return list(values)


def _run_registered(inputs: List[torch.Tensor], key: _OpKey,
                    attributes: Dict[str, Any],
                    example_outputs: Sequence[torch.Tensor]
                    ) -> List[torch.Tensor]:
    name, domain, version = key
    implementation = _implementations.get(key)
    if implementation is None:
        raise createPoptorchError(
            f"Custom op {domain}::{name} (version {version}) has no "
            "implementation on the simulated IPU. Register a Python function "
            f"with poptorch.registerCustomOp({name!r}, {domain!r}, {version},"
            " fn) before compiling the model; fn(*inputs, **attributes) must "
            "return tensors shaped like example_outputs.")
    outputs = implementation(*inputs, **attributes)
    if isinstance(outputs, torch.Tensor):
        outputs = [outputs]
    outputs = list(outputs)
    if len(outputs) != len(example_outputs) or any(
            not isinstance(o, torch.Tensor) or o.shape != e.shape
            or o.dtype != e.dtype for o, e in zip(outputs, example_outputs)):
        got = [(getattr(o, "dtype", type(o)), list(getattr(o, "shape", [])))
               for o in outputs]
        want = [(e.dtype, list(e.shape)) for e in example_outputs]
        raise _impl.cpp_error(
            f"The implementation of custom op {domain}::{name} returned "
            f"{got}, but example_outputs describe {want}.")
    return outputs


def custom_op(inputs: Sequence[torch.Tensor], name: str, domain: str,
              domain_version: int, example_outputs: Sequence[torch.Tensor],
              attributes: Optional[Dict[str, Any]] = None
              ) -> List[torch.Tensor]:
    """Applies the custom op ``domain::name`` (version ``domain_version``).

    Returns a list with one tensor per ``example_outputs`` entry.
    """
    inputs = _check_tensors(inputs, "inputs")
    example_outputs = _check_tensors(example_outputs, "example_outputs")
    if attributes is not None and not isinstance(attributes, dict):
        raise ValueError("custom_op expects attributes to be a dict, got "
                         f"{type(attributes).__name__}.")
    attributes = dict(attributes or {})
    validate_attributes(attributes)
    if not _impl.isRunningOnIpu():
        return [torch.zeros_like(e) for e in example_outputs]
    return _run_registered(inputs, (name, domain, domain_version), attributes,
                           example_outputs)
