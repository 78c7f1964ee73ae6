"""Stand-in for PopTorch's C++ extension module ``poptorch.poptorch_core``.

Upstream tests and scripts import it directly (``poptorch.poptorch_core.Error``);
this module gives them the same objects as the public package.
"""
import enum

from ._impl import isRunningOnIpu
from .errors import Error, RecoverableError, UnrecoverableError


def isCompilingWithDispatcher() -> bool:
    """True while a model is being traced (the dispatcher is the only
    frontend)."""
    return isRunningOnIpu()


def ipuHardwareVersion(num_ipus: int = 1) -> int:
    """0: the simulator never has IPU hardware."""
    del num_ipus
    return 0


def propagateInputShapes(*args, **kwargs) -> None:
    """No-op kept for compatibility with upstream helpers."""
    del args, kwargs


class TestErrorType(enum.IntEnum):
    """The kinds of error ``_throwTestError`` raises, as in PopTorch's C++
    extension (for testing error handling)."""
    Poptorch = 0
    Popart = 1
    PopartInternal = 2
    Poplibs = 3
    PoplarUnrecoverable = 4
    PoplarUnknown = 5
    PoplarRecoverableFullReset = 6
    PoplarLinkError = 7


def _throwTestError(error_type: TestErrorType) -> None:
    """Raises the error of ``error_type`` (used by error-handling tests)."""
    error_type = TestErrorType(error_type)
    if error_type == TestErrorType.PoplarUnrecoverable:
        raise UnrecoverableError("Test unrecoverable error")
    if error_type == TestErrorType.PoplarRecoverableFullReset:
        raise RecoverableError("Test recoverable error",
                               recovery_action="FULL_RESET")
    if error_type == TestErrorType.PoplarLinkError:
        raise RecoverableError("Test link error",
                               recovery_action="LINK_RESET")
    raise Error(f"Test error: {error_type.name}")


__all__ = ["Error", "RecoverableError", "UnrecoverableError",
           "isCompilingWithDispatcher", "ipuHardwareVersion",
           "propagateInputShapes", "TestErrorType", "_throwTestError"]
