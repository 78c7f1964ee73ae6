"""The ``poptorch::python`` logger and log-level control.

The initial level comes from ``POPTORCH_LOG_LEVEL`` (default ``WARN``).
Records look like ``[12:01:02.345] [poptorch::python] [warning] msg``.
"""
import datetime
import logging
import os
import sys
from typing import Union

__all__ = ["logger", "setLogLevel"]

# Name -> backend (C++) level. TRACE_ALL and DEBUG_IR are aliases kept for
# compatibility; they are not advertised in error messages.
_LEVELS = {
    "TRACE": 0,
    "TRACE_ALL": 0,
    "DEBUG": 1,
    "DEBUG_IR": 1,
    "INFO": 2,
    "WARN": 3,
    "ERR": 4,
    "OFF": 6,
}
_PUBLIC_LEVELS = ("DEBUG", "ERR", "INFO", "OFF", "TRACE", "WARN")
_BACKEND_TO_PYTHON = {
    0: logging.DEBUG,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
    6: logging.CRITICAL + 1,  # OFF: nothing passes
}

class _Formatter(logging.Formatter):
    _COLOURS = {
        logging.DEBUG: "\033[36m",
        logging.INFO: "\033[32m",
        logging.WARNING: "\033[33m",
        logging.ERROR: "\033[31m",
        logging.CRITICAL: "\033[31;1m",
    }

    def __init__(self, colour: bool):
        super().__init__()
        self._colour = colour

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.datetime.fromtimestamp(record.created)
        level = record.levelname.lower()
        if self._colour and record.levelno in self._COLOURS:
            level = f"{self._COLOURS[record.levelno]}{level}\033[0m"
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        return (f"[{stamp.strftime('%H:%M:%S')}.{stamp.microsecond // 1000:03d}]"
                f" [{record.name}] [{level}] {msg}")


logger = logging.getLogger("poptorch::python")


class _StderrHandler(logging.StreamHandler):
    """Writes each record to ``sys.stderr`` as it is when the record is
    logged, as logging's own last-resort handler does: a stream bound at
    import would keep writing to a replaced one (a test's capture that has
    since closed, or a redirect the user set up after importing poptorch)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # StreamHandler would bind a stream

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr


def _install_handler() -> None:
    handler = _StderrHandler()
    handler.setFormatter(_Formatter(colour=sys.stderr.isatty()))
    logger.addHandler(handler)
    logger.propagate = False


def _to_backend_level(level: Union[str, int]) -> int:
    if isinstance(level, int) and not isinstance(level, bool):
        if level not in _BACKEND_TO_PYTHON:
            raise ValueError("Invalid log level integer")
        return level
    if level not in _LEVELS:
        names = ", ".join(_PUBLIC_LEVELS[:-1]) + " and " + _PUBLIC_LEVELS[-1]
        raise ValueError(f"Unknown log level: {level}. Valid values are {names}")
    return _LEVELS[level]


def setLogLevel(level: Union[str, int]) -> None:
    """Sets the level of PopTorch's Python and backend loggers.

    Args:
        level: one of ``TRACE``, ``DEBUG``, ``INFO``, ``WARN``, ``ERR``,
            ``OFF``, or the matching backend integer (0..4, 6).

    Example::

        >>> import poptorch_core as poptorch
        >>> poptorch.setLogLevel("DEBUG")
        >>> poptorch.setLogLevel("WARN")
    """
    logger.setLevel(_BACKEND_TO_PYTHON[_to_backend_level(level)])


def setPopartLogLevel(level: str) -> None:
    """Kept for compatibility: PopART does not exist in the simulator."""
    if level not in _LEVELS:
        raise ValueError("Level must be one of " + ", ".join(_LEVELS))


_install_handler()
setLogLevel(os.environ.get("POPTORCH_LOG_LEVEL", "WARN"))
