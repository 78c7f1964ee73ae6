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
from typing import Any, Iterator, List, Optional

import torch.utils.data

from ._loader_parts import FixedSizeRequest, LoaderParts, fixed_size_parts
from ._padding_masks import registered_batches
from ._loader_strategies import FixedSizeStrategy, OverSizeStrategy
from .collate import FixedSizeCollater
from .fixed_size_options import FixedSizeOptions
from ._refusals import public, refusing_iterator
from .pyg_collate import Collater

from poptorch_core import logger

__all__ = ["FixedSizeStrategy", "OverSizeStrategy", "DataLoader",
           "FixedSizeDataLoader"]


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
        parts = fixed_size_parts(FixedSizeRequest(
            dataset, batch_size, shuffle, fixed_size_options,
            fixed_size_strategy, over_size_strategy, add_pad_masks,
            follow_batch, exclude_keys, kwargs))
        warn_if_skip_does_nothing(fixed_size_strategy, over_size_strategy)
        self._take(parts, batch_size)
        super().__init__(**parts.base_arguments())

    def _take(self, parts: LoaderParts, batch_size: int) -> None:
        """Keeps what users read of the built parts."""
        self.fixed_size_options = parts.fixed_size_options
        self.fixed_size_collater = parts.fixed_size_collater
        self.padded_batch_size = batch_size

    def _create_collater(self, **collater_args: Any) -> Any:
        """A collater padding one batch: ``FixedSizeCollater(**collater_args)``
        (the loader's own is built with its parts)."""
        return FixedSizeCollater(**collater_args)

    def __iter__(self) -> Iterator[Any]:
        # A refusal found while loading (by the collater or the sampler)
        # is raised from here, one line below the user's loop. Batches
        # that workers collate reach this process as copies: they are
        # registered as a fixed-size batch's here (padding-aware norms).
        return refusing_iterator(registered_batches(self, super().__iter__()))

    @public
    def __len__(self) -> int:
        return super().__len__()


def warn_if_skip_does_nothing(fixed_size_strategy: FixedSizeStrategy,
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
