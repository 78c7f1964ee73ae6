"""PopTorch-side loaders: each iteration yields one combined batch holding
the ``batch_size x deviceIterations x replication x gradientAccumulation``
samples a PopTorch model consumes per call.

Mini-batches are collated (and padded) one by one, then concatenated tensor
by tensor along dim 0 (see
:class:`~poptorch_geometric.collate.CombinedBatchingCollater`), which is the
layout PopTorch splits across iterations and replicas.

Example::

    >>> import poptorch
    >>> from poptorch_geometric.datasets import SyntheticMolecules
    >>> opts = poptorch.Options().deviceIterations(2)
    >>> loader = FixedSizeDataLoader(SyntheticMolecules(40), batch_size=5,
    ...                              options=opts)
    >>> batch = next(iter(loader))
    >>> batch.graphs_mask.shape        # 2 mini-batches of 5 graph slots
    torch.Size([10])
"""
from typing import Any, Iterator, List, Optional

import poptorch_core as poptorch
from poptorch_core import logger

from . import pyg_dataloader
from ._last_batch import LastBatch, mini_batches_per_step
from ._loader_parts import (Combine, FixedSizeRequest, PackedShare,
                            fixed_size_parts, signature_with_options)
from ._refusals import public
from .collate import CombinedBatchingCollater
from .pyg_dataloader import FixedSizeStrategy, OverSizeStrategy

__all__ = ["DataLoader", "FixedSizeDataLoader", "FixedSizeStrategy",
           "OverSizeStrategy"]


def _packed_share(options: poptorch.Options,
                  request: FixedSizeRequest) -> Optional[PackedShare]:
    """This process's share of the packed batches, when it takes one
    (stream packing over several processes with
    auto_distributed_partitioning) instead of poptorch.DataLoader
    splitting the dataset; None otherwise."""
    kwargs = request.kwargs
    if not (request.fixed_size_strategy == FixedSizeStrategy.StreamPack and
            options.Distributed.numProcesses > 1 and
            kwargs.get("auto_distributed_partitioning", True)):
        return None
    return PackedShare(
        options.Distributed.numProcesses, options.Distributed.processId,
        kwargs.get("drop_last", True),
        options.random_seed if options.exists("random_seed") else None)


class DataLoader(pyg_dataloader.DataLoader, poptorch.DataLoader):
    """PyG's ``DataLoader`` for PopTorch models: every iteration combines
    ``batch_size x`` (``options``' device iterations, replicas and gradient
    accumulation) samples, collated in mini-batches of ``batch_size``.

    Args:
        dataset: the dataset.
        batch_size: samples per mini-batch.
        shuffle: reshuffle every epoch.
        follow_batch: keys that get a ``<key>_batch`` assignment vector.
        exclude_keys: keys left out of the batch.
        options: the model's ``poptorch.Options`` (default: new ones).
        **kwargs: arguments of ``poptorch.DataLoader``.
    """

    def __init__(self, dataset: Any, batch_size: int = 1,
                 shuffle: bool = False,
                 follow_batch: Optional[List[str]] = None,
                 exclude_keys: Optional[List[str]] = None,
                 options: Optional[poptorch.Options] = None,
                 **kwargs: Any) -> None:
        # Read by _create_collater, which runs before the base init.
        self.batch_size = batch_size
        super().__init__(dataset=dataset, batch_size=batch_size,
                         shuffle=shuffle, follow_batch=follow_batch,
                         exclude_keys=exclude_keys,
                         options=options or poptorch.Options(), **kwargs)

    def _create_collater(self, **collater_args: Any) -> Any:
        return CombinedBatchingCollater(
            mini_batch_size=self.batch_size,
            collater=super()._create_collater(**collater_args))


class FixedSizeDataLoader(pyg_dataloader.FixedSizeDataLoader,
                          poptorch.DataLoader):
    """:class:`~poptorch_geometric.pyg_dataloader.FixedSizeDataLoader` for
    PopTorch models: each iteration holds ``deviceIterations x replication x
    gradientAccumulation`` fixed-size mini-batches of ``batch_size`` graph
    slots each, concatenated.

    ``drop_last`` defaults to True, as in PopTorch; the graphs it drops are
    logged each epoch. With ``drop_last=False`` the last combined batch is
    completed with padding-only mini-batches (every mask False), so every
    graph is seen once per epoch and every batch keeps its shape. A data set
    smaller than one combined batch gives one padded batch, not none.

    Arguments are those of the torch-side loader plus ``options`` (the
    model's ``poptorch.Options``, default: new ones).

    In a run of several processes (``options.Distributed``), each process
    gets its own share of the data, every process the same number of
    steps: ``PadToMax`` splits the dataset as ``poptorch.DataLoader`` does;
    ``StreamPack`` packs the whole dataset in every process and splits the
    packed batches (see :mod:`poptorch_geometric._packed_shares`). Shuffling
    needs ``options.randomSeed()``, so that every process draws the same
    order.
    """

    @public
    def __init__(self, *args: Any,
                 options: Optional[poptorch.Options] = None,
                 **kwargs: Any) -> None:
        options = options or poptorch.Options()
        request = FixedSizeRequest.bind(pyg_dataloader.FixedSizeDataLoader,
                                        *args, **kwargs)
        last_batch = LastBatch(request.kwargs.get("drop_last", True),
                               mini_batches_per_step(options))
        if request.pads_to_max:
            _keep_small_split(request, last_batch)
        share = _packed_share(options, request)
        if share is not None:
            # The packing sampler splits the batches, not poptorch's.
            request.kwargs["auto_distributed_partitioning"] = False
        parts = fixed_size_parts(
            request, Combine(last_batch.num_mini_batches, share))
        pyg_dataloader.warn_if_skip_does_nothing(
            request.fixed_size_strategy, request.over_size_strategy)
        self._take(parts, request.batch_size)
        # poptorch.DataLoader's __init__ reads len(self), which needs both.
        self._last_batch = last_batch
        self._combines_packs = parts.batch_sampler is not None
        poptorch.DataLoader.__init__(self, options, **parts.base_arguments())

    __init__.__signature__ = signature_with_options(
        pyg_dataloader.FixedSizeDataLoader.__init__)

    def _create_collater(self, **collater_args: Any) -> Any:
        """The torch-side collater inside the loader's combining one (see
        :class:`~._loader_parts.Combine`)."""
        return Combine(self._last_batch.num_mini_batches).collater(
            super()._create_collater(**collater_args),
            self.padded_batch_size, self._combines_packs)

    @public
    def __len__(self) -> int:
        length = super().__len__()
        if length == 0 and self._combines_packs and \
                self._last_batch.drop_last and len(self.batch_sampler) > 0:
            return 1  # the epoch's only, incomplete group is kept
        return length

    def __iter__(self) -> Iterator[Any]:
        if not self._combines_packs and self._last_batch.drop_last and \
                hasattr(self.sampler, "__len__"):
            self._last_batch.log_dropped(
                len(self.sampler) % self.combinedBatchSize,
                "the remainder of the data set")
        return super().__iter__()

    def _combine_batches(self, batches: Iterator[Any], num_batches: int,
                         drop_last: bool) -> Iterator[Any]:
        del num_batches, drop_last  # the policy holds both
        template = self.dataset[0]
        return self._last_batch.combine(
            batches, self.collate_fn.concat,
            lambda count: [self.collate_fn.concat([pad]) for pad in
                           self.collate_fn.padding_batches(template, count)])

    def _warn_partial_batch(self, num_samples: int) -> None:
        # poptorch.DataLoader warns that the model will reject a short last
        # batch; this loader completes it with padding-only mini-batches.
        logger.info(
            "%d graph(s) do not fill the last combined batch of %d: it is "
            "completed with padding-only mini-batches.",
            num_samples % self.combinedBatchSize, self.combinedBatchSize)


def _keep_small_split(request: FixedSizeRequest,
                      last_batch: LastBatch) -> None:
    """A data set smaller than one combined batch is yielded as one padded
    batch instead of none: ``drop_last`` is turned off for it."""
    dataset = request.dataset
    if not hasattr(dataset, "__len__"):
        return
    per_step = (request.batch_size - 1) * last_batch.num_mini_batches
    if last_batch.keeps_small_split(len(dataset), per_step):
        logger.warning(
            "The data set holds %d graph(s), fewer than one combined "
            "batch (%d): the FixedSizeDataLoader yields them as one "
            "padded batch instead of none (drop_last=True would drop "
            "them all).", len(dataset), per_step)
        request.kwargs["drop_last"] = False
        last_batch.drop_last = False
