"""Torch-side loaders (no PopTorch): PyG's ``DataLoader`` and the
fixed-size loader that pads every batch to the same shapes.

Example::

    >>> from torch_geometric.datasets import FakeDataset
    >>> ds = FakeDataset(num_graphs=7, avg_num_nodes=10)
    >>> loader = FixedSizeDataLoader(ds, batch_size=3)
    >>> len(loader), {tuple(b.x.shape) for b in loader} == {
    ...     (loader.fixed_size_options.num_nodes, ds[0].x.shape[1])}
    (4, True)
"""
import enum
from typing import Any, Dict, Iterator, List, Optional

import torch.utils.data
from torch.utils.data import RandomSampler, SequentialSampler
from torch_geometric.data import HeteroData

from ._fastpath.graph_cache import cached_graphs
from ._padding_masks import registered_batches
from .collate import FixedSizeCollater
from .fixed_size_options import FixedSizeOptions
from ._refusals import public, refusing_iterator
from .pyg_collate import Collater
from .stream_packing_sampler import StreamPackingSampler

from poptorch_core import logger

__all__ = ["FixedSizeStrategy", "OverSizeStrategy", "DataLoader",
           "FixedSizeDataLoader"]


class FixedSizeStrategy(enum.Enum):
    """How real graphs are grouped into fixed-size batches.

    * ``PadToMax``: ``batch_size - 1`` real graphs per batch, padded.
    * ``StreamPack``: as many consecutive graphs as fit the budgets
      (:class:`~poptorch_geometric.stream_packing_sampler.StreamPackingSampler`).
    """
    PadToMax = 0
    StreamPack = 1


class OverSizeStrategy(enum.Enum):
    """What happens to graphs that do not fit the budgets.

    * ``Error``: raise.
    * ``Skip``: skip (StreamPack only; counted and logged); behaves like
      ``Error`` with PadToMax.
    * ``TrimNodes`` / ``TrimEdges`` / ``TrimNodesAndEdges``: randomly remove
      nodes and/or edges (counted and logged).
    """
    Error = 0
    Skip = 1
    TrimNodes = 2
    TrimEdges = 3
    TrimNodesAndEdges = 4


_TRIMS_NODES = (OverSizeStrategy.TrimNodes, OverSizeStrategy.TrimNodesAndEdges)
_TRIMS_EDGES = (OverSizeStrategy.TrimEdges, OverSizeStrategy.TrimNodesAndEdges)


def _stream_packing_sampler(dataset: Any, opts: FixedSizeOptions,
                            shuffle: bool, generator: Any,
                            allow_skip_data: bool,
                            trim_oversize: bool = False
                            ) -> StreamPackingSampler:
    """The batch sampler of ``FixedSizeStrategy.StreamPack``: one graph,
    node and edge of each batch stay free for the padding graph, and
    batches are topped up from the lookahead the budgets were chosen for
    (greedy for a dataset whose transform may change sizes). With
    ``trim_oversize`` a graph too large for any batch makes a batch of its
    own, which the loader's collater trims."""
    # The loader's generator (if any) drives the shuffle, as it would
    # without packing.
    base = RandomSampler(dataset, generator=generator) if shuffle \
        else SequentialSampler(dataset)
    lookahead = getattr(opts, "packing_lookahead", 0)
    if lookahead and getattr(dataset, "transform", None) is not None:
        logger.info("The dataset has a transform, which may change graph "
                    "sizes between accesses: packing greedily (lookahead 0) "
                    "instead of with lookahead %d.", lookahead)
        lookahead = 0
    return StreamPackingSampler(
        dataset, opts.num_graphs - 1, max_num_nodes=opts.total_num_nodes - 1,
        max_num_edges=opts.total_num_edges - 1, base_sampler=base,
        allow_skip_data=allow_skip_data, lookahead=lookahead,
        trim_oversize=trim_oversize)


class DataLoader(torch.utils.data.DataLoader):
    """PyG's ``DataLoader``: batches PyG data objects with
    ``Batch.from_data_list``.

    Args:
        dataset: the dataset.
        batch_size: samples per batch.
        shuffle: reshuffle every epoch.
        follow_batch: keys that get a ``<key>_batch`` assignment vector.
        exclude_keys: keys left out of the batch.
        **kwargs: arguments of ``torch.utils.data.DataLoader`` (a
            ``collate_fn`` is ignored, as in PyG).
    """

    def __init__(self, dataset: Any, batch_size: int = 1,
                 shuffle: bool = False,
                 follow_batch: Optional[List[str]] = None,
                 exclude_keys: Optional[List[str]] = None,
                 **kwargs: Any) -> None:
        kwargs.pop("collate_fn", None)  # as PyG does (PyTorch Lightning)
        self.follow_batch = follow_batch
        self.exclude_keys = exclude_keys
        collater = self._create_collater(follow_batch=follow_batch,
                                         exclude_keys=exclude_keys)
        # Keywords only: poptorch_geometric.dataloader.DataLoader inherits
        # from this and poptorch.DataLoader cooperatively.
        super().__init__(dataset=dataset, batch_size=batch_size,
                         shuffle=shuffle, collate_fn=collater, **kwargs)

    def _create_collater(self, **collater_args: Any) -> Any:
        return Collater(**collater_args)


class FixedSizeDataLoader(torch.utils.data.DataLoader):
    """Loads batches padded to fixed sizes, so every batch has the same
    shapes.

    Args:
        dataset: the dataset.
        batch_size: graph slots per batch, including one padding graph;
            must equal ``fixed_size_options.num_graphs``.
        shuffle: reshuffle every epoch.
        fixed_size_options: the sizes; default:
            ``FixedSizeOptions.from_dataset(dataset, batch_size)``.
        fixed_size_strategy: ``PadToMax`` (``batch_size - 1`` graphs per
            batch) or ``StreamPack`` (greedy packing).
        over_size_strategy: what to do with graphs that do not fit.
        add_pad_masks: add ``graphs_mask``, ``nodes_mask``, ``edges_mask``.
        follow_batch: keys that get a ``<key>_batch`` assignment vector.
        exclude_keys: keys left out of the batch.
        **kwargs: arguments of ``torch.utils.data.DataLoader`` (not
            ``collate_fn``; ``batch_sampler`` not with StreamPack).

    Attributes:
        fixed_size_collater: the collater padding each batch (its
            ``trimmed`` counts what trimming removed).
        dataset: the dataset the batches come from; an ``InMemoryDataset``
            without a transform (also under ``Subset`` wrappers, as
            ``random_split`` makes) is wrapped in a cache that builds each graph
            object once (``loader.dataset.dataset`` is yours then; other
            attributes read through), and its tensor attributes are
            gathered straight from the dataset's storage, one
            ``index_select`` per attribute and batch, with the same values
            as ``dataset[i]`` gives.
    """

    @public
    def __init__(self,
                 dataset: Any,
                 batch_size: int = 2,
                 shuffle: bool = False,
                 fixed_size_options: Optional[FixedSizeOptions] = None,
                 fixed_size_strategy: FixedSizeStrategy =
                 FixedSizeStrategy.PadToMax,
                 over_size_strategy: OverSizeStrategy = OverSizeStrategy.Error,
                 add_pad_masks: bool = True,
                 follow_batch: Optional[List[str]] = None,
                 exclude_keys: Optional[List[str]] = None,
                 **kwargs: Any) -> None:
        if len(dataset) == 0:
            raise ValueError(
                "The dataset is empty: a FixedSizeDataLoader "
                "needs at least one graph.")
        self.fixed_size_options = fixed_size_options or \
            FixedSizeOptions.from_dataset(dataset, batch_size)
        # Later epochs reuse each graph object instead of rebuilding it.
        dataset = cached_graphs(dataset)
        opts = self.fixed_size_options
        first = dataset[0]
        if isinstance(first, HeteroData) and not opts.is_hetero():
            opts.to_hetero(first.node_types, first.edge_types)
        if batch_size != opts.num_graphs:
            raise AssertionError(
                f"batch_size ({batch_size}) must equal "
                f"fixed_size_options.num_graphs ({opts.num_graphs}): every batch "
                "is padded to num_graphs graphs.")
        self.padded_batch_size = batch_size
        # Read by _create_packing_sampler: a graph too large for any packed
        # batch goes alone into one that the collater trims.
        self._trims_oversize = over_size_strategy in (_TRIMS_NODES +
                                                      _TRIMS_EDGES)
        _warn_if_skip_does_nothing(fixed_size_strategy, over_size_strategy)
        batch_sampler = self._choose_batch_sampler(
            dataset, fixed_size_strategy, shuffle, kwargs,
            allow_skip_data=over_size_strategy == OverSizeStrategy.Skip)
        if batch_sampler is not None:
            torch_batch_size, shuffle = 1, None
        else:
            torch_batch_size = batch_size - 1
        self.batch_sampler = batch_sampler
        if "collate_fn" in kwargs:
            raise AssertionError(
                "FixedSizeDataLoader makes its own collate_fn (a "
                "FixedSizeCollater); do not pass one.")

        collater = self._create_collater(
            fixed_size_options=opts, add_masks_to_batch=add_pad_masks,
            trim_nodes=over_size_strategy in _TRIMS_NODES,
            trim_edges=over_size_strategy in _TRIMS_EDGES,
            follow_batch=follow_batch, exclude_keys=exclude_keys)
        super().__init__(dataset=dataset, batch_size=torch_batch_size,
                         shuffle=shuffle, batch_sampler=batch_sampler,
                         collate_fn=collater, **kwargs)

    def _choose_batch_sampler(self, dataset: Any,
                              strategy: FixedSizeStrategy, shuffle: bool,
                              kwargs: Dict[str, Any],
                              allow_skip_data: bool) -> Any:
        """The user's ``batch_sampler`` (PadToMax), the packing sampler
        (StreamPack), or None (torch batches ``batch_size - 1`` graphs)."""
        batch_sampler = kwargs.pop("batch_sampler", None)
        if strategy == FixedSizeStrategy.StreamPack:
            if batch_sampler is not None:
                raise ValueError(
                    "A batch_sampler cannot be combined with "
                    "FixedSizeStrategy.StreamPack, which makes its own "
                    "(StreamPackingSampler); use PadToMax with a custom "
                    "batch_sampler.")
            return self._create_packing_sampler(
                dataset, self.fixed_size_options, shuffle,
                kwargs.get("generator"), allow_skip_data=allow_skip_data)
        if strategy != FixedSizeStrategy.PadToMax:
            raise NotImplementedError(
                f"Unsupported fixed_size_strategy {strategy}.")
        return batch_sampler

    def _create_collater(self, **collater_args: Any) -> Any:
        self.fixed_size_collater = FixedSizeCollater(**collater_args)
        return self.fixed_size_collater

    def _create_packing_sampler(self, dataset: Any, opts: FixedSizeOptions,
                                shuffle: bool, generator: Any,
                                allow_skip_data: bool) -> Any:
        """The batch sampler of ``StreamPack`` (a hook, as
        ``_create_collater`` is, for the PopTorch loader's per-process
        share)."""
        return _stream_packing_sampler(dataset, opts, shuffle, generator,
                                       allow_skip_data,
                                       getattr(self, "_trims_oversize",
                                               False))

    def __iter__(self) -> Iterator[Any]:
        # A refusal found while loading (by the collater or the sampler)
        # is raised from here, one line below the user's loop. Batches
        # that workers collate reach this process as copies: they are
        # registered as a fixed-size batch's here (padding-aware norms).
        return refusing_iterator(registered_batches(self, super().__iter__()))

    @public
    def __len__(self) -> int:
        return super().__len__()


def _warn_if_skip_does_nothing(fixed_size_strategy: FixedSizeStrategy,
                               over_size_strategy: OverSizeStrategy) -> None:
    """PopTorch accepts ``Skip`` with ``PadToMax``, where it skips nothing:
    say so before the first over-size graph raises."""
    if over_size_strategy == OverSizeStrategy.Skip and \
            fixed_size_strategy == FixedSizeStrategy.PadToMax:
        logger.warning(
            "OverSizeStrategy.Skip skips graphs only with "
            "FixedSizeStrategy.StreamPack: with PadToMax a graph that does "
            "not fit raises as with OverSizeStrategy.Error. Use StreamPack "
            "to skip such graphs, or OverSizeStrategy.TrimNodesAndEdges to "
            "trim them.")
