"""Ctrl-C during a training call: whole optimizer steps or none.

A call runs ``deviceIterations`` optimizer steps. An interrupt that arrives
while a step updates the weights and the optimizer state is held until the
step has finished; one that arrives while a step's gradients are computed
discards those gradients. Either way the call stops at a device-iteration
boundary: the steps already taken stay applied (nothing is rolled back),
the model, its optimizer state and the host copies agree, and the
``KeyboardInterrupt`` says how many steps were applied.

Example::

    >>> import signal
    >>> events = []
    >>> try:
    ...     with deferred_interrupts():
    ...         signal.raise_signal(signal.SIGINT)  # held ...
    ...         events.append("finished")           # ... until the body is
    ... except KeyboardInterrupt:                   # done
    ...     events.append("interrupted")
    >>> events
    ['finished', 'interrupted']
"""
import contextlib
import signal
import threading
from typing import Iterator, List

__all__: list = []


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Holds a SIGINT that arrives in the body and raises it as
    ``KeyboardInterrupt`` once the body has finished. Only the main thread
    receives signals, so elsewhere the body runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: List[int] = []
    previous = signal.signal(signal.SIGINT,
                             lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def interrupted_call(applied: int, total: int) -> KeyboardInterrupt:
    """The ``KeyboardInterrupt`` a training call ends with after ``applied``
    of its ``total`` optimizer steps."""
    return KeyboardInterrupt(
        f"Interrupted during a training call of {total} device "
        f"iteration(s): {applied} optimizer step(s) were applied, each "
        "completely (none is rolled back, none is half done); the model, its "
        "optimizer state and the host copies of the weights agree.")
