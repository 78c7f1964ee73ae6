"""Neighbour-sampled subgraphs of fixed size, for node-level tasks on
graphs too large for one batch.

Each batch of ``batch_size`` seed nodes becomes the subgraph PyG's
``NeighborLoader`` samples around them (seeds first), padded to fixed sizes
with one padding graph. Sampling runs on
:class:`~poptorch_geometric.TorchNeighborSampler` (plain torch), so neither
pyg-lib nor torch-sparse is needed.

Example::

    >>> from poptorch_geometric import FixedSizeOptions
    >>> from poptorch_geometric.datasets import power_law_graph
    >>> data = power_law_graph(num_nodes=1000, num_edges=8000)
    >>> loader = PyGFixedSizeNeighborLoader(
    ...     data, num_neighbors=[5, 3], batch_size=16, add_pad_masks=True,
    ...     fixed_size_options=FixedSizeOptions(num_nodes=300, num_edges=300))
    >>> batch = next(iter(loader))
    >>> batch.x.shape[0], batch.edge_index.shape[1], batch.batch_size
    (300, 300, 16)
    >>> batch.n_id[:3].tolist(), int(batch.nodes_mask.sum()) > 16
    ([0, 1, 2], True)
"""
import inspect
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import torch.utils.data
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import NeighborLoader
from torch_geometric.loader.utils import get_input_nodes
from torch_geometric.sampler import BaseSampler
from torch_geometric.sampler.base import SubgraphType

import poptorch_core as poptorch

from ._padding_masks import registered_batches
from ._sampling.neighbor_sampler import TorchNeighborSampler
from ._sampling.seed_trim import keep_nodes_near_seeds
from ._loader_parts import LoaderParts, padding_collater
from ._loader_strategies import OverSizeStrategy, trims
from .collate import CombinedBatchingCollater, FixedSizeCollater
from .fixed_size_options import FixedSizeOptions

__all__ = ["PyGFixedSizeNeighborLoader", "FixedSizeNeighborLoader",
           "TorchNeighborSampler"]

# Sampler outputs that are not per node or per edge: taken off before
# padding and put back on the padded batch.
_SEED_KEYS = ("batch_size", "input_id")
_PER_HOP_KEYS = ("num_sampled_nodes", "num_sampled_edges")


class PyGFixedSizeNeighborLoader(torch.utils.data.DataLoader):
    """Samples a subgraph around every ``batch_size`` seed nodes and pads
    it to fixed sizes (torch side, no PopTorch).

    The sampling arguments are those of PyG's ``NeighborLoader``; sampling
    runs on ``neighbor_sampler``, by default a
    :class:`~poptorch_geometric.TorchNeighborSampler` over ``data`` (CSC
    built once per graph). A padded batch holds the sampled subgraph (seed
    nodes first, as ``n_id[:batch_size]``, with ``n_id``, ``e_id``,
    ``input_id`` and ``batch_size`` as PyG gives them) followed by one
    padding graph (its rows of ``n_id``/``e_id`` hold the node/edge pad
    values, 0 by default); with
    ``add_pad_masks``, ``nodes_mask`` / ``edges_mask`` / ``graphs_mask`` mark
    the real entries. The per-hop counts ``num_sampled_nodes`` /
    ``num_sampled_edges`` are kept while the subgraph is whole.

    Over-size subgraphs (``OverSizeStrategy.TrimNodesAndEdges`` by default)
    lose nodes far from the seeds first (whole last hops, then a random
    part of a hop; never a seed), then random edges; ``Error`` raises.

    Args:
        data: the graph (``Data`` or ``HeteroData``).
        num_neighbors: fanout per hop, or per edge type (a dict of lists).
        input_nodes: seed nodes (index or boolean mask; for ``HeteroData`` a
            node type or ``(node type, nodes)``); default all nodes.
        batch_size: seed nodes per batch.
        fixed_size_options: the sizes; default
            ``FixedSizeOptions.from_loader`` over up to 1000 sampled batches
            (the largest plus one node, edge and graph for padding).
        over_size_strategy: what to do with subgraphs that do not fit.
        add_pad_masks: add the masks.
        follow_batch, exclude_keys: as in the collater.
        options: only for the PopTorch-side subclass.
        **kwargs: ``torch.utils.data.DataLoader`` arguments (``shuffle``,
            ``num_workers``, ...).

    The other arguments are PyG's: ``replace``, ``directed`` (False is
    ``subgraph_type="induced"``), ``subgraph_type``, ``transform``,
    ``transform_sampler_output``, ``filter_per_worker``, ``is_sorted``;
    ``disjoint``, ``input_time``, ``time_attr`` and ``temporal_strategy``
    need a sampler that supports them (the default sampler raises
    ``NotImplementedError``).
    """

    def __init__(self,
                 data: Union[Data, HeteroData],
                 num_neighbors: Union[List[int], Dict[Any, List[int]]],
                 input_nodes: Any = None,
                 input_time: Optional[Tensor] = None,
                 replace: bool = False,
                 directed: bool = True,
                 disjoint: bool = False,
                 temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None,
                 transform: Optional[Callable] = None,
                 transform_sampler_output: Optional[Callable] = None,
                 is_sorted: bool = False,
                 filter_per_worker: bool = True,
                 subgraph_type: Union[SubgraphType, str] =
                 SubgraphType.directional,
                 batch_size: int = 1,
                 neighbor_sampler: Optional[BaseSampler] = None,
                 over_size_strategy: OverSizeStrategy =
                 OverSizeStrategy.TrimNodesAndEdges,
                 fixed_size_options: Optional[FixedSizeOptions] = None,
                 add_pad_masks: bool = False,
                 follow_batch: Optional[List[str]] = None,
                 exclude_keys: Optional[List[str]] = None,
                 options: Optional[poptorch.Options] = None,
                 **kwargs: Any) -> None:
        if options is not None and not isinstance(self, poptorch.DataLoader):
            raise ValueError(
                "options (poptorch.Options) are for FixedSizeNeighborLoader, "
                "the PopTorch-side loader; PyGFixedSizeNeighborLoader does "
                "not take them.")
        if neighbor_sampler is None:
            neighbor_sampler = TorchNeighborSampler(
                data, num_neighbors, subgraph_type=subgraph_type,
                replace=replace, disjoint=disjoint,
                temporal_strategy=temporal_strategy, time_attr=time_attr,
                is_sorted=is_sorted,
                share_memory=kwargs.get("num_workers", 0) > 0,
                directed=directed)
        kwargs["batch_size"] = batch_size
        self.neighbour_loader = NeighborLoader(
            data, num_neighbors, input_nodes=input_nodes,
            input_time=input_time, transform=transform,
            transform_sampler_output=transform_sampler_output,
            filter_per_worker=filter_per_worker,
            neighbor_sampler=neighbor_sampler, **_torch_loader_args(kwargs))
        self.input_type, input_nodes, _ = get_input_nodes(data, input_nodes)
        self.fixed_size_options = fixed_size_options or \
            FixedSizeOptions.from_loader(self.neighbour_loader)
        self._trim_nodes = trims(over_size_strategy)[0]
        self.fixed_size_collater = padding_collater(
            self.fixed_size_options, over_size_strategy, add_pad_masks,
            follow_batch, exclude_keys)
        parts = self._parts(range(input_nodes.size(0)), batch_size, options,
                            kwargs)
        super().__init__(**parts.base_arguments())

    def _parts(self, dataset: range, batch_size: int,
               options: Optional[poptorch.Options],
               kwargs: Dict[str, Any]) -> LoaderParts:
        """The base loader's parts; with ``options`` (the PopTorch-side
        loader) a step's seeds, ``batch_size`` by ``batch_size``, make its
        mini-batches."""
        collater: Callable[[Any], Any] = self.__collate__
        if options is not None:
            collater = CombinedBatchingCollater(mini_batch_size=batch_size,
                                                collater=collater)
            kwargs = dict(kwargs, options=options)
        return LoaderParts(dataset, kwargs.pop("batch_sampler", None),
                           collater, self.fixed_size_collater,
                           self.fixed_size_options, kwargs)

    @property
    def unpadded_loader(self) -> NeighborLoader:
        """The PyG ``NeighborLoader`` giving the sampled subgraphs before
        padding (what ``FixedSizeOptions.from_loader`` measures)."""
        return self.neighbour_loader

    def nativeCollate(self, index: Union[List[int], Tensor]
                      ) -> Union[Data, HeteroData]:
        """The subgraph sampled around the seeds at positions ``index`` of
        ``input_nodes``, unpadded."""
        return self.neighbour_loader(index)

    def fixedSizeCollate(self, data: Union[Data, HeteroData]
                         ) -> Union[Data, HeteroData]:
        """``data`` (a sampled subgraph) padded to the fixed sizes, as a
        ``Data`` (``HeteroData``) like PyG's ``NeighborLoader`` gives."""
        seed_values = _pop(_seed_store(data, self.input_type), _SEED_KEYS)
        if self._trim_nodes:
            data = self._keep_seeds(data, seed_values.get("batch_size", 0))
        per_hop = [_pop(store, _PER_HOP_KEYS) for store in data.stores]
        trimmed = self.fixed_size_collater.trimmed.graphs
        batch = self.fixed_size_collater([data])
        # A Batch's batch_size is its graph count: a plain Data keeps the
        # seed count where PyG code reads it.
        out = type(data).from_dict(batch.to_dict())
        _seed_store(out, self.input_type).update(seed_values)
        # Per-hop counts only describe an untrimmed subgraph.
        if self.fixed_size_collater.trimmed.graphs == trimmed:
            for store, values in zip(out.stores, per_hop):
                store.update(values)
        return out

    def _keep_seeds(self, data: Union[Data, HeteroData],
                    batch_size: int) -> Union[Data, HeteroData]:
        """Cuts node overflow away from the seeds (the collater's own
        trimming would drop random nodes, seeds included)."""
        opts = self.fixed_size_options
        if isinstance(data, HeteroData):
            if not opts.is_hetero():
                opts.to_hetero(data.node_types, data.edge_types)
            limits = {t: n - 1 for t, n in opts.num_nodes.items()}
            seeds = {self.input_type: batch_size}
        else:
            limits, seeds = {None: opts.num_nodes - 1}, {None: batch_size}
        return keep_nodes_near_seeds(data, seeds, limits)

    def _create_collater(self, **collater_args: Any) -> Any:
        """Pads with ``FixedSizeCollater(**collater_args)`` from now on;
        returns the collate function of seed positions (the loader's own
        is built with its parts)."""
        self.fixed_size_collater = FixedSizeCollater(**collater_args)
        return self.__collate__

    def __iter__(self) -> Iterator[Any]:
        # Batches that workers collate reach this process as copies: they
        # are registered as a fixed-size batch's here (padding-aware norms).
        return registered_batches(self, super().__iter__())

    def __collate__(self, index: Union[List[int], Tensor]
                    ) -> Union[Data, HeteroData]:
        return self.fixedSizeCollate(self.nativeCollate(index))


def _seed_store(data: Union[Data, HeteroData], input_type: Optional[str]
                ) -> Any:
    return data[input_type] if isinstance(data, HeteroData) else data


def _pop(store: Any, keys: Tuple[str, ...]) -> Dict[str, Any]:
    values = {key: store[key] for key in keys if key in store}
    for key in values:
        del store[key]
    return values


def _torch_loader_args(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The arguments ``torch.utils.data.DataLoader`` takes (not the
    PopTorch-only ones such as ``mode``)."""
    return {k: v for k, v in kwargs.items() if k in _TORCH_LOADER_PARAMS}


_TORCH_LOADER_PARAMS = frozenset(inspect.signature(
    torch.utils.data.DataLoader.__init__).parameters) - {"self"}


class FixedSizeNeighborLoader(PyGFixedSizeNeighborLoader,
                              poptorch.DataLoader):
    """:class:`PyGFixedSizeNeighborLoader` for PopTorch models: each
    iteration holds ``deviceIterations x replication x
    gradientAccumulation`` padded subgraphs of ``batch_size`` seeds each,
    concatenated. Differences from the torch-side loader: ``add_pad_masks``
    defaults to True, ``filter_per_worker`` is always True, ``options``
    defaults to ``poptorch.Options()`` and ``drop_last`` to True. Only tensor
    attributes survive the concatenation (``batch_size`` does not; it is
    the loader's ``batch_size``).

    Example::

        >>> from poptorch_geometric import FixedSizeOptions
        >>> from poptorch_geometric.datasets import power_law_graph
        >>> loader = FixedSizeNeighborLoader(
        ...     power_law_graph(1000, 8000), num_neighbors=[5, 3],
        ...     batch_size=16, options=poptorch.Options().deviceIterations(2),
        ...     fixed_size_options=FixedSizeOptions(300, 300))
        >>> batch = next(iter(loader))
        >>> batch.x.shape[0], batch.graphs_mask.tolist()
        (600, [True, False, True, False])
    """

    def __init__(self, data: Union[Data, HeteroData],
                 num_neighbors: Union[List[int], Dict[Any, List[int]]],
                 *args: Any, batch_size: int = 1, add_pad_masks: bool = True,
                 filter_per_worker: bool = True,
                 options: Optional[poptorch.Options] = None,
                 **kwargs: Any) -> None:
        del filter_per_worker  # always True, as upstream
        super().__init__(data, num_neighbors, *args, batch_size=batch_size,
                         add_pad_masks=add_pad_masks, filter_per_worker=True,
                         options=options or poptorch.Options(), **kwargs)

    __init__.__signature__ = inspect.signature(
        PyGFixedSizeNeighborLoader.__init__).replace(parameters=[
            p.replace(default=True) if p.name == "add_pad_masks" else p
            for p in inspect.signature(
                PyGFixedSizeNeighborLoader.__init__).parameters.values()])
