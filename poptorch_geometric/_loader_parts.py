"""What a fixed-size loader hands its base ``DataLoader``: the dataset, the
batch sampler and the collater, built in one place before the base class
is initialised.

The torch-side loaders build their parts alone; their PopTorch-side
subclasses build the same parts with a :class:`Combine` (how PopTorch joins
mini-batches into one step's batch) and pass them to ``poptorch.DataLoader``.
Nothing the base initialisation calls comes back to the loader to finish
the parts, so the order in which attributes are set does not matter.

Example::

    >>> from torch_geometric.datasets import FakeDataset
    >>> from poptorch_geometric.pyg_dataloader import FixedSizeDataLoader
    >>> request = FixedSizeRequest.bind(
    ...     FixedSizeDataLoader, FakeDataset(num_graphs=7), batch_size=3)
    >>> parts = fixed_size_parts(request)
    >>> parts.batch_sampler is None, parts.base_arguments()["batch_size"]
    (True, 2)
    >>> combined = fixed_size_parts(request, Combine(num_mini_batches=4))
    >>> combined.collater.mini_batch_size, combined.collater.num_mini_batches
    (2, 4)
"""
import dataclasses
import inspect
from typing import Any, Callable, Dict, List, Optional

import torch
from torch_geometric.data import HeteroData

import poptorch_core as poptorch

from ._fastpath.graph_cache import cached_graphs
from ._packed_shares import PartitionedBatchSampler
from ._loader_strategies import FixedSizeStrategy, OverSizeStrategy, trims
from .collate import CombinedBatchingCollater, FixedSizeCollater
from .fixed_size_options import FixedSizeOptions
from .stream_packing_sampler import packing_sampler


@dataclasses.dataclass
class LoaderParts:
    """The base loader's dataset, batch sampler (None: the base batches
    by ``batch_size``) and collater, the fixed-size collater and sizes
    inside it, and the base loader's other keyword arguments."""
    dataset: Any
    batch_sampler: Optional[Any]
    collater: Callable[[List[Any]], Any]
    fixed_size_collater: FixedSizeCollater
    fixed_size_options: FixedSizeOptions
    loader_kwargs: Dict[str, Any]

    def base_arguments(self) -> Dict[str, Any]:
        """Keyword arguments of the base loader's ``__init__``."""
        return dict(self.loader_kwargs, dataset=self.dataset,
                    batch_sampler=self.batch_sampler,
                    collate_fn=self.collater)


@dataclasses.dataclass(frozen=True)
class PackedShare:
    """This process's share of the packed batches in a run of several
    processes: every process packs the same shuffled order and takes its
    block (:class:`~._packed_shares.PartitionedBatchSampler`).
    ``seed`` is the options' random seed, if set."""
    num_processes: int
    process_id: int
    drop_last: bool
    seed: Optional[int]

    def generator(self, shuffle: bool, generator: Any) -> Any:
        """The generator the packing shuffles with: every process must
        draw the same order, epoch after epoch."""
        if not shuffle or generator is not None:
            return generator
        if self.seed is None:
            raise AssertionError(
                "When using auto_distributed_partitioning you must set "
                "poptorch.Options.randomSeed() to ensure that tensors are in "
                "the same order in all processes.")
        return torch.Generator().manual_seed(self.seed)


@dataclasses.dataclass(frozen=True)
class Combine:
    """How a PopTorch-side loader joins fixed-size mini-batches:
    ``num_mini_batches`` per step (PopTorch's ``D x R/g x G``), and with
    ``share`` each process packs the whole dataset and keeps its block."""
    num_mini_batches: int
    share: Optional[PackedShare] = None

    def collater(self, fixed_size_collater: FixedSizeCollater,
                 batch_size: int, packs: bool) -> CombinedBatchingCollater:
        """With a batch sampler (``packs``) each sampled list is one
        mini-batch and ``poptorch.DataLoader`` joins them as it iterates;
        otherwise the collater receives one step's samples at once, the
        epoch's last step possibly short, and pads it."""
        if packs:
            return CombinedBatchingCollater(collater=fixed_size_collater)
        return CombinedBatchingCollater(
            mini_batch_size=batch_size - 1,
            num_mini_batches=self.num_mini_batches,
            collater=fixed_size_collater)


def padding_collater(fixed_size_options: FixedSizeOptions,
                     over_size_strategy: OverSizeStrategy,
                     add_pad_masks: bool,
                     follow_batch: Optional[List[str]] = None,
                     exclude_keys: Optional[List[str]] = None
                     ) -> FixedSizeCollater:
    """The collater that pads each mini-batch, trimming as
    ``over_size_strategy`` says."""
    trim_nodes, trim_edges = trims(over_size_strategy)
    return FixedSizeCollater(
        fixed_size_options=fixed_size_options,
        add_masks_to_batch=add_pad_masks, trim_nodes=trim_nodes,
        trim_edges=trim_edges, follow_batch=follow_batch,
        exclude_keys=exclude_keys)


@dataclasses.dataclass
class FixedSizeRequest:
    """The arguments of
    :class:`~poptorch_geometric.pyg_dataloader.FixedSizeDataLoader`."""
    dataset: Any
    batch_size: int
    shuffle: bool
    fixed_size_options: Optional[FixedSizeOptions]
    fixed_size_strategy: FixedSizeStrategy
    over_size_strategy: OverSizeStrategy
    add_pad_masks: bool
    follow_batch: Optional[List[str]]
    exclude_keys: Optional[List[str]]
    kwargs: Dict[str, Any]

    @classmethod
    def bind(cls, loader: Callable[..., Any], *args: Any,
             **kwargs: Any) -> "FixedSizeRequest":
        """The request of a call ``loader(*args, **kwargs)``, defaults
        applied (``loader`` takes the fields as parameters)."""
        call = inspect.signature(loader).bind(*args, **kwargs)
        call.apply_defaults()
        return cls(**call.arguments)

    @property
    def pads_to_max(self) -> bool:
        """PadToMax with torch's own batching (no batch sampler)."""
        return self.fixed_size_strategy == FixedSizeStrategy.PadToMax and \
            "batch_sampler" not in self.kwargs


def fixed_size_parts(request: FixedSizeRequest,
                     combine: Optional[Combine] = None) -> LoaderParts:
    """The parts of a fixed-size loader: the dataset (cached where that is
    safe), the batch sampler (the user's, the packing sampler or None),
    the padding collater (inside a combining one with ``combine``)."""
    dataset, batch_size = request.dataset, request.batch_size
    if len(dataset) == 0:
        raise ValueError(
            "The dataset is empty: a FixedSizeDataLoader "
            "needs at least one graph.")
    opts = request.fixed_size_options or \
        FixedSizeOptions.from_dataset(dataset, batch_size)
    # Later epochs reuse each graph object instead of rebuilding it.
    dataset = cached_graphs(dataset)
    first = dataset[0]
    if isinstance(first, HeteroData) and not opts.is_hetero():
        opts.to_hetero(first.node_types, first.edge_types)
    if batch_size != opts.num_graphs:
        raise AssertionError(
            f"batch_size ({batch_size}) must equal "
            f"fixed_size_options.num_graphs ({opts.num_graphs}): every batch "
            "is padded to num_graphs graphs.")
    kwargs = dict(request.kwargs)
    batch_sampler = _batch_sampler(dataset, opts, request, kwargs, combine)
    if "collate_fn" in kwargs:
        raise AssertionError(
            "FixedSizeDataLoader makes its own collate_fn (a "
            "FixedSizeCollater); do not pass one.")
    if batch_sampler is not None:
        kwargs.update(batch_size=1, shuffle=None)
    else:
        kwargs.update(batch_size=batch_size - 1, shuffle=request.shuffle)
    fixed_size_collater = padding_collater(
        opts, request.over_size_strategy, request.add_pad_masks,
        request.follow_batch, request.exclude_keys)
    collater = fixed_size_collater if combine is None else \
        combine.collater(fixed_size_collater, batch_size,
                         packs=batch_sampler is not None)
    return LoaderParts(dataset, batch_sampler, collater, fixed_size_collater,
                       opts, kwargs)


def _batch_sampler(dataset: Any, opts: FixedSizeOptions,
                   request: FixedSizeRequest, kwargs: Dict[str, Any],
                   combine: Optional[Combine]) -> Any:
    """The user's ``batch_sampler`` (PadToMax), the packing sampler
    (StreamPack, this process's share of it with ``combine.share``), or
    None (torch batches ``batch_size - 1`` graphs)."""
    batch_sampler = kwargs.pop("batch_sampler", None)
    strategy = request.fixed_size_strategy
    if strategy == FixedSizeStrategy.StreamPack:
        if batch_sampler is not None:
            raise ValueError(
                "A batch_sampler cannot be combined with "
                "FixedSizeStrategy.StreamPack, which makes its own "
                "(StreamPackingSampler); use PadToMax with a custom "
                "batch_sampler.")
        share = combine.share if combine is not None else None
        generator = kwargs.get("generator")
        if share is not None:
            generator = share.generator(request.shuffle, generator)
        over_size = request.over_size_strategy
        sampler = packing_sampler(
            dataset, opts, request.shuffle, generator,
            allow_skip_data=over_size == OverSizeStrategy.Skip,
            # A graph too large for any packed batch goes alone into one
            # that the collater trims.
            trim_oversize=any(trims(over_size)))
        if share is None:
            return sampler
        return PartitionedBatchSampler(
            sampler, share.num_processes, share.process_id,
            combine.num_mini_batches, share.drop_last)
    if strategy != FixedSizeStrategy.PadToMax:
        raise NotImplementedError(
            f"Unsupported fixed_size_strategy {strategy}.")
    return batch_sampler


def signature_with_options(init: Callable[..., None]) -> inspect.Signature:
    """``init``'s signature with ``options`` (the model's
    ``poptorch.Options``) added before ``**kwargs``: the signature of a
    PopTorch-side loader over a torch-side one."""
    params = list(inspect.signature(init).parameters.values())
    options = inspect.Parameter("options", inspect.Parameter.KEYWORD_ONLY,
                                default=None,
                                annotation=Optional[poptorch.Options])
    return inspect.Signature(params[:-1] + [options, params[-1]])
