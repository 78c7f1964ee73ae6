"""The worker process of an AsynchronousDataAccessor.

It iterates the dataset, writes each element into a free shared-memory ring
slot and tells the consumer which slot to read (see :mod:`._protocol`). It
waits only on its pipe, so it notices a reset, a stop or a vanished consumer
(end of file on the pipe) without polling. Loading errors are reported to the
consumer, never raised here: the worker then idles until it is reset.
"""
import collections
import multiprocessing
import os
import pickle
import signal
import traceback
from typing import Any, Deque, Iterator, List, Optional

import torch

from . import _protocol as P
from ._layout import ElementLayout

__all__ = ["worker_main"]

# How often an idle worker checks that its parent process still exists, in
# case the pipe stays open in a grandchild (a torch DataLoader worker).
_PARENT_CHECK_INTERVAL_S = 1.0


class _Stop(Exception):
    """The consumer asked the worker to exit, or went away."""


class _EpochSource:
    """Iterates one epoch of a dataset and remembers the position of the
    element being loaded, so that a failure can name it."""

    def __init__(self, dataset: Any):
        self._dataset = dataset
        # Map-style datasets (torch's Dataset has no __iter__) are read by
        # index: the legacy __getitem__ iteration protocol would never stop
        # for a dataset that does not raise IndexError.
        self._by_index = not hasattr(type(dataset), "__iter__")
        if self._by_index and not hasattr(dataset, "__len__"):
            raise TypeError(
                f"{type(dataset).__name__} has neither __iter__ nor __len__: "
                "the AsynchronousDataAccessor cannot iterate it.")
        self.position = 0

    def where(self) -> str:
        if self._by_index:
            return f"dataset index {self.position}"
        if isinstance(self._dataset, torch.utils.data.DataLoader):
            return f"batch {self.position} of the DataLoader"
        return f"element {self.position} of the dataset"

    def epoch(self) -> Iterator[Any]:
        self.position = 0
        elements = ((self._dataset[i] for i in range(len(self._dataset)))
                    if self._by_index else iter(self._dataset))
        for element in elements:
            yield element
            self.position += 1


def _rebatch(batches: Iterator[List[torch.Tensor]], size: int,
             drop_last: bool) -> Iterator[List[torch.Tensor]]:
    """Cuts a stream of batches (lists of tensors sharing dim 0) into
    batches of exactly ``size`` rows, in order. A final shorter batch is
    yielded unless ``drop_last``."""
    pending: List[List[torch.Tensor]] = []
    rows = 0
    for batch in batches:
        pending.append(batch)
        rows += batch[0].shape[0]
        while rows >= size:
            joined = [torch.cat(parts) for parts in zip(*pending)]
            yield [t[:size] for t in joined]
            pending = [[t[size:] for t in joined]]
            rows -= size
    if rows and not drop_last:
        yield [torch.cat(parts) for parts in zip(*pending)]


def _failure(where: str, error: BaseException) -> P.FailureDetails:
    summary = "".join(traceback.format_exception_only(type(error), error))
    return P.FailureDetails(
        where=where, summary=summary.strip(),
        traceback="".join(traceback.format_exception(error)),
        pid=os.getpid())


def _pickled(error: BaseException) -> Optional[bytes]:
    """``error`` pickled, so that the consumer can chain it if it can load
    it; None if it cannot be pickled."""
    try:
        return pickle.dumps(error)
    except Exception:  # pylint: disable=broad-except
        return None


class _Worker:
    """The worker's state: ring slots, free slots and the current epoch."""

    def __init__(self, dataset: Any, conn: Any, config: P.WorkerConfig):
        self._conn = conn
        self._config = config
        self._source = _EpochSource(dataset)
        self._generation = 0
        self._layout: Optional[ElementLayout] = None
        self._slots: List[List[torch.Tensor]] = []
        self._free: Deque[int] = collections.deque()
        self._limit = config.buffer_size if config.early_preload else 1
        self._stream: Optional[Iterator[List[torch.Tensor]]] = None
        self._idle = False

    # -- the pipe -------------------------------------------------------
    def _send(self, *message: Any) -> None:
        try:
            self._conn.send(message)
        except (BrokenPipeError, EOFError, OSError):
            raise _Stop() from None

    def _handle(self, message: Any) -> None:
        kind = message[0]
        if kind == P.RELEASE:
            if message[1] == self._generation:
                self._free.append(message[2])
        elif kind == P.GO:
            self._limit = self._config.buffer_size
        elif kind == P.RESET:
            self._generation = message[1]
            self._limit = self._config.buffer_size
            self._free = collections.deque(range(len(self._slots)))
            self._start_epoch()
        elif kind == P.STOP:
            raise _Stop()

    def _receive(self, timeout: float) -> bool:
        """Handles one message if one arrives within ``timeout`` seconds."""
        try:
            if not self._conn.poll(timeout):
                return False
            message = self._conn.recv()
        except (EOFError, OSError):
            raise _Stop() from None  # the consumer is gone
        self._handle(message)
        return True

    def _wait(self) -> None:
        """Blocks until a message arrives, checking the parent is alive."""
        parent = multiprocessing.parent_process()
        while not self._receive(_PARENT_CHECK_INTERVAL_S):
            if parent is not None and not parent.is_alive():
                raise _Stop()

    # -- loading ---------------------------------------------------------
    def _flat_elements(self, elements: Iterator[Any]
                       ) -> Iterator[List[torch.Tensor]]:
        for element in elements:
            yield self._layout.flatten(element, self._source.where())

    def _start_epoch(self, elements: Optional[Iterator[Any]] = None) -> None:
        # Close now so that an abandoned torch iterator shuts down its
        # worker processes before the next epoch starts its own.
        self.close()
        stream = self._flat_elements(elements or self._source.epoch())
        if self._config.rebatched_size is not None:
            stream = _rebatch(stream, self._config.rebatched_size,
                              self._config.drop_last)
        self._stream = stream
        self._idle = False

    def setup(self) -> bool:
        """Loads the first element and sends the ring to the consumer.
        Returns False when there is nothing to serve."""
        elements = self._source.epoch()
        try:
            first = next(elements)
            self._layout = ElementLayout(first, self._config.rebatched_size)
        except StopIteration:
            self._send(P.EMPTY)
            return False
        except Exception as error:  # pylint: disable=broad-except
            self._send(P.SETUP_FAILED, _failure(self._source.where(), error))
            return False
        self._slots = [self._layout.allocate()
                       for _ in range(self._config.buffer_size)]
        self._free = collections.deque(range(len(self._slots)))
        self._send(P.BUFFERS, self._layout.template, self._slots)
        self._start_epoch(_prepend(first, elements))
        return True

    def _can_fill(self) -> bool:
        in_use = len(self._slots) - len(self._free)
        return not self._idle and bool(self._free) and in_use < self._limit

    def _fill_one(self) -> None:
        """Loads the next batch into a free slot, or reports the end of the
        epoch or a failure."""
        try:
            tensors = next(self._stream)
        except StopIteration:
            self._send(P.END, self._generation, self._free.popleft())
            if self._config.load_indefinitely:
                self._start_epoch()
            else:
                self._idle = True
            return
        except Exception as error:  # pylint: disable=broad-except
            self._send(P.ERROR, self._generation,
                       _failure(self._source.where(), error),
                       _pickled(error))
            self._idle = True
            return
        slot = self._free.popleft()
        lengths = self._layout.write(self._slots[slot], tensors)
        self._send(P.ITEM, self._generation, slot, lengths)

    def close(self) -> None:
        """Closes the epoch's iterators (a torch DataLoader iterator shuts
        down its worker processes)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def run(self) -> None:
        while True:
            while self._receive(0):
                pass
            if self._can_fill():
                self._fill_one()
            else:
                self._wait()


def _prepend(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _stop_on_signal(signum: int, frame: Any) -> None:
    raise _Stop()


#: How much lower the worker's scheduling priority is than the consumer's.
WORKER_NICENESS = 10


def _yield_to_the_consumer() -> None:
    """The worker only runs ahead of the consumer, whose training step is
    the critical path: on a machine whose cores the step keeps busy, a
    worker at the same priority (with torch's intra-op threads of its own)
    slowed each step by more than the loading it took off it. So the worker
    uses one torch thread, as torch's own DataLoader workers do, and a lower
    priority; it still gets every core the step leaves idle
    (``docs/design/data_loading.rst``)."""
    torch.set_num_threads(1)
    try:
        os.nice(WORKER_NICENESS)
    except OSError:  # not permitted here: keep the priority
        pass


def worker_main(dataset: Any, conn: Any, config: P.WorkerConfig,
                parent_end: Any = None) -> None:
    """Entry point of the worker process."""
    # A process group of its own: the consumer can then sweep up the
    # processes the dataset started (a torch DataLoader's workers) even if
    # this one has to be killed, and Ctrl-C in a terminal reaches the
    # consumer only, which decides when the worker stops.
    os.setpgid(0, 0)
    _yield_to_the_consumer()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM unwinds through the finally clause below, so that an open
    # torch DataLoader iterator shuts its workers down.
    signal.signal(signal.SIGTERM, _stop_on_signal)
    if parent_end is not None:
        # Inherited through fork: closing it lets the pipe report end of
        # file once the consumer is gone.
        parent_end.close()
    # As in torch's DataLoader workers: intra-op threads here would compete
    # with the consumer's compute for the same cores.
    torch.set_num_threads(1)
    if config.default_start_method is not None:
        multiprocessing.set_start_method(config.default_start_method,
                                         force=True)
    if config.torch_sharing_strategy is not None:
        torch.multiprocessing.set_sharing_strategy(
            config.torch_sharing_strategy)
    worker = _Worker(dataset, conn, config)
    try:
        if worker.setup():
            worker.run()
    except _Stop:
        pass
    finally:
        worker.close()
        conn.close()

