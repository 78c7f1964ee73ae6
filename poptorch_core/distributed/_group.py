"""The process group of a distributed run: started once, on first use, and
torn down when the process exits.

The processes meet at the TCP store on ``MASTER_ADDR:MASTER_PORT``
(hosted by process 0, or under ``torchrun`` by its agent), then start a gloo or NCCL group whose collectives give up after the run's
timeout. Every collective runs under :meth:`ProcessGroup.guard`, which turns
a failure into ``poptorch.Error`` naming the process that died or hangs (see
``_watchdog``); after one failure the group is broken, and every later
collective raises the same error at once instead of waiting again.

If the program already started ``torch.distributed`` itself, that group is
used (and left for the program to destroy).
"""
import atexit
import contextlib
import datetime
import os
import socket
import time
from typing import Iterator, Optional

import torch
import torch.distributed as dist

from .._logging import logger
from ..errors import Error, UnrecoverableError, createPoptorchError
from ._launch import Launch
from ._watchdog import Watchdog

_STORE_PREFIX = "poptorch_sim"


def _host(addr: str) -> str:
    """``addr`` as the host part of a URL (IPv6 in brackets)."""
    return f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr


class ProcessGroup:
    """This process's membership of the run.

    Args:
        launch: where this process stands and how it reaches the others.
    """

    def __init__(self, launch: Launch):
        self.launch = launch
        #: The error that broke the group, if any.
        self.failure: Optional[Error] = None
        self._owned = not dist.is_initialized()
        self._store = self._rendezvous() if self._owned else self._adopt()
        # A torchrun restart reuses the agent's store: keep attempts apart.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        prefix = f"{_STORE_PREFIX}/{attempt}"
        self.watchdog = Watchdog(
            dist.PrefixStore(prefix, self._store), launch.rank,
            launch.world_size, launch.timeout,
            f"{launch.master_addr}:{launch.master_port}")
        self.watchdog.start()
        if self._owned:
            try:
                self._start()
            except BaseException:
                self.watchdog.stop()
                raise

    def _timeout(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.launch.timeout)

    def _rendezvous(self) -> "dist.Store":
        launch = self.launch
        try:
            if launch.rank == 0 and not launch.agent_store:
                store = _host_store(launch, self._timeout())
            else:
                store, _, _ = next(dist.rendezvous(
                    f"tcp://{_host(launch.master_addr)}:{launch.master_port}",
                    rank=launch.rank, world_size=launch.world_size,
                    timeout=self._timeout()))
            _register_rank(store, launch)
        except (RuntimeError, ValueError) as cause:
            if "EADDRINUSE" in str(cause):
                raise _address_in_use(launch) from None
            raise UnrecoverableError(
                f"Distributed run: process {launch.rank} of "
                f"{launch.world_size} could not meet the others at "
                f"{launch.master_addr}:{launch.master_port} within "
                f"{launch.timeout:g} s: are all {launch.world_size} "
                "processes started, with the same MASTER_ADDR, MASTER_PORT "
                "and process count? (torch.distributed: "
                f"{str(cause).strip().splitlines()[0]})") from cause
        return store

    def _adopt(self) -> "dist.Store":
        launch = self.launch
        rank, size = dist.get_rank(), dist.get_world_size()
        if (rank, size) != (launch.rank, launch.world_size):
            raise createPoptorchError(
                f"torch.distributed is already started as rank {rank} of "
                f"{size}, but options.Distributed says process "
                f"{launch.rank} of {launch.world_size}: configure both the "
                "same way.")
        # pylint: disable=protected-access
        return dist.distributed_c10d._get_default_store()

    def _start(self) -> None:
        launch = self.launch
        device_id = None
        if launch.device == "cuda":
            torch.cuda.set_device(launch.local_rank)
            device_id = torch.device("cuda", launch.local_rank)
        with self.guard("the start of the process group"):
            dist.init_process_group(
                launch.backend, store=self._store,
                rank=launch.rank, world_size=launch.world_size,
                timeout=self._timeout(), device_id=device_id)
        logger.info("Distributed run: process %d of %d joined (%s)",
                    launch.rank, launch.world_size, launch.backend)

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Runs a collective: a failure becomes ``poptorch.Error`` naming
        the culprit, and breaks the group."""
        if self.failure is not None:
            raise self.failure
        self.watchdog.enter()
        try:
            yield
        except RuntimeError as cause:
            self.failure = self.watchdog.error(what, cause)
            raise self.failure from cause

    def close(self) -> None:
        """Leaves the run: the heartbeat stops, the others learn that this
        process ended, and the group is destroyed (unless it is broken: its
        peers may be gone)."""
        self.watchdog.leave()
        if self.failure is not None:
            if self.launch.rank == 0 and not self.launch.agent_store:
                # The store lives in this process: let the other survivors
                # read the heartbeats before it goes.
                time.sleep(4 * self.watchdog.interval)
            return
        if self._owned and dist.is_initialized():
            dist.destroy_process_group()


_HOST_KEY = f"{_STORE_PREFIX}/host"


def _who() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


def _host_store(launch: Launch, timeout: datetime.timedelta) -> "dist.Store":
    """Process 0's store. It does not wait for the others here (starting
    the process group does), so that it can say at once who hosts it: a
    second process that also calls itself process 0 reads that."""
    store = dist.TCPStore(launch.master_addr, launch.master_port,
                          launch.world_size, is_master=True, timeout=timeout,
                          wait_for_workers=False, multi_tenant=True)
    store.set(_HOST_KEY, _who())
    return store


def _register_rank(store: "dist.Store", launch: Launch) -> None:
    """Refuses a second process with this process's rank."""
    # A torchrun restart reuses the agent's store: count this attempt's.
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    key = f"{_STORE_PREFIX}/{attempt}/rank/{launch.rank}"
    if store.add(key, 1) > 1:
        raise createPoptorchError(_duplicate_rank(launch, "another process"))


def _duplicate_rank(launch: Launch, holder: str) -> str:
    return (f"Distributed run: {holder} already joined the run at "
            f"{launch.master_addr}:{launch.master_port} as rank "
            f"{launch.rank}: two processes were given the same rank. Each of "
            f"the {launch.world_size} processes needs its own rank, 0 to "
            f"{launch.world_size - 1} (RANK or OMPI_COMM_WORLD_RANK, or "
            "configureProcessId); torchrun and poprun number them for you.")


def _address_in_use(launch: Launch) -> Error:
    """Process 0 could not host the store: another process 0 of the run
    hosts it, or another program uses the port."""
    try:
        probe = dist.TCPStore(launch.master_addr, launch.master_port,
                              is_master=False, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=min(
                                  5.0, launch.timeout)))
        if probe.check([_HOST_KEY]):
            return UnrecoverableError(_duplicate_rank(
                launch, probe.get(_HOST_KEY).decode()))
    except (RuntimeError, ValueError):
        pass
    return UnrecoverableError(
        f"Distributed run: process 0 cannot host the run at "
        f"{launch.master_addr}:{launch.master_port}: another program uses "
        "that port. Choose a free MASTER_PORT for every process.")


_group: Optional[ProcessGroup] = None
#: Why the group could not start (a process joins one run, once).
_start_failure: Optional[Error] = None
_warned_timeout = False


def process_group(launch: Launch) -> ProcessGroup:
    """The run's group, started on the first call."""
    global _group, _start_failure, _warned_timeout
    if _start_failure is not None:
        raise _start_failure
    if _group is None:
        try:
            _group = ProcessGroup(launch)
        except Error as error:
            _start_failure = error
            raise
        atexit.register(shutdown)
        return _group
    if not _group.launch.same_run(launch):
        raise createPoptorchError(
            "A process takes part in one distributed run: this model's "
            f"options describe {launch}, but the run started as "
            f"{_group.launch}.")
    if launch.timeout != _group.launch.timeout and not _warned_timeout:
        _warned_timeout = True
        logger.warning("Simulator.distributedTimeout(%g) is ignored: the "
                       "process group started with %g s.", launch.timeout,
                       _group.launch.timeout)
    return _group


def is_initialized() -> bool:
    """Whether this process has joined a distributed run."""
    return _group is not None


def shutdown() -> None:
    """Leaves the distributed run (also done at exit)."""
    global _group
    if _group is not None:
        group, _group = _group, None
        group.close()
