"""``AsynchronousDataAccessor``: load data in a worker process, ahead of use.

The worker fills a ring of shared-memory buffers while the consumer (the
training loop) uses the previous element, so data loading overlaps compute.
"""
import inspect
import pickle
from typing import Any, Optional

import torch

from ..enums import SharingStrategy
from ..errors import Error, createPoptorchError, public_class
from . import _protocol as P
from ._batch_arithmetic import count_batches, samples_per_epoch
from ._layout import ElementLayout
from ._process import (WorkerDied, WorkerProcess, WorkerStalled,
                       WorkerStopped, check_picklable)

__all__ = ["AsynchronousDataAccessor"]

_START_FAILED = ("AsynchronousDataAccessor worker thread failed to start "
                 "(Check above for details)")
_FETCHER_FAILED = "An error occurred in the data fetcher"


#: Seconds the consumer waits for one element before it reports the worker
#: as stalled (a deadlock in ``__getitem__``, a stopped process).
DEFAULT_TIMEOUT_S = 300.0


class _DataFetcherError(Error, AssertionError):
    """Loading failed in the worker process.

    PopTorch raised an ``AssertionError`` here; this is also a
    :class:`poptorch.Error`, so that either ``except`` clause catches it.
    """


def _fetcher_error(detail: str) -> _DataFetcherError:
    return _DataFetcherError(f"{_FETCHER_FAILED}: {detail}",
                             "poptorch_py_error")


def _check_options(buffer_size: Any, miss_sleep_time_in_ms: Any,
                   sharing_strategy: Any, rebatched_size: Any,
                   timeout: Any) -> None:
    """The accessor's argument checks (see its docstring)."""
    if not isinstance(buffer_size, int) or buffer_size < 1:
        raise ValueError(
            f"buffer_size must be a positive integer, got {buffer_size!r}")
    if not isinstance(miss_sleep_time_in_ms, (int, float)) \
            or miss_sleep_time_in_ms < 0:
        raise ValueError("miss_sleep_time_in_ms must be a non-negative "
                         f"number, got {miss_sleep_time_in_ms!r}")
    if sharing_strategy not in list(SharingStrategy):
        raise ValueError(
            f"Unknown sharing_strategy {sharing_strategy!r}: use one of "
            f"{[str(s) for s in SharingStrategy]}")
    if timeout is not None and (
            not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError("timeout must be a positive number of seconds "
                         f"or None (wait for ever), got {timeout!r}")
    if rebatched_size is not None:
        if not (isinstance(rebatched_size, int) and rebatched_size > 1):
            raise AssertionError(
                f"rebatched_size must be an integer > 1, got {rebatched_size!r}"
                " (use None to keep the dataset's batches)")


def check_accessor_options(dataset: Any, **options: Any) -> None:
    """Checks ``AsynchronousDataAccessor(dataset, **options)``'s arguments,
    and that the worker process could receive ``dataset``, without starting
    one: what an Async loader that loads in this process checks, so that
    it refuses what a worker would refuse."""
    bound = inspect.signature(AsynchronousDataAccessor).bind(dataset,
                                                             **options)
    bound.apply_defaults()
    values = bound.arguments
    _check_options(values["buffer_size"], values["miss_sleep_time_in_ms"],
                   values["sharing_strategy"], values["rebatched_size"],
                   values["timeout"])
    check_picklable(dataset, values["sharing_strategy"])


def loading_error(first: bool, details: str) -> Error:
    """The error for a failure to load an element: the first one (the
    worker could not start serving) or a later one."""
    if first:
        return createPoptorchError(f"{_START_FAILED}\n{details}")
    return _fetcher_error(details)


def _load_exception(pickled: Optional[bytes]) -> Optional[BaseException]:
    """The worker's exception, if this process can rebuild it (its class
    may not be importable here); its text is in the error message anyway."""
    if pickled is None:
        return None
    try:
        return pickle.loads(pickled)
    except Exception:  # pylint: disable=broad-except
        return None


def _is_poptorch_loader(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``poptorch.DataLoader`` (recognised by its
    ``combinedBatchSize`` property: the loader module imports this one, so
    this one cannot import it)."""
    return isinstance(dataset, torch.utils.data.DataLoader) and \
        hasattr(type(dataset), "combinedBatchSize")


@public_class
class AsynchronousDataAccessor:
    """Iterates ``dataset`` in a worker process that loads ahead of the
    consumer into a ring of ``buffer_size`` shared-memory slots.

    Elements must be a tensor, a tuple or list of tensors, a dict of tensors
    or a type registered with :func:`poptorch.registerCustomArgParser`, with
    the shapes of the first element (the leading dimension may be shorter,
    for a final partial batch).

    Each element is copied out of the ring before its slot is handed back
    to the worker, so the tensors returned are the caller's to keep
    (``list(accessor)`` holds every element intact). PopTorch returned views
    of the ring that the next element overwrote.

    Args:
        dataset: a map-style dataset (read by index), an iterable dataset or
            a DataLoader (iterated).
        buffer_size: number of ring slots: the worker runs up to
            ``buffer_size`` elements ahead.
        miss_sleep_time_in_ms: kept for compatibility. Waiting is
            event-driven (the worker signals through a pipe), so there is no
            polling interval to tune.
        load_indefinitely: at the end of an epoch, start loading the next one
            straight away instead of waiting for ``iter()``.
        early_preload: fill every slot before the first ``iter()``. If False,
            only the first element is loaded until iteration starts.
        sharing_strategy: how the worker is started and the buffers shared
            (see :class:`poptorch.SharingStrategy`; ``Fork`` needs no
            pickling of the dataset).
        rebatched_size: re-batch the dataset's batches into batches of this
            many rows (every tensor's dim 0). The final partial batch is kept
            unless the dataset is a DataLoader with ``drop_last=True``.
        timeout: seconds to wait for one element (300 by default; None
            waits for ever). A worker that sends nothing for that long
            (deadlocked, stopped with SIGSTOP) is stopped and the consumer
            raises an error that names the worker's state. Not in PopTorch,
            which waits for ever.

    Example::

        >>> dataset = torch.utils.data.TensorDataset(torch.randn(40, 3),
        ...                                          torch.randn(40))
        >>> loader = torch.utils.data.DataLoader(dataset, batch_size=16)
        >>> with poptorch.AsynchronousDataAccessor(loader) as accessor:
        ...     print([x.shape[0] for x, y in accessor])
        [16, 16, 8]

    Raises:
        poptorch.Error: the worker could not start, the dataset is empty, or
            (also an ``AssertionError``) loading failed later: the message
            names the failing element and carries the worker's traceback.
    """

    def __init__(self,
                 dataset: Any,
                 buffer_size: int = 3,
                 miss_sleep_time_in_ms: float = 0.1,
                 load_indefinitely: bool = True,
                 early_preload: bool = False,
                 sharing_strategy: SharingStrategy = SharingStrategy.ForkServer,
                 rebatched_size: Optional[int] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT_S):
        self._worker: Optional[WorkerProcess] = None
        self._internal: bool = getattr(self, "_internal", False)
        _check_options(buffer_size, miss_sleep_time_in_ms, sharing_strategy,
                       rebatched_size, timeout)
        self._timeout = timeout
        self._drop_last = self._check_dataset(dataset, rebatched_size)
        self._dataset = dataset
        self._rebatched_size = rebatched_size
        self._load_indefinitely = load_indefinitely
        config = P.WorkerConfig(buffer_size=buffer_size,
                                load_indefinitely=load_indefinitely,
                                early_preload=early_preload,
                                rebatched_size=rebatched_size,
                                drop_last=self._drop_last)
        self._generation = 0
        self._position = 0  # elements returned in this epoch
        self._exhausted = False
        self._failure: Optional[str] = None  # loading error of this epoch
        self._dead: Optional[str] = None  # the worker died: permanent
        self._started = early_preload
        self._worker = WorkerProcess(dataset, config, sharing_strategy)
        self._layout, self._slots = self._receive_buffers(rebatched_size)

    @classmethod
    def _for_loader(cls, loader: Any, **options: Any
                    ) -> "AsynchronousDataAccessor":
        """The accessor a ``poptorch.DataLoader`` builds for its Async
        modes. The loader handles its own final partial batch and length,
        so the checks meant for user-made accessors over it do not apply."""
        accessor = cls.__new__(cls)
        accessor._internal = True  # pylint: disable=protected-access
        accessor.__init__(loader, **options)
        return accessor

    def _check_dataset(self, dataset: Any,
                       rebatched_size: Optional[int]) -> bool:
        """Validates a PopTorch DataLoader source; returns whether a final
        partial re-batch must be dropped."""
        if _is_poptorch_loader(dataset):
            # An Async loader that loads in this process (no CPU free for
            # a worker) would use one elsewhere: the same error either way.
            if dataset._accessor is not None or \
                    dataset._async_inline:  # pylint: disable=protected-access
                raise createPoptorchError(
                    "The DataLoader already uses an AsynchronousDataAccessor "
                    "internally. Either use the existing one or set "
                    "mode='poptorch.DataLoaderMode.Sync' in the DataLoader.")
            drop_last = dataset._drop_last  # pylint: disable=protected-access
            if not (self._internal or drop_last or \
                    rebatched_size is not None or \
                    (dataset.combinedBatchSize or 1) <= 1):
                raise AssertionError(
                    "The 'drop_last=False' option from the DataLoader only "
                    "works if 'rebatched_size' is specified too.")
            return drop_last
        if isinstance(dataset, torch.utils.data.DataLoader):
            return dataset.drop_last
        return False

    def _receive_buffers(self, rebatched_size: Optional[int]):
        try:
            message = self._worker.receive(self._timeout)
        except WorkerDied as died:
            self.terminate()
            raise loading_error(True, str(died)) from None
        except WorkerStalled as stalled:
            self._on_stall(stalled)
        if message[0] == P.EMPTY:
            self.terminate()
            raise createPoptorchError("The Dataset is empty")
        if message[0] == P.SETUP_FAILED:
            self.terminate()
            raise loading_error(True, message[1].describe())
        _, template, slots = message
        return ElementLayout(template, rebatched_size), slots

    # -- iteration -------------------------------------------------------
    def _check_alive(self) -> None:
        if self._dead is not None:
            raise _fetcher_error(self._dead)
        if self._worker is None:
            raise createPoptorchError(
                "This AsynchronousDataAccessor has been terminated: create a "
                "new one to load more data.")

    def _send(self, *message: Any) -> None:
        try:
            self._worker.send(*message)
        except WorkerDied as died:
            self._on_death(died)

    def _on_death(self, died: WorkerDied) -> None:
        self._dead = f"{died} No more data can be loaded."
        self.terminate()
        raise _fetcher_error(self._dead) from None

    def _start(self) -> None:
        if not self._started:
            self._send(P.GO)
            self._started = True

    def _on_stall(self, stalled: WorkerStalled) -> None:
        fix = ("Leave the worker process running: resume a stopped one "
               "(kill -CONT <pid>) within seconds." if isinstance(
                   stalled, WorkerStopped) else
               "If loading one element really takes this long, pass a "
               "larger timeout (or None) to the AsynchronousDataAccessor "
               "(DataLoader: async_options={'timeout': ...}).")
        self._dead = f"{stalled} The accessor stopped it. {fix}"
        self.terminate()
        raise _fetcher_error(self._dead) from None

    def _next_message(self) -> Any:
        while True:
            try:
                message = self._worker.receive(self._timeout)
            except WorkerDied as died:
                self._on_death(died)
            except WorkerStalled as stalled:
                self._on_stall(stalled)
            if message[1] == self._generation:
                return message
            # Otherwise it belongs to an epoch abandoned by a reset.

    def __iter__(self) -> "AsynchronousDataAccessor":
        self._check_alive()
        fresh = self._position == 0 and not self._exhausted
        continuing = self._exhausted and self._load_indefinitely
        if self._failure is not None or not (fresh or continuing):
            self._generation += 1
            self._send(P.RESET, self._generation)
            self._started = True
        self._position = 0
        self._exhausted = False
        self._failure = None
        self._start()
        return self

    def __next__(self) -> Any:
        self._check_alive()
        if self._failure is not None:
            raise _fetcher_error(self._failure)
        if self._exhausted:
            raise StopIteration
        self._start()
        message = self._next_message()
        if message[0] == P.ITEM:
            _, _, slot, lengths = message
            element = self._layout.copy_out(self._slots[slot], lengths)
            # The copy is the caller's: the slot can be refilled at once.
            self._send(P.RELEASE, self._generation, slot)
            self._position += 1
            return element
        if message[0] == P.END:
            self._send(P.RELEASE, self._generation, message[2])
            self._exhausted = True
            raise StopIteration
        _, _, details, pickled = message
        self._failure = details.describe()
        raise _fetcher_error(self._failure) from _load_exception(pickled)

    def __len__(self) -> int:
        dataset = self._dataset
        if self._rebatched_size is None or self._internal:
            return len(dataset)
        if not isinstance(dataset, torch.utils.data.DataLoader) or \
                dataset.batch_size is None:
            raise TypeError(
                "The length of a re-batched dataset is only known for a "
                "DataLoader with a batch_size.")
        return count_batches(samples_per_epoch(dataset), self._rebatched_size,
                             self._drop_last)

    # -- shutdown --------------------------------------------------------
    def terminate(self) -> None:
        """Stops the worker process. Idempotent; also runs at interpreter
        exit and when the accessor is garbage collected."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def __enter__(self) -> "AsynchronousDataAccessor":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.terminate()

    def __del__(self):
        if hasattr(self, "_worker"):
            self.terminate()
