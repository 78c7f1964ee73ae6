"""Compiling a step's form in the background, for the ``auto`` backend.

One thread takes the builds in the order they were submitted and compiles
each on its own ``compile`` :class:`~.backends.Executable` from example
tensors (``Form.like``): the thread never touches the tensors of the calls
that run meanwhile. Only one build runs at a time: two would share the two
cores of a small machine and both finish later. The thread ends when no
build is left, and a new one starts with the next.

At the end of the program, the build under way finishes (the interpreter
waits for the thread, as it is not a daemon) and queued ones are dropped.
A daemon thread would be stopped wherever it is once the interpreter
finalises: inside torch's C++ code, that aborts the process
("terminate called without an active exception").

The build competes with the calls that run meanwhile: for the GIL
(inductor's tracing and code generation are Python) and for the cores
(its ``g++`` runs, and torch's intra-op threads of the calls). On a small
machine the calls are slower while it runs, and it takes longer than a
compilation in the foreground; once it is done, nothing is shared.

Why not a child process, which would leave the GIL alone: this process
would still have to import inductor, trace the step and load the compiled
form from inductor's cache (a few seconds of Python), the child imports
torch and inductor again, and both compete for the same cores; on a
2-core machine the steps slowed more and the switch came later than with
the thread. Why not a lower priority for the thread (its ``g++`` runs
would inherit it): at ``nice`` 19 the steps kept their speed, but a
training loop that keeps both cores busy left the build no time to
finish.

Example (``submit(executable, form, "cpu")`` queues the same; a build
cancelled before it starts compiles nothing)::

    >>> from poptorch_core._executor.backends import Executable
    >>> from poptorch_core._executor.backends.executable import Form
    >>> gm = torch.fx.symbolic_trace(lambda x: x * 2)
    >>> build = Build(Executable(gm, "compile"),
    ...               Form("graph", [torch.ones(3)], grad=False), "cpu")
    >>> build.cancel()
    >>> build.run()
    >>> build.done(), build.error, build.executable.compilations
    (True, None, 0)
"""
import collections
import threading
import time
from typing import Deque, Optional

from .backends import Executable, prepare_backend
from .backends.executable import Form


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
                prepare_backend("compile", self.host_device)
                self.executable.prepare_form(self.form)
                self.seconds = time.perf_counter() - start
        except Exception as error:  # noqa: BLE001 (reported by the caller)
            self.error = error
        finally:
            # The examples are not needed any more.
            self.form = None  # type: ignore[assignment]
            self._done.set()


_queue: Deque[Build] = collections.deque()
_lock = threading.Lock()
_worker: Optional[threading.Thread] = None


def _work() -> None:
    global _worker
    while True:
        with _lock:
            if not _queue:
                _worker = None
                return
            build = _queue.popleft()
        if not threading.main_thread().is_alive():
            # The program is ending: compile nothing more.
            build.cancel()
        build.run()


def submit(executable: Executable, form: Form, host_device: str) -> Build:
    """Queues the compilation of ``form`` (example tensors: see
    ``Form.like``) on ``executable``; returns its :class:`Build`."""
    global _worker
    build = Build(executable, form, host_device)
    with _lock:
        _queue.append(build)
        if _worker is None:
            _worker = threading.Thread(target=_work,
                                       name="poptorch-auto-compile")
            _worker.start()
    return build


def wait_for_builds(timeout: Optional[float] = None) -> bool:
    """Waits until no build is queued or running (benchmarks: a build must
    not share the cores with what they time); returns whether none is."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _lock:
            worker = _worker
        if worker is None:
            return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        worker.join(left)
