"""Checks of the backend options when a model is compiled.

PopTorch's backend validates the ``_Popart`` options when the model is
compiled: a value the backend cannot represent raises ``"Unknown value type
<type> for option <key>"``. ``opts._Popart.set`` already refuses such
values (``_backend_keys``); this catches those put in the options dict
directly, or changed in place after ``set``. ``updatableNamedBuffers``
must name buffers of the model.

Example::

    >>> opts = poptorch.Options()
    >>> opts._Popart.options["enableStableNorm"] = [object()]   # not set()
    >>> validate_backend_options(opts, buffer_names=[])
    Traceback (most recent call last):
    ...
    poptorch_core.errors.Error: Unknown value type object for option enableStableNorm: ...
"""
from typing import Iterable

from .._impl import cpp_error
from ._backend_keys import unknown_type, unknown_type_error
from ._options import Options

def validate_backend_options(options: Options,
                             buffer_names: Iterable[str]) -> None:
    """Raises :class:`poptorch.Error` for a backend option the IPU backend
    would reject (see the module docstring)."""
    for key, value in options._popart.options.items():
        bad = unknown_type(value)
        if bad is not None:
            raise unknown_type_error(key, bad)
    buffers = set(buffer_names)
    for name in options.popartOption("updatableNamedBuffers") or []:
        if name not in buffers:
            raise cpp_error(
                f"updatableNamedBuffers: the model has no buffer named "
                f"'{name}'. Its buffers are {sorted(buffers)}.")
