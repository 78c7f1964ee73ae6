"""``poptorch.DataLoader``: a torch DataLoader that yields whole host batches.

A PopTorch model consumes ``batch_size x D x (R / g) x G`` samples per call
(device iterations, replication factor over input group size, gradient
accumulation). This loader asks torch for batches of that combined size, so
each item it yields is exactly one call's input.
"""
from typing import Any, Dict, Iterator, Optional, Tuple

import torch

from .._logging import logger
from ..enums import DataLoaderMode
from ..errors import createPoptorchError, public_call, public_class
from ..options import Options
from ._batch_arithmetic import (
    combined_batch_generator,
    count_batches,
    num_batches_to_combine,
    samples_per_epoch)
from ._partition import DistributedPartitionSampler
from ._load_placement import (
    PLACEMENT_ENV,
    WORKER_LOADING_EPOCHS,
    WORKER_LOADING_SHARE,
    LoadingShare,
    async_placement,
    available_cpus,
    requested_placement)
from ._inline import CheckedBatches
from .accessor import AsynchronousDataAccessor, check_accessor_options

__all__ = ["DataLoader"]


def _check_batch_sampler(batch_size: Optional[int], shuffle: Optional[bool],
                         partitioning: bool) -> None:
    if batch_size != 1 or shuffle:
        raise createPoptorchError(
            "`batch_sampler` option is mutually exclusive with "
            "batch_size, shuffle.")
    if partitioning:
        raise createPoptorchError(
            "`batch_sampler` option is mutually exclusive with "
            "auto_distributed_partitioning=True.")


@public_class
class DataLoader(torch.utils.data.DataLoader):
    """A torch DataLoader whose batches are PopTorch host batches.

    Args:
        options: the model's :class:`poptorch.Options`; they are frozen.
        dataset: a map-style or iterable dataset.
        batch_size: the micro-batch size (one replica, one iteration).
            ``None`` disables batching: the dataset yields whole batches.
        shuffle: reshuffle every epoch (globally and identically on every
            process of a distributed run, which needs
            ``options.randomSeed()``).
        num_workers: torch DataLoader worker processes.
        drop_last: drop a final incomplete combined batch (default True,
            unlike torch: a model only accepts the batch size it was
            compiled for).
        persistent_workers: default ``num_workers > 0``.
        auto_distributed_partitioning: with several processes
            (``options.Distributed``), give each process its own contiguous
            part of a map-style dataset.
        mode: ``Sync`` loads in this process; ``Async`` in a worker process
            through an :class:`AsynchronousDataAccessor` where a CPU is
            free for it, else in this process as ``Sync`` does (see
            ``POPTORCH_ASYNC_PLACEMENT`` in ``docs/environment.rst``);
            ``AsyncRebatched`` likewise, with torch batches of
            ``rebatched_worker_size`` joined into combined batches (an
            iterable dataset split over several workers then loses at most
            one partial batch in all). With a
            ``batch_sampler``, both asynchronous modes transfer the combined
            batches the sampler's batches make.
        async_options: keyword arguments of the AsynchronousDataAccessor.
        rebatched_worker_size: torch batch size with ``AsyncRebatched``
            (default: the combined batch size).
        batch_sampler: yields the indices of each micro-batch (the batches
            may differ in size); ``D x (R / g) x G`` consecutive batches are
            concatenated along dim 0, the last incomplete group following
            ``drop_last``. ``collate_fn`` may return tensors, containers of
            them, types registered with ``registerCustomArgParser`` or plain
            objects holding tensors (their other attributes are taken from
            the group's first batch).
        **kwargs: passed to ``torch.utils.data.DataLoader``.

    Example::

        >>> opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
        >>> dataset = torch.utils.data.TensorDataset(torch.randn(30, 5))
        >>> loader = poptorch.DataLoader(opts, dataset, batch_size=3)
        >>> loader.combinedBatchSize
        12
        >>> len(loader)    # 30 samples, the last 6 do not fill a batch
        2
    """

    @public_call
    def __new__(cls, *args: Any, **kwargs: Any) -> "DataLoader":
        # Before __init__ binds the arguments: a dataset passed first would
        # otherwise be reported as a missing dataset. Subclasses (PopTorch
        # Geometric's loaders) have signatures of their own.
        if cls is DataLoader and args and "dataset" not in kwargs and len(args) < 2 and \
                not isinstance(args[0], Options):
            raise AssertionError(
                "poptorch.DataLoader takes the options first, then the "
                f"dataset, and got a {type(args[0]).__name__} without "
                "options: call poptorch.DataLoader(poptorch.Options(), "
                "dataset, batch_size=...) with the options the model uses.")
        return super().__new__(cls)

    def __init__(self,
                 options: Any,
                 dataset: Any,
                 batch_size: Optional[int] = 1,
                 shuffle: Optional[bool] = None,
                 num_workers: int = 0,
                 drop_last: bool = True,
                 persistent_workers: Optional[bool] = None,
                 auto_distributed_partitioning: bool = True,
                 mode: DataLoaderMode = DataLoaderMode.Sync,
                 async_options: Optional[Dict[str, Any]] = None,
                 rebatched_worker_size: Optional[int] = None,
                 batch_sampler: Optional[Any] = None,
                 **kwargs: Any):
        if not isinstance(options, Options):
            raise AssertionError(
                f"options must be a poptorch.Options, got {type(options).__name__}")
        options.freeze()
        self._options = options
        self._accessor: Optional[AsynchronousDataAccessor] = None
        self._async_inline = self._async_may_move = False  # _placement
        mode = DataLoaderMode(mode)
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        self._num_batches_to_combine = num_batches_to_combine(options)
        self._drop_last = drop_last
        self._is_iterable = isinstance(dataset,
                                       torch.utils.data.IterableDataset)
        processes = options.Distributed.numProcesses
        self._combine_sampler_batches = batch_sampler is not None
        if batch_sampler is not None:
            _check_batch_sampler(batch_size, shuffle, processes > 1 and
                                 auto_distributed_partitioning)
            # Each sampler batch is one micro-batch.
            batch_size = getattr(batch_sampler, "batch_size", None)
        self._combined_batch_size = (
            None if batch_size is None else
            batch_size * self._num_batches_to_combine)
        cbs = self._combined_batch_size
        if self._is_iterable:
            self._check_iterable(auto_distributed_partitioning, processes,
                                 num_workers, kwargs)
        elif processes > 1 and auto_distributed_partitioning:
            shuffle = self._partition(len(dataset), shuffle, kwargs)
        elif batch_sampler is None and not drop_last and cbs and \
                len(dataset) % cbs:
            self._warn_partial_batch(len(dataset))

        torch_batch_size, torch_drop_last = self._torch_batching(
            mode, batch_sampler, rebatched_worker_size)
        super().__init__(dataset=dataset,
                         batch_size=torch_batch_size,
                         shuffle=shuffle,
                         num_workers=num_workers,
                         drop_last=torch_drop_last,
                         persistent_workers=persistent_workers,
                         batch_sampler=batch_sampler,
                         **kwargs)
        if not self._warn_if_empty() and mode != DataLoaderMode.Sync:
            self._start_accessor(async_options)

    # -- construction helpers -------------------------------------------
    def _check_iterable(self, auto_distributed_partitioning: bool,
                        processes: int, num_workers: int,
                        kwargs: Dict[str, Any]) -> None:
        if auto_distributed_partitioning:
            if processes != 1:
                raise AssertionError(
                    "auto_distributed_partitioning is not supported for an "
                    "IterableDataset: split the data between processes in the "
                    "dataset's __iter__ (see options.Distributed.processId and "
                    "numProcesses) and pass auto_distributed_partitioning=False.")
        if num_workers > 1 and kwargs.get("worker_init_fn") is None:
            logger.warning(
                "IterableDataset used with num_workers=%d but no "
                "worker_init_fn specified: as a result the DataLoader will "
                "return %d times each element in the dataset (See "
                "torch.utils.data.IterableDataset's documentation for more "
                "information)", num_workers, num_workers)

    def _partition(self, num_samples: int, shuffle: Optional[bool],
                   kwargs: Dict[str, Any]) -> bool:
        """Installs the per-process sampler; returns torch's ``shuffle``."""
        opts = self._options
        if shuffle and not opts.exists("random_seed"):
            raise AssertionError(
                "When using auto_distributed_partitioning you must set "
                "poptorch.Options.randomSeed() to ensure that tensors are in the "
                "same order in all processes.")
        if self._combined_batch_size is None:
            raise AssertionError(
                "batch_size=None not allowed when using "
                "auto_distributed_partitioning.")
        if shuffle and kwargs.get("sampler") is not None:
            raise ValueError(
                "sampler option is mutually exclusive with shuffle")
        kwargs["sampler"] = DistributedPartitionSampler(
            num_samples, self._combined_batch_size,
            opts.Distributed.numProcesses, opts.Distributed.processId,
            self._drop_last, opts.random_seed if shuffle else None,
            kwargs.get("sampler"))
        if not self._drop_last and \
                len(kwargs["sampler"]) % self._combined_batch_size:
            self._warn_partial_batch(len(kwargs["sampler"]))
        return False

    def _torch_batching(self, mode: DataLoaderMode, batch_sampler: Any,
                        rebatched_worker_size: Optional[int]
                        ) -> Tuple[Optional[int], bool]:
        """The torch loader's ``batch_size`` and ``drop_last``; decides
        whether the accessor re-batches (``self._rebatched``)."""
        cbs = self._combined_batch_size
        if mode == DataLoaderMode.AsyncRebatched:
            if batch_sampler is not None and \
                    rebatched_worker_size is not None:
                raise ValueError(
                    "rebatched_worker_size cannot be used with a "
                    "batch_sampler: the batch_sampler decides the batches. "
                    "Leave rebatched_worker_size unset.")
            if rebatched_worker_size is not None and cbs is not None:
                if rebatched_worker_size > cbs:
                    raise AssertionError(
                        f"The rebatched_worker_size ({rebatched_worker_size}) "
                        f"must be <= to the combined batch size ({cbs})")
        elif rebatched_worker_size is not None:
            raise ValueError(
                "rebatched_worker_size is only used with "
                "mode=poptorch.DataLoaderMode.AsyncRebatched.")
        # Async with a short final batch re-batches too, so that partial
        # torch batches are joined exactly as AsyncRebatched joins them.
        # With a batch_sampler the loader itself joins the sampler's
        # batches (``combined_batch_generator``), so every mode transfers
        # whole combined batches and nothing is re-batched.
        self._rebatched = (cbs or 0) > 1 and batch_sampler is None and (
            mode == DataLoaderMode.AsyncRebatched or
            (mode == DataLoaderMode.Async and not self._drop_last))
        if self._rebatched:
            # The accessor applies drop_last to the final combined batch.
            return rebatched_worker_size or cbs, False
        if batch_sampler is not None:
            # Torch rejects drop_last with a batch_sampler: the combined
            # groups apply it in __iter__.
            return 1, False
        # Torch rejects drop_last without a batch size too.
        return cbs, self._drop_last and cbs is not None

    def _start_accessor(self, async_options: Optional[Dict[str, Any]]
                        ) -> None:
        async_options = dict(async_options or {})
        if "rebatched_size" in async_options:
            raise AssertionError(
                "The DataLoader sets the AsynchronousDataAccessor's "
                "rebatched_size itself: use mode=DataLoaderMode.AsyncRebatched "
                "and rebatched_worker_size instead.")
        if self._rebatched:
            async_options["rebatched_size"] = self._combined_batch_size
        elif async_placement() == "inline":
            # No CPU is free for a worker process (``_placement``): it would
            # slow the training step by more than the loading it takes over.
            # What a worker would refuse is refused here too (``_inline``).
            check_accessor_options(self, **async_options)
            # Only an automatic choice is revisited (``_inline_epoch``).
            automatic = requested_placement() == "auto"
            if automatic:
                logger.info(
                    "DataLoaderMode.Async loads in this process, as Sync "
                    "does: torch's %d intra-op thread(s) leave none of the "
                    "%d CPU(s) this process may run on free for a worker "
                    "process. A worker takes over if loading turns out to "
                    "take %d%% or more of %d epochs in a row. Set %s=worker "
                    "to use one anyway.", torch.get_num_threads(),
                    available_cpus(), round(WORKER_LOADING_SHARE * 100),
                    WORKER_LOADING_EPOCHS, PLACEMENT_ENV)
            self._async_inline, self._async_may_move = True, automatic
            self._heavy_loading_epochs = 0  # in a row (``_inline_epoch``)
            self._async_options = async_options
            return
        self._accessor = AsynchronousDataAccessor._for_loader(  # pylint: disable=protected-access
            self, **async_options)

    def _inline_epoch(self, batches: Iterator[Any]) -> Iterator[Any]:
        """An epoch of an Async loader that loads in this process; once
        loading took a large share of enough complete epochs in a row, the
        following epochs load in a worker process (``_placement``)."""
        timer = LoadingShare()
        yield from timer.watch(batches)
        if timer.share is None:  # left early: it tells nothing
            return
        if timer.share < WORKER_LOADING_SHARE:
            self._heavy_loading_epochs = 0
            return
        self._heavy_loading_epochs += 1
        if self._heavy_loading_epochs < WORKER_LOADING_EPOCHS or \
                not self._async_may_move:  # another epoch iterator moved
            return
        self._async_inline = self._async_may_move = False  # tried once
        try:
            self._accessor = AsynchronousDataAccessor._for_loader(  # pylint: disable=protected-access
                self, **self._async_options)
        except Exception as error:  # pylint: disable=broad-except
            # Loading in this process works: keep it rather than fail a
            # training loop that asked for nothing more.
            logger.warning(
                "DataLoaderMode.Async: loading took %.0f%% of the last "
                "epoch, but no worker process could take it over (%s); the "
                "loader keeps loading in this process.", timer.share * 100,
                error)
            return
        logger.info(
            "DataLoaderMode.Async: loading took %.0f%% of the last epoch, "
            "so the following epochs load in a worker process.",
            timer.share * 100)

    def _warn_if_empty(self) -> bool:
        """Warns (and remembers, for ``__iter__`` to raise) when an epoch
        has no batch; returns whether it has none."""
        self._empty_message = self._yields_nothing()
        if self._empty_message is not None:
            logger.warning(self._empty_message)
        return self._empty_message is not None

    def _yields_nothing(self) -> Optional[str]:
        """Why an epoch of this loader has no batch, or None if it has
        one (or its length is unknown)."""
        try:
            if self._combined_batch_size is None or len(self) > 0:
                return None
        except (TypeError, NotImplementedError):
            return None  # an iterable or a sampler of unknown length
        opts = self._options
        what = (f"its batch_sampler gives {len(self.batch_sampler)} "
                "batch(es)" if self._combine_sampler_batches else
                f"it reads {len(self.sampler)} sample(s)")
        return (
            f"This DataLoader yields no batch: {what}, and one step takes "
            f"{self._combined_batch_size} sample(s) (batch_size "
            f"{self._combined_batch_size // self._num_batches_to_combine} x "
            f"deviceIterations {opts.device_iterations} x replicationFactor "
            f"{opts.replication_factor} / input group size "
            f"{opts.input_group_size} x gradientAccumulation "
            f"{opts.Training.gradient_accumulation}); drop_last=True drops "
            "the incomplete step. Use a smaller batch_size or fewer device "
            "iterations, or pass drop_last=False to keep a short last "
            "batch.")

    def _warn_partial_batch(self, num_samples: int) -> None:
        logger.warning(
            "The number of elements in the dataset (%d) is not divisible by "
            "the number of elements processed per step (%d) and "
            "drop_last=False: the last batch will only have %d elements, "
            "which the model will reject unless it is compiled for them.",
            num_samples, self._combined_batch_size,
            num_samples % self._combined_batch_size)

    # -- public API -----------------------------------------------------
    @property
    def combinedBatchSize(self) -> Optional[int]:
        """Samples per yielded batch: ``batch_size x D x (R / g) x G``."""
        return self._combined_batch_size

    @property
    def options(self) -> Any:
        """The (frozen) :class:`poptorch.Options` of this loader."""
        return self._options

    def terminate(self) -> None:
        """Stops the asynchronous worker, if any. Idempotent."""
        if self._accessor is not None:
            self._accessor.terminate()

    def __len__(self) -> int:
        if self._is_iterable and not hasattr(self.dataset, "__len__"):
            raise TypeError(f"'{type(self.dataset).__name__}' has no len()")
        if self._rebatched:
            return count_batches(samples_per_epoch(self),
                                 self._combined_batch_size, self._drop_last)
        if self._combine_sampler_batches:
            return count_batches(len(self.batch_sampler),
                                 self._num_batches_to_combine,
                                 self._drop_last)
        return super().__len__()

    def __iter__(self) -> Iterator[Any]:
        if self._empty_message is not None:
            raise createPoptorchError(self._empty_message)
        if self._accessor is not None:
            return iter(self._accessor)
        batches = super().__iter__()
        if self._combine_sampler_batches:
            batches = self._combine_batches(
                batches, self._num_batches_to_combine, self._drop_last)
        if self._async_inline:
            batches = CheckedBatches(batches)
            if self._async_may_move:
                return self._inline_epoch(batches)
        return batches

    def _combine_batches(self, batches: Iterator[Any], num_batches: int,
                         drop_last: bool) -> Iterator[Any]:
        """Joins each group of ``num_batches`` consecutive batches of the
        ``batch_sampler`` into one combined batch. A hook: a subclass that
        can pad the final incomplete group (PopTorch Geometric's fixed-size
        loader) overrides it."""
        return combined_batch_generator(batches, num_batches, drop_last)

    def __getstate__(self) -> Dict[str, Any]:
        # The accessor's worker receives a pickled copy of the loader and
        # iterates it synchronously, with worker processes of its own.
        state = self.__dict__.copy()
        state["_accessor"] = None
        state["_async_inline"] = False  # the worker's copy loads as Sync
        state["_iterator"] = None
        return state

    def __del__(self):
        if self.__dict__.get("_accessor") is not None:
            self.terminate()
