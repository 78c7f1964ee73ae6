"""Refusals of the user's input, raised from the public call the user made.

A refusal is an error that says what is wrong with the user's input and
how to fix it (a ``ValueError`` naming a graph and an attribute, a
``RuntimeError`` naming a budget, ...). It is often found deep inside the
library (a collation helper, a sampler, ...); the frames between the public
call and that helper only hide the message. So the public entry points
(:func:`public` methods and :func:`refusing_iterator` loops) re-raise a
refusal from their own frame: the traceback ends one line below the user's
call.

Only errors marked with :func:`refusal` are cut short; any other exception
(a bug) keeps its whole traceback. With PopTorch's debug logging on
(``POPTORCH_LOG_LEVEL=DEBUG`` or ``TRACE``, or
``poptorch.setLogLevel("DEBUG")``) refusals keep theirs too, with the
exception they were raised from.

Example::

    >>> import traceback
    >>> def _helper():
    ...     raise refusal(ValueError("num_widgets must be positive"))
    >>> @public
    ... def make_widgets():
    ...     _helper()
    >>> try:
    ...     make_widgets()
    ... except ValueError as error:
    ...     [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    ['<module>', 'public_call']
"""
import functools
import logging
from typing import Any, Callable, Iterable, Iterator, TypeVar

from poptorch_core._logging import logger

__all__ = ["refusal", "public", "refusing_iterator"]

_MARK = "_poptorch_geometric_refusal"

E = TypeVar("E", bound=BaseException)
F = TypeVar("F", bound=Callable[..., Any])


def refusal(error: E) -> E:
    """Marks ``error`` as a refusal of the user's input and returns it
    (``raise refusal(ValueError(...))``)."""
    setattr(error, _MARK, True)
    return error


def full_tracebacks() -> bool:
    """Whether refusals keep their whole traceback: PopTorch's debug
    logging is on."""
    return logger.isEnabledFor(logging.DEBUG)


def _cut_short(error: BaseException) -> bool:
    """Readies a marked ``error`` to be raised again from the caller's
    frame (True), or leaves it as it is (False)."""
    if not getattr(error, _MARK, False) or full_tracebacks():
        return False
    # The message is the whole story: the exception it was raised from is
    # what a debug run shows.
    error.__cause__ = None
    error.__suppress_context__ = True
    return True


def _bare(error: BaseException) -> BaseException:
    """``error`` without its traceback: raised again, it starts at the
    frame that raises it."""
    return error.with_traceback(None)


def public(fn: F) -> F:
    """Wraps a public function or method so that refusals raised anywhere
    below it are raised again from here."""

    @functools.wraps(fn)
    def public_call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            if not _cut_short(error):
                raise
            # The traceback shows this line: it says how to see the rest.
            raise _bare(error)  # POPTORCH_LOG_LEVEL=DEBUG: whole traceback

    return public_call  # type: ignore[return-value]


def refusing_iterator(items: Iterable[Any]) -> Iterator[Any]:
    """Iterates ``items`` (a loader's batches), raising refusals from
    here: a loop over a loader then ends one line below the loop."""
    iterator = iter(items)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except Exception as error:
            if not _cut_short(error):
                raise
            # The traceback shows this line: it says how to see the rest.
            raise _bare(error)  # POPTORCH_LOG_LEVEL=DEBUG: whole traceback
        yield item
