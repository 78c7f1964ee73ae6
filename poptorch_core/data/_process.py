"""Starting, watching and stopping an accessor's worker process.

How each :class:`SharingStrategy` creates the worker and shares the ring:

- ``ForkServer`` (default): forked from a fork server. The dataset is pickled
  to the worker; the ring tensors are shared by passing file descriptors.
  The fork server is asked to pre-import torch, so that each worker starts in
  milliseconds rather than re-importing torch (about a second).
- ``Fork``: plain ``fork``: nothing is pickled, so any dataset works, at the
  usual risks of forking a process that runs threads.
- ``SharedMemory``: ``spawn``, ring shared by file descriptors.
- ``FileSystem``: ``spawn``, ring shared through named files
  (torch's ``file_system`` strategy), for when file descriptors run out.

Every worker is stopped by :meth:`WorkerProcess.stop`, which the owner calls;
an ``atexit`` hook stops the ones still running when the interpreter exits
(before ``multiprocessing`` joins its children, which would otherwise wait
for ever on a worker that nobody told to stop).
"""
import atexit
import dataclasses
import io
import multiprocessing
import multiprocessing.connection
import multiprocessing.util  # noqa: F401  (its atexit hook must come first)
import os
import pickle
import signal
import time
import weakref
from typing import Any, Optional, Tuple

import torch.multiprocessing

from ..enums import SharingStrategy
from ..errors import createPoptorchError
from .._logging import logger
from . import _protocol as P
from ._worker import worker_main

__all__ = ["WorkerDied", "WorkerProcess", "WorkerStalled", "WorkerStopped",
           "check_picklable"]

_START_METHODS = {
    SharingStrategy.SharedMemory: ("spawn", None),
    SharingStrategy.FileSystem: ("spawn", "file_system"),
    SharingStrategy.Fork: ("fork", None),
    SharingStrategy.ForkServer: ("forkserver", None),
}
# Bound on how long a dead worker goes unnoticed while the consumer waits.
_LIVENESS_INTERVAL_S = 0.05
# How often a waiting consumer reads the worker's state from the OS, and how
# long a worker may stay stopped (SIGSTOP) before the consumer gives up on
# it: a stopped or zombie worker sends nothing, and waiting out the timeout
# (meant for a worker that runs, but slowly) would take minutes.
_STATE_CHECK_INTERVAL_S = 0.25
_STOPPED_GRACE_S = 1.0
# A worker finishes the element it is loading before it reads STOP.
_STOP_GRACE_S = 5.0
_KILL_GRACE_S = 2.0

_running: "weakref.WeakSet[WorkerProcess]" = weakref.WeakSet()


class WorkerDied(Exception):
    """The worker process exited without being asked to."""


class WorkerStalled(Exception):
    """The worker process sent nothing for longer than the timeout."""


class WorkerStopped(WorkerStalled):
    """The worker process is stopped (SIGSTOP): it cannot send anything."""


_PROCESS_STATES = {
    "R": "running (busy, e.g. in the dataset's __getitem__)",
    "S": "sleeping (waiting on a lock, I/O or another process)",
    "D": "in uninterruptible I/O",
    "T": "stopped (for example by SIGSTOP or Ctrl-Z)",
    "t": "stopped by a debugger",
    "Z": "a zombie (exited but not reaped)",
}


def process_state(pid: int) -> Optional[str]:
    """The OS's one-letter state of process ``pid`` (``"R"``, ``"S"``,
    ``"T"``, ``"Z"``, ...), or None where it cannot be read (not Linux, or
    the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            # The command name may hold spaces: the state follows its ")".
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def describe_process_state(pid: int) -> str:
    """What the OS says process ``pid`` is doing, in words (Linux; other
    systems give "in an unknown state")."""
    state = process_state(pid)
    if state is None:
        return "in an unknown state"
    return _PROCESS_STATES.get(state, f"in state {state!r}")


def _preload_torch_in_forkserver(context: Any) -> None:
    # Private attribute, read defensively: the public setter replaces the
    # list, and the user's own preloads must survive. It only has an effect
    # if the fork server has not started yet.
    from multiprocessing import forkserver  # pylint: disable=import-outside-toplevel
    current = list(getattr(getattr(forkserver, "_forkserver", None),
                           "_preload_modules", None) or ["__main__"])
    wanted = current + [m for m in ("torch", "poptorch_core")
                        if m not in current]
    if wanted != current:
        context.set_forkserver_preload(wanted)


def _start_error(strategy: SharingStrategy, error: Exception) -> Exception:
    return createPoptorchError(
        "The AsynchronousDataAccessor could not start its worker process "
        f"with SharingStrategy.{SharingStrategy(strategy).name}: {error}. "
        "Except with SharingStrategy.Fork, the dataset is pickled to the "
        "worker: make it picklable (no lambdas or local classes) or use "
        "sharing_strategy=poptorch.SharingStrategy.Fork.")


class _Discard(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # type: ignore[override]
        return len(data)


class _PicklerWithoutTensors(pickle.Pickler):
    """Pickles everything but tensor data: whether an object can be sent
    to a worker, without copying its tensors."""

    def persistent_id(self, obj: Any) -> Optional[int]:
        if isinstance(obj, (torch.Tensor, torch.UntypedStorage,
                            torch.TypedStorage)):
            return id(obj)
        return None


def check_picklable(dataset: Any, strategy: SharingStrategy) -> None:
    """Raises the error that starting a worker for ``dataset`` with
    ``strategy`` would raise if it cannot be pickled (``Fork`` pickles
    nothing)."""
    if SharingStrategy(strategy) == SharingStrategy.Fork:
        return
    try:
        _PicklerWithoutTensors(_Discard(), pickle.HIGHEST_PROTOCOL).dump(
            dataset)
    except Exception as error:  # pylint: disable=broad-except
        raise _start_error(strategy, error) from None


def _describe_exit(exitcode: Optional[int]) -> str:
    if exitcode is None:
        return "is not responding"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"


class WorkerProcess:
    """The consumer's handle on one worker process.

    Example::

        >>> config = P.WorkerConfig(buffer_size=2, load_indefinitely=False,
        ...                         early_preload=True, rebatched_size=None,
        ...                         drop_last=False)
        >>> worker = WorkerProcess([torch.zeros(3)], config,
        ...                        SharingStrategy.Fork)
        >>> message = worker.receive()     # (BUFFERS, template, slots)
        >>> message[0] == P.BUFFERS
        True
        >>> worker.stop()
    """

    def __init__(self, dataset: Any, config: P.WorkerConfig,
                 strategy: SharingStrategy):
        method, torch_strategy = _START_METHODS[SharingStrategy(strategy)]
        context = torch.multiprocessing.get_context(method)
        if method == "forkserver":
            _preload_torch_in_forkserver(context)
        own_end, worker_end = context.Pipe(duplex=True)
        config = dataclasses.replace(
            config, torch_sharing_strategy=torch_strategy,
            default_start_method=(
                multiprocessing.get_start_method(allow_none=True) or
                multiprocessing.get_all_start_methods()[0]))
        # Non-daemonic so that the dataset may use a torch DataLoader with
        # worker processes of its own.
        self._process = context.Process(
            target=worker_main, name="AsynchronousDataAccessor",
            args=(dataset, worker_end, config,
                  own_end if method == "fork" else None),
            daemon=False)
        try:
            self._process.start()
        except Exception as error:
            own_end.close()
            worker_end.close()
            raise _start_error(strategy, error) from error
        # Only the worker may hold its end: end of file then means it died.
        worker_end.close()
        self._conn = own_end
        self._owner_pid = os.getpid()
        self._stopped = False
        self._reaped = False
        self.pid: int = self._process.pid
        _running.add(self)
        logger.debug("AsynchronousDataAccessor worker process: %d", self.pid)

    def send(self, *message: Any) -> None:
        try:
            self._conn.send(message)
        except (BrokenPipeError, EOFError, OSError):
            raise self._died() from None

    def receive(self, timeout: Optional[float] = None) -> Tuple[Any, ...]:
        """The next message; raises :class:`WorkerDied` if the worker exits
        first (noticed within ``_LIVENESS_INTERVAL_S``) and
        :class:`WorkerStalled` if nothing comes within ``timeout`` seconds
        (None: wait as long as the worker lives)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        watch = _StateWatch(self.pid)
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise WorkerStalled(
                    f"The worker process (pid {self.pid}) has sent nothing "
                    f"for {timeout:g} s; it is "
                    f"{describe_process_state(self.pid)}.")
            try:
                if self._conn.poll(_LIVENESS_INTERVAL_S):
                    return self._conn.recv()
            except (EOFError, OSError):
                raise self._died() from None
            # The pipe can outlive the worker in its own children (a torch
            # DataLoader's workers), so end of file alone is not enough:
            # an unreaped worker is a zombie, still "alive" to multiprocessing
            # while its children hold the pipe and its sentinel.
            if (self._has_exited(0) or watch.zombie()) and \
                    not self._conn.poll(0):
                raise self._died(grace=0.0)
            watch.raise_if_stopped()

    def _died(self, grace: float = _KILL_GRACE_S) -> WorkerDied:
        # A worker that closed its pipe is about to exit: give it a moment.
        self._has_exited(grace)
        self._reap()
        return WorkerDied(f"The worker process (pid {self.pid}) "
                          f"{_describe_exit(self._process.exitcode)}.")

    def stop(self) -> None:
        """Stops the worker: politely, then SIGTERM, then SIGKILL, and
        kills whatever its process group still holds (the processes its
        dataset started). Idempotent; a no-op in processes that merely
        inherited the handle through fork."""
        if self._stopped or os.getpid() != self._owner_pid:
            return
        self._stopped = True
        _running.discard(self)
        # A stopped or zombie worker cannot act on STOP or SIGTERM.
        if not self._reaped and process_state(self.pid) not in ("T", "Z"):
            try:
                self._conn.send((P.STOP,))
            except (OSError, ValueError):
                pass  # already gone
            if not self._has_exited(_STOP_GRACE_S):
                logger.warning(
                    "AsynchronousDataAccessor worker process %d did not "
                    "stop within %.0f s: terminating it.", self.pid,
                    _STOP_GRACE_S)
                self._signal_group(signal.SIGTERM)
                self._has_exited(_KILL_GRACE_S)
        if not self._reaped:
            self._reap()
        self._conn.close()

    def _has_exited(self, timeout: float) -> bool:
        """Waits up to ``timeout`` s for the worker to exit, without reaping
        it (``is_alive()`` would)."""
        return bool(multiprocessing.connection.wait([self._process.sentinel],
                                                    timeout))

    def _reap(self) -> None:
        """Kills the worker's process group, then reaps the worker.

        The group id is the worker's pid, which stays reserved while the
        worker or any process of its group exists. Under ``fork`` and
        ``spawn`` the unreaped worker holds it until ``join``; a fork
        server reaps its children itself, and only the kernel's cyclic pid
        allocation keeps the id from being reused in the instant between
        that and this sweep."""
        if self._reaped:
            return
        self._signal_group(signal.SIGKILL)
        self._process.join()
        self._reaped = True

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            # The worker has not made its own group yet.
            if not self._has_exited(0):
                os.kill(self.pid, signum)

    def __del__(self):
        if hasattr(self, "_stopped"):
            self.stop()


class _StateWatch:
    """Reads a waited-on worker's state from the OS every
    ``_STATE_CHECK_INTERVAL_S``: a zombie has exited, and one stopped for
    ``_STOPPED_GRACE_S`` is given up on (a worker stopped by a debugger,
    state ``t``, is left alone)."""

    def __init__(self, pid: int):
        self._pid = pid
        self._next_check = time.monotonic() + _STATE_CHECK_INTERVAL_S
        self._state: Optional[str] = None
        self._stopped_since: Optional[float] = None

    def _read(self) -> Optional[str]:
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + _STATE_CHECK_INTERVAL_S
            self._state = process_state(self._pid)
            if self._state != "T":
                self._stopped_since = None
            elif self._stopped_since is None:
                self._stopped_since = now
        return self._state

    def zombie(self) -> bool:
        return self._read() == "Z"

    def raise_if_stopped(self) -> None:
        if self._read() != "T" or self._stopped_since is None:
            return
        stopped_for = time.monotonic() - self._stopped_since
        if stopped_for >= _STOPPED_GRACE_S:
            raise WorkerStopped(
                f"The worker process (pid {self._pid}) has been stopped "
                f"(SIGSTOP) for {stopped_for:.1f} s, so it loads nothing.")


def _stop_all() -> None:
    for worker in list(_running):
        worker.stop()


atexit.register(_stop_all)
