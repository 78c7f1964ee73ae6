"""Checks of the backend options when a model is compiled.

PopTorch stores whatever ``opts._Popart.set(key, value)`` is given and its
backend validates the values when the model is compiled: a value the
backend cannot represent raises ``"Unknown value type <type> for option
<key>"``. Backend values are bools, numbers, strings, enums, and lists or
string-keyed dicts of them. ``updatableNamedBuffers`` must name buffers of
the model.

Example::

    >>> opts = poptorch.Options()
    >>> opts._Popart.set("myOption", object())
    _PopartOptions(...)
    >>> validate_backend_options(opts, buffer_names=[])
    Traceback (most recent call last):
    ...
    poptorch_core.errors.Error: Unknown value type object for option myOption
"""
import enum
from typing import Any, Iterable, List, Optional

import torch

from .._impl import _cpp_error
from ._options import Options

__all__: List[str] = []

_LEAVES = (bool, int, float, str, enum.Enum, torch.dtype)


def _unknown_type(value: Any) -> Optional[type]:
    """The type in ``value`` the backend cannot take, or None."""
    if isinstance(value, _LEAVES):
        return None
    if isinstance(value, (list, tuple, set)):
        return next((t for t in map(_unknown_type, value) if t), None)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return dict
        return next((t for t in map(_unknown_type, value.values()) if t),
                    None)
    return type(value)


def validate_backend_options(options: Options,
                             buffer_names: Iterable[str]) -> None:
    """Raises :class:`poptorch.Error` for a backend option the IPU backend
    would reject (see the module docstring)."""
    for key, value in options._popart.options.items():
        bad = _unknown_type(value)
        if bad is not None:
            raise _cpp_error(
                f"Unknown value type {bad.__name__} for option {key}")
    buffers = set(buffer_names)
    for name in options.popartOption("updatableNamedBuffers") or []:
        if name not in buffers:
            raise _cpp_error(
                f"updatableNamedBuffers: the model has no buffer named "
                f"'{name}'. Its buffers are {sorted(buffers)}.")
