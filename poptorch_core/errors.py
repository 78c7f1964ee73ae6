"""Exception types raised by ``poptorch_core``.

PopTorch distinguishes errors raised by its Python layer ("PyErr") from errors
raised by its C++ backend ("CErr"). Both are :class:`Error`; only ``type``
differs, so user code can catch one class for both.

Example::

    >>> import poptorch_core as poptorch
    >>> try:
    ...     raise poptorch.createPoptorchError("bad input")
    ... except poptorch.Error as e:
    ...     print(e.message, e.type)
    bad input poptorch_py_error
"""
from typing import Optional

__all__ = ["Error", "RecoverableError", "UnrecoverableError",
           "createPoptorchError", "NO_EXECUTABLE_ERR"]

#: Message used whenever an executor method needs a compiled executable.
NO_EXECUTABLE_ERR = "Model has not been compiled or has been destroyed."

_PY_ERROR_TYPE = "poptorch_py_error"
_CPP_ERROR_TYPE = "poptorch_cpp_error"


class Error(Exception):
    """Base class of every error PopTorch raises on purpose.

    Attributes:
        message: the human-readable message.
        type: ``"poptorch_py_error"`` for errors of the Python layer,
            ``"poptorch_cpp_error"`` for errors of the (simulated) backend.
        location: the source location the error points at, or ``""``.
    """

    def __init__(self, message: str = "", type: str = _CPP_ERROR_TYPE,
                 location: str = ""):
        super().__init__(message)
        self.message = message
        self.type = type
        self.location = location

    def __str__(self) -> str:
        if self.type == _PY_ERROR_TYPE:
            return f"'{self.type}': {self.message}"
        return self.message

    def __reduce__(self):
        return (type(self), (self.message, self.type, self.location))


class RecoverableError(Error):
    """An error after which the device can be reset and used again.

    ``recovery_action`` is one of ``IPU_RESET``, ``LINK_RESET``,
    ``PARTITION_RESET`` or ``FULL_RESET``.
    """

    def __init__(self, message: str = "", type: str = _CPP_ERROR_TYPE,
                 location: str = "", recovery_action: str = "FULL_RESET"):
        super().__init__(message, type, location)
        self.recovery_action = recovery_action

    def __reduce__(self):
        return (type(self), (self.message, self.type, self.location,
                             self.recovery_action))


class UnrecoverableError(Error):
    """An error after which the device cannot be used again."""


def createPoptorchError(msg: str, location: Optional[str] = None) -> Error:
    """Returns (does not raise) a Python-layer :class:`Error` for ``msg``."""
    return Error(msg, _PY_ERROR_TYPE, location or "")
