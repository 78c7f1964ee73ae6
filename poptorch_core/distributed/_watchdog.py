"""Noticing that a process of a distributed run died or hangs, and naming it.

A collective fails at once when a peer's connection drops, and after the
process group's timeout when a peer never arrives, but its error names an
address, not a process. So each process keeps a heartbeat in the run's
store: a daemon thread writes ``"<beats> <collectives entered>"`` under its
rank every :attr:`Watchdog.interval` seconds. When a collective fails, the
survivors read every heartbeat twice, a few intervals apart: a process whose
beat did not move has stopped (it died, or is stuck without releasing the
interpreter); a live one that entered fewer collectives never arrived (it is
busy or waiting elsewhere). Survivors mark themselves as failing first, so
that none of them names another survivor that exits early.

Example (one process, so nobody else to blame)::

    >>> import datetime, torch.distributed as dist
    >>> store = dist.HashStore()
    >>> dog = Watchdog(store, rank=0, world_size=1, timeout=1.0,
    ...                store_address="(in memory)")
    >>> dog.start(); dog.enter()
    1
    >>> dog.culprits()
    {'missing': [], 'left': [], 'stopped': [], 'absent': []}
    >>> dog.stop()
"""
import threading
import time
from typing import Dict, List, Optional, Tuple

from .._logging import logger
from ..errors import UnrecoverableError

_FAILING = "failing/"
_LEFT = "left/"


def _beat_key(rank: int) -> str:
    return f"heartbeat/{rank}"


def _ranks(ranks: List[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + \
        ", ".join(map(str, ranks))


class Watchdog:
    """This process's heartbeat, and the diagnosis of a failed collective.

    Args:
        store: a ``torch.distributed.Store`` every process reaches.
        rank, world_size: this process and the number of processes.
        timeout: seconds a collective waits for the others.
        store_address: where the store lives (for messages).
    """

    def __init__(self, store, rank: int, world_size: int, timeout: float,
                 store_address: str):
        self._store = store
        self.rank = rank
        self.world_size = world_size
        self.timeout = timeout
        self._store_address = store_address
        #: Seconds between beats: a twentieth of the timeout, at most 1 s.
        self.interval = min(1.0, max(0.05, timeout / 20))
        #: Collectives this process has entered.
        self.entered = 0
        self._beats = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # --- Heartbeat ----------------------------------------------------------
    def start(self) -> None:
        """Publishes the first beat, then beats in a daemon thread."""
        self._publish()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"poptorch-heartbeat-{self.rank}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2 * self.interval)

    def _publish(self) -> None:
        self._store.set(_beat_key(self.rank), f"{self._beats} {self.entered}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._beats += 1
            try:
                self._publish()
            except Exception:  # pylint: disable=broad-except
                # The store went away: the run is over or failing, and the
                # next collective reports it.
                return

    def enter(self) -> int:
        """Counts a collective this process is entering; returns its
        number."""
        self.entered += 1
        return self.entered

    # --- Diagnosis ----------------------------------------------------------
    def _read(self) -> Dict[int, Optional[Tuple[int, int]]]:
        beats: Dict[int, Optional[Tuple[int, int]]] = {}
        for rank in range(self.world_size):
            if rank == self.rank:
                continue
            key = _beat_key(rank)
            if not self._store.check([key]):
                beats[rank] = None  # never joined
                continue
            count, entered = self._store.get(key).decode().split()
            beats[rank] = (int(count), int(entered))
        return beats

    def _flagged(self, flag: str, rank: int) -> bool:
        return self._store.check([flag + str(rank)])

    def leave(self) -> None:
        """Stops beating and tells the others that this process's program
        ended (it did not die)."""
        self.stop()
        try:
            self._store.set(_LEFT + str(self.rank), "1")
        except Exception:  # pylint: disable=broad-except
            pass  # the store is gone: nobody is left to tell

    def culprits(self) -> Dict[str, List[int]]:
        """The other processes to blame for a failed collective, by kind:
        ``"missing"`` (they never joined), ``"left"`` (their program
        ended), ``"stopped"`` (their heartbeat stopped) and ``"absent"``
        (alive, but they have not entered this process's latest
        collective). Takes about three beat intervals."""
        self._store.set(_FAILING + str(self.rank), "1")
        first = self._read()
        time.sleep(3 * self.interval)
        second = self._read()
        blame: Dict[str, List[int]] = {"missing": [], "left": [],
                                       "stopped": [], "absent": []}
        for rank, beat in second.items():
            if self._flagged(_FAILING, rank):
                continue  # another survivor
            if beat is None:
                blame["missing"].append(rank)
            elif self._flagged(_LEFT, rank):
                blame["left"].append(rank)
            elif first[rank] is not None and beat[0] == first[rank][0]:
                blame["stopped"].append(rank)
            elif beat[1] < self.entered:
                blame["absent"].append(rank)
        return blame

    def error(self, what: str, cause: BaseException) -> UnrecoverableError:
        """The error that replaces ``cause``, a failure of the collective
        ``what``: it names the processes that stopped or never arrived."""
        detail = str(cause).strip().splitlines()
        tail = (" The other processes cannot continue without it: restart "
                "the run. (torch.distributed: "
                f"{detail[0] if detail else type(cause).__name__})")
        try:
            blame = self.culprits()
        except Exception:  # pylint: disable=broad-except
            return UnrecoverableError(
                f"Distributed run: {what} failed on rank {self.rank} and "
                f"the run's store at {self._store_address} is unreachable: "
                "the process hosting it (rank 0, or the torchrun agent) has "
                "stopped." + tail)
        of = f" of {self.world_size}"
        parts = []
        if blame["missing"]:
            parts.append(
                f"{_ranks(blame['missing'])}{of} never joined the run (was "
                "every process started, with the same process count?)")
        if blame["left"]:
            parts.append(
                f"{_ranks(blame['left'])}{of} left the run (its program "
                "ended, e.g. after fewer steps than this one)")
        if blame["stopped"]:
            parts.append(
                f"{_ranks(blame['stopped'])}{of} stopped responding (no "
                f"heartbeat for {3 * self.interval:.1f} s: the process died "
                "or is stuck)")
        if blame["absent"]:
            parts.append(
                f"{_ranks(blame['absent'])}{of} did not reach it within the "
                f"{self.timeout:g} s timeout "
                "(options.Simulator.distributedTimeout): the process runs "
                "but is busy or waiting elsewhere")
        if not parts:
            parts.append(f"it failed on rank {self.rank}")
        message = (f"Distributed run: during {what}, " + "; ".join(parts) +
                   "." + tail)
        logger.error(message)
        return UnrecoverableError(message)
