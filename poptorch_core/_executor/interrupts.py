"""Exceptions that arrive during a training call: whole optimizer steps or
none.

A signal handler runs in the main thread between two bytecodes, wherever
that thread is: Ctrl-C's ``KeyboardInterrupt``, a SIGTERM handler calling
``sys.exit``, a SIGALRM handler raising anything. Landing inside an
optimizer update, its exception would leave some weights moved and others
not, or Adam's step count a step behind its moments. So during a training
call every Python signal handler is wrapped (:class:`HeldSignals`): while a
step's update runs, a signal is only recorded, and its handler runs once
the update has finished, so that its exception comes out at the step
boundary. An exception that arrives while a step's gradients are computed
drops that step instead (its gradients, and the buffers its forward passes
wrote: :class:`BufferCheckpoint`). Either way the call stops at a
device-iteration boundary: the steps already taken stay applied (nothing is
rolled back), the model, its optimizer state and the host copies agree, and
the exception says how many steps were applied (:class:`StepCount`).

Example::

    >>> import signal
    >>> events = []
    >>> def update():
    ...     signal.raise_signal(signal.SIGINT)  # held ...
    ...     events.append("updated")            # ... until the update is
    >>> try:                                    # done
    ...     with HeldSignals() as held:
    ...         held.run(update)
    ... except KeyboardInterrupt:
    ...     events.append("interrupted")
    >>> events
    ['updated', 'interrupted']
"""
import _signal
import signal
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, \
    TypeVar

import torch

T = TypeVar("T")
_Handler = Callable[[int, Any], Any]
#: Listed once: ``signal.valid_signals()`` takes longer than the look-ups.
_SIGNALS = tuple(sorted(signal.valid_signals()))
#: ``signal.getsignal`` and ``signal.signal`` without the wrappers that
#: turn numbers into enums: a call looks up every signal, and the wrappers
#: took most of that time.
_getsignal, _setsignal = _signal.getsignal, _signal.signal


class HeldSignals:
    """Wraps every Python signal handler while the ``with`` block runs, so
    that :meth:`run` can hold their exceptions until its function returns.

    Only the main thread runs signal handlers (and may install them):
    elsewhere nothing is wrapped and :meth:`run` just calls the function.
    At the end the handlers found are put back, except where someone
    installed another one meanwhile.
    """

    def __init__(self) -> None:
        #: Signal -> (the handler found, the wrapper installed for it).
        self._installed: Dict[int, Tuple[_Handler, _Handler]] = {}
        self._pending: List[Tuple[int, Any]] = []
        self._holding = False

    def __enter__(self) -> "HeldSignals":
        if threading.current_thread() is not threading.main_thread():
            return self
        try:
            for signum in _SIGNALS:
                handler = _getsignal(signum)
                if callable(handler):
                    wrapper = self._wrapper(
                        getattr(handler, "_poptorch_held", handler))
                    _setsignal(signum, wrapper)
                    self._installed[signum] = (wrapper._poptorch_held,
                                               wrapper)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._restore()
        self._replay()

    def _wrapper(self, handler: _Handler) -> _Handler:
        def held(signum: int, frame: Any) -> Any:
            if self._holding:
                self._pending.append((signum, frame))
                return None
            return handler(signum, frame)
        # A wrapper left installed (an exception stopped a restore) is
        # unwrapped by the next block, not wrapped again.
        held._poptorch_held = handler  # type: ignore[attr-defined]
        return held

    def run(self, fn: Callable[[], T]) -> T:
        """Runs ``fn()`` to the end; the handlers of the signals that arrive
        meanwhile run after it (their exceptions come out of ``run``)."""
        # Nothing can raise between this store and the ``try``: the
        # interpreter runs handlers only as a function starts, a loop
        # jumps back or a call returns.
        self._holding = True
        try:
            return fn()
        finally:
            self._holding = False
            self._replay()

    def _replay(self) -> None:
        """Runs the handlers held back, in arrival order; the first
        exception one raises comes out after all have run."""
        raised: Optional[BaseException] = None
        while self._pending:
            signum, frame = self._pending.pop(0)
            found = self._installed.get(signum)
            handler = found[0] if found else _getsignal(signum)
            try:
                if callable(handler):
                    handler(signum, frame)
            except BaseException as error:  # noqa: BLE001 (raised below)
                raised = raised or error
        if raised is not None:
            raise raised

    def _restore(self) -> None:
        """Puts back the handlers found. ``signal.signal`` runs the
        handlers of signals that arrived before it: the wrappers still
        installed hold theirs, and one that raises there leaves its
        wrapper in place, so it is put back again."""
        self._holding = True
        raised: Optional[BaseException] = None
        try:
            for signum, (handler, wrapper) in list(self._installed.items()):
                for _ in range(8):  # each try runs another pending handler
                    if _getsignal(signum) is not wrapper:
                        break
                    try:
                        _setsignal(signum, handler)
                    except BaseException as error:  # noqa: BLE001
                        raised = raised or error
                del self._installed[signum]
        finally:
            self._holding = False
        if raised is not None:
            raise raised


class BufferCheckpoint:
    """Copies of the buffers that the graph writes (every replica's), taken
    before a training step, so that a step dropped half-way leaves no
    trace: the buffers hold what the applied steps wrote, as in an eager
    loop of that many steps. The copies are kept from one step to the next
    (no allocation per step); ``saved`` says whether they belong to a step
    still under way."""

    def __init__(self, indices: Sequence[int]):
        self._indices = list(indices)
        self._copies: List[torch.Tensor] = []
        self.saved = False

    def _buffers(self, state: Any) -> List[torch.Tensor]:
        return [buffers[i] for buffers in state.replica_buffers
                for i in self._indices]

    def save(self, state: Any) -> None:
        if not self._indices:
            return
        buffers = self._buffers(state)
        if len(self._copies) != len(buffers):
            self._copies = [torch.empty_like(b) for b in buffers]
        with torch.no_grad():
            torch._foreach_copy_(self._copies, buffers)
        self.saved = True

    def discard(self) -> None:
        """The step was applied: its buffers stay as it wrote them."""
        self.saved = False

    def restore(self, state: Any) -> None:
        """Puts back the buffers of a step that was dropped."""
        if not self.saved:
            return
        with torch.no_grad():
            torch._foreach_copy_(self._buffers(state), self._copies)
        self.saved = False


class StepCount:
    """The optimizer steps of one training call of ``total`` device
    iterations: each applied whole (:meth:`apply`) and counted with it.
    Use it as a ``with`` block around the call (:class:`HeldSignals`)."""

    def __init__(self, total: int):
        self.total = total
        self.applied = 0
        self._held = HeldSignals()

    def __enter__(self) -> "StepCount":
        self._held.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._held.__exit__(*exc_info)

    def apply(self, update: Callable[[], T],
              before: Optional[BufferCheckpoint] = None) -> T:
        """Runs one step's update whole. The count, and the end of
        ``before`` (the buffers as they were before the step, which the
        step now owns), move with the update: right even when an exception
        comes out as the update returns."""
        def counted() -> T:
            result = update()
            self.applied += 1
            if before is not None:
                before.discard()
            return result
        return self._held.run(counted)

    def whole(self, fn: Callable[[], T]) -> T:
        """Runs ``fn()`` (a clean-up) to the end, as :meth:`apply` runs an
        update, without counting it."""
        return self._held.run(fn)

    def interrupted(self) -> KeyboardInterrupt:
        """The ``KeyboardInterrupt`` the call ends with."""
        return KeyboardInterrupt(
            f"Interrupted during a training call of {self.total} device "
            f"iteration(s): {self._what_holds()}")

    def note(self, error: BaseException) -> None:
        """Adds to another exception that stopped the call after some steps
        (``sys.exit``, the user's own) a note saying how many; an exception
        without it stopped the call before any step."""
        if self.applied:
            error.add_note(
                f"Raised during a training call of {self.total} device "
                f"iteration(s): {self._what_holds()}")

    def _what_holds(self) -> str:
        return (f"{self.applied} optimizer step(s) were applied, each "
                "completely (none is rolled back, none is half done); the "
                "model, its optimizer state and the host copies of the "
                "weights agree.")
