"""Compiling a step's form in the background, for the ``auto`` backend.

One daemon thread takes the builds in the order they were submitted and
compiles each on its own ``compile`` :class:`~.backends.Executable` from
example tensors (``Form.like``): the thread never touches the tensors of
the calls that run meanwhile. Only one build runs at a time: two would
share the two cores of a small machine and both finish later.

Inductor's tracing and code generation are Python and hold the GIL. A call
running meanwhile releases the GIL in every ATen op and must take it back
afterwards; by default Python makes it wait up to its switch interval
(5 ms) for that, so a step of a few hundred ops crawls while a build runs.
During a build the interval is :data:`BUILD_SWITCH_INTERVAL_S` (put back
afterwards, process-wide): the step waits a fraction of a millisecond per
op, and the build still runs whenever the step computes.

Why not a child process, which would leave the GIL alone: this process
would still have to import inductor, trace the step and load the compiled
form from inductor's cache (a few seconds of Python), the child imports
torch and inductor again, and both compete for the same cores; on a
shared 2-core machine, child-process builds switched later than the
thread's.

Example (``submit(executable, form, "cpu")`` queues the same; a build
cancelled before it starts compiles nothing)::

    >>> from poptorch_core.executor.backends import Executable
    >>> from poptorch_core.executor.backends._executable import Form
    >>> gm = torch.fx.symbolic_trace(lambda x: x * 2)
    >>> build = Build(Executable(gm, "compile"),
    ...               Form("graph", [torch.ones(3)], grad=False), "cpu")
    >>> build.cancel()
    >>> build.run()
    >>> build.done(), build.error, build.executable.compilations
    (True, None, 0)
"""
import collections
import sys
import threading
import time
from typing import Deque, Optional

from .backends import Executable, prepare_backend
from .backends._executable import Form

__all__: list = []

#: Python's thread switch interval while a build runs (see the module
#: docstring).
BUILD_SWITCH_INTERVAL_S = 2e-4


class Build:
    """One submitted build: :attr:`executable` holds the compiled form
    once :meth:`done`, unless :attr:`error` says why not."""

    def __init__(self, executable: Executable, form: Form, host_device: str):
        self.executable = executable
        self.form = form
        self.host_device = host_device
        #: When it was submitted (``time.perf_counter``).
        self.submitted = time.perf_counter()
        #: Seconds the compilation itself took, once done.
        self.seconds: Optional[float] = None
        self.error: Optional[BaseException] = None
        self.cancelled = False
        self._done = threading.Event()

    def done(self) -> bool:
        """Whether the build has finished (or failed, or was skipped)."""
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until :meth:`done`; returns it."""
        return self._done.wait(timeout)

    def cancel(self) -> None:
        """Skips the build if it has not started."""
        self.cancelled = True

    def run(self) -> None:
        """Compiles the form (in the worker thread)."""
        try:
            if not self.cancelled:
                start = time.perf_counter()
                interval = sys.getswitchinterval()
                sys.setswitchinterval(min(interval, BUILD_SWITCH_INTERVAL_S))
                try:
                    prepare_backend("compile", self.host_device)
                    self.executable.prepare_form(self.form)
                finally:
                    sys.setswitchinterval(interval)
                self.seconds = time.perf_counter() - start
        except Exception as error:  # noqa: BLE001 (reported by the caller)
            self.error = error
        finally:
            # The examples are not needed any more.
            self.form = None  # type: ignore[assignment]
            self._done.set()


_queue: Deque[Build] = collections.deque()
_lock = threading.Lock()
_wake = threading.Condition(_lock)
_worker: Optional[threading.Thread] = None


def _work() -> None:
    while True:
        with _lock:
            while not _queue:
                _wake.wait()
            build = _queue.popleft()
        build.run()


def submit(executable: Executable, form: Form, host_device: str) -> Build:
    """Queues the compilation of ``form`` (example tensors: see
    ``Form.like``) on ``executable``; returns its :class:`Build`."""
    global _worker
    build = Build(executable, form, host_device)
    with _lock:
        _queue.append(build)
        if _worker is None:
            _worker = threading.Thread(target=_work, daemon=True,
                                       name="poptorch-auto-compile")
            _worker.start()
        _wake.notify()
    return build
