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
import functools
import inspect
import linecache
import os
import sysconfig
import types
from typing import Any, Callable, Optional, TypeVar

__all__ = ["Error", "RecoverableError", "UnrecoverableError",
           "createPoptorchError", "NO_EXECUTABLE_ERR", "FULL_TRACEBACKS_ENV",
           "trimmed_refusal",
           "public_call", "public_class"]

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


# --- Tracebacks that start at the user's call ---------------------------------

#: Set this environment variable to 1 to keep PopTorch's own frames in the
#: tracebacks of the errors it raises on purpose.
FULL_TRACEBACKS_ENV = "POPTORCH_FULL_TRACEBACKS"

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The alias and the plugin raise PopTorch errors too.
_PACKAGE_DIRS = tuple(os.path.join(_ROOT, name) + os.sep for name in
                      ("poptorch_core", "poptorch_geometric", "poptorch"))
_LIBRARY_DIRS = tuple(sorted({
    os.path.abspath(path) + os.sep for name in ("stdlib", "platstdlib",
                                                "purelib", "platlib")
    for path in [sysconfig.get_paths().get(name)] if path}))
_RAISE_STATEMENTS = ("raise ", "raise(", "assert ")
_Callable = TypeVar("_Callable", bound=Callable[..., Any])
_Class = TypeVar("_Class", bound=type)
#: Methods that users call through syntax (``model(x)``, ``for b in
#: loader``, ``with accessor``) are public calls too.
_PUBLIC_DUNDERS = ("__init__", "__call__", "__iter__", "__next__",
                   "__len__", "__enter__")


def full_tracebacks() -> bool:
    """Whether ``POPTORCH_FULL_TRACEBACKS`` asks for PopTorch's frames."""
    return os.environ.get(FULL_TRACEBACKS_ENV, "").strip().lower() in (
        "1", "true", "yes", "on")


def raised_by_poptorch(error: BaseException) -> bool:
    """Whether ``error`` comes from a ``raise`` (or ``assert``) statement of
    PopTorch's own code: a refusal, not a bug of PopTorch's nor an error of
    the user's code (whose frames stay, as they say where to look)."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    if not filename.startswith(_PACKAGE_DIRS):
        return False
    line = linecache.getline(filename, tb.tb_lineno).strip()
    return line.startswith(_RAISE_STATEMENTS)


def _is_users(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not (filename.startswith("<") or path.startswith(_PACKAGE_DIRS)
                or path.startswith(_LIBRARY_DIRS))


def _users_frames(tb: Optional[types.TracebackType]
                  ) -> Optional[types.TracebackType]:
    """``tb`` without the frames of PopTorch, libraries and Python's
    own modules."""
    kept = []
    while tb is not None:
        if _is_users(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    chain = None
    for entry in reversed(kept):
        chain = types.TracebackType(chain, entry.tb_frame, entry.tb_lasti,
                                    entry.tb_lineno)
    return chain


def _trim(error: BaseException) -> BaseException:
    """``error`` with a traceback that starts here; the exceptions it
    chains (``raise ... from cause``) keep the user's frames only."""
    seen = {id(error)}
    chained = [error.__cause__, error.__context__]
    while chained:
        cause = chained.pop()
        if cause is None or id(cause) in seen:
            continue
        seen.add(id(cause))
        cause.__traceback__ = _users_frames(cause.__traceback__)
        chained += [cause.__cause__, cause.__context__]
    return error.with_traceback(None)


def public_call(func: _Callable) -> _Callable:
    """Marks ``func`` as a call users make: the errors PopTorch raises on
    purpose below it get a traceback that starts at this call, as the
    user's frames and the message say all there is to fix. With
    ``POPTORCH_FULL_TRACEBACKS=1`` every frame stays.

    Example::

        >>> import traceback
        >>> try:
        ...     poptorch.Options().deviceIterations(0)
        ... except ValueError as error:
        ...     frames = traceback.extract_tb(error.__traceback__)
        >>> len(frames), frames[-1].name   # this line, then the public call
        (2, 'public_call_boundary')
    """
    @functools.wraps(func)
    def public_call_boundary(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as error:  # pylint: disable=broad-except
            refusal = trimmed_refusal(error)
            if refusal is None:
                raise
            raise refusal  # POPTORCH_FULL_TRACEBACKS=1: all frames
    return public_call_boundary  # type: ignore[return-value]


def trimmed_refusal(error: BaseException) -> Optional[BaseException]:
    """``error`` ready to be raised again from the caller's frame, when it
    is a refusal PopTorch raised on purpose and full tracebacks are off;
    None when it keeps its traceback (a bug, the user's own error)."""
    if full_tracebacks() or not raised_by_poptorch(error):
        return None
    return _trim(error)


def public_class(cls: _Class) -> _Class:
    """Applies :func:`public_call` to the public methods and properties
    that ``cls`` defines (names without a leading underscore, and
    ``__init__``, ``__call__``, ``__iter__``, ``__next__``, ``__len__``,
    ``__enter__``)."""
    for name, value in list(vars(cls).items()):
        if name.startswith("_") and name not in _PUBLIC_DUNDERS:
            continue
        if inspect.isfunction(value):
            setattr(cls, name, public_call(value))
        elif isinstance(value, property):
            setattr(cls, name, property(
                *(public_call(f) if f is not None else None
                  for f in (value.fget, value.fset, value.fdel)),
                doc=value.__doc__))
    return cls
