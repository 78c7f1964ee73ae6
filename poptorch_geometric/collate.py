"""Fixed-size collation: real graphs padded to a fixed number of graphs,
nodes and edges, so every batch has the same shapes.

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> from poptorch_geometric import FixedSizeOptions
    >>> graphs = [Data(x=torch.ones(n, 4), edge_index=torch.zeros(2, 2).long(),
    ...                y=torch.ones(1)) for n in (3, 2)]
    >>> collater = FixedSizeCollater(FixedSizeOptions(9, 11, 5),
    ...                              add_masks_to_batch=True)
    >>> batch = collater(graphs)
    >>> batch.x.shape, batch.edge_index.shape, batch.y.shape
    (torch.Size([9, 4]), torch.Size([2, 11]), torch.Size([5]))
    >>> batch.graphs_mask.tolist()
    [True, True, False, False, False]
"""
import enum
import os
from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple

import numpy as np
import torch
from torch_geometric.data import Batch, HeteroData
from torch_geometric.data.data import BaseData

from poptorch_core import logger

from ._padding.budget import BatchRoom
from ._padding_masks import is_padded_batch, register_padded
from ._padding.columns import Columns
from ._padding.classify import homogeneous_specs, hetero_specs
from ._fastpath.vectorised import fast_collate
from ._fastpath.recipe import StorageRecipe, prefix_mask
from ._padding.plan import (Level, keep_padding_indices_in_range,
                            make_padding_graphs)
from ._padding.trim import TrimCounts, prune
from ._padding.validate import (check_edge_index, check_graphs_join,
                                check_hetero_edge_index,
                                check_same_attributes)
from ._refusals import public
from .fixed_size_options import FixedSizeOptions
from .pyg_collate import Collater
from .types import PyGArgsParser

__all__ = ["make_exclude_keys", "FixedSizeCollater",
           "CombinedBatchingCollater"]


def make_exclude_keys(include_keys: List[str] | Tuple[str, ...],
                      data: BaseData) -> Tuple[str, ...]:
    """The keys of ``data`` not in ``include_keys`` (in no fixed order), to
    pass as ``exclude_keys``.

    Example::

        >>> import torch
        >>> from torch_geometric.data import Data
        >>> make_exclude_keys(["x"], Data(x=torch.ones(1), y=torch.ones(1)))
        ('y',)
    """
    return tuple(set(data.keys()) - set(include_keys))


class FixedSizeCollater(Collater):
    """Collates a list of graphs into one batch padded to the sizes of
    ``fixed_size_options``.

    Padding graphs come after the real graphs and take the remaining graph
    slots; padding nodes and edges are shared evenly among them (larger
    shares first) and padding edges are self-loops on their padding graph's
    first node. Node and edge features of padding are ``node_pad_value`` /
    ``edge_pad_value``, graph-level tensors ``graph_pad_value``; non-tensor
    graph attributes take ``pad_graph_defaults[key]`` or the first graph's
    value.

    Deviations from upstream PopTorch Geometric, on purpose:

    * when the real graphs fill the node and edge budgets exactly, padding
      graphs without nodes or edges are still added, so graph-level tensors
      (``y``, ``ptr``, ``graphs_mask``, ...) always have ``num_graphs``
      entries and every shape stays fixed;
    * padding edges only go to padding graphs that have a node; when the
      real graphs fill every node slot but edges need padding this raises
      instead of emitting indices past the last node; with trimming on
      (nodes or edges) one real node is trimmed to make room for them
      when every graph can keep a node;
    * attribute levels are decided over the whole batch, and hetero masks
      are exact per store;
    * trimmed graphs, nodes and edges are counted in :attr:`trimmed` and
      logged.

    Batches are built by a vectorised fast path that gives bit-identical
    results to the reference path (``Batch.from_data_list`` over the real
    and padding graphs); ``HeteroData`` and unusual attributes take the
    reference path. Graphs read from one dataset storage (the loaders'
    ``cached_graphs``) are built from the recipe of an earlier batch
    (``_fastpath.recipe``) where the full path would decide the same.
    ``fast_path=False`` forces the reference path.

    Args:
        fixed_size_options: the sizes to pad to.
        add_masks_to_batch: add ``graphs_mask``, ``nodes_mask`` and
            ``edges_mask`` (bool, True for real entries).
        trim_nodes: randomly remove nodes of over-size batches instead of
            raising.
        trim_edges: randomly remove edges of over-size batches instead of
            raising.
        follow_batch: keys that get a ``<key>_batch`` assignment vector.
        exclude_keys: keys left out of the batch.
    """

    class LabelsType(enum.Enum):
        """Whether the labels ``y`` are per graph or per node."""
        GRAPH_LVL = 0
        NODE_LVL = 1

    def __init__(self,
                 fixed_size_options: FixedSizeOptions,
                 add_masks_to_batch: bool = False,
                 trim_nodes: bool = False,
                 trim_edges: bool = False,
                 follow_batch: Optional[List[str]] = None,
                 exclude_keys: Optional[List[str]] = None,
                 *,
                 fast_path: bool = True) -> None:
        super().__init__(follow_batch=follow_batch, exclude_keys=exclude_keys)
        _check_budgets_fit_memory(fixed_size_options)
        self.opts = fixed_size_options
        self.add_masks_to_batch = add_masks_to_batch
        self.trim_nodes = trim_nodes
        self.trim_edges = trim_edges
        self.fast_path = fast_path
        self.labels_type: Optional[FixedSizeCollater.LabelsType] = None
        #: Graphs, nodes and edges removed by trimming so far.
        self.trimmed = TrimCounts()
        # Attribute levels of earlier batches, for batches that cannot tell.
        self._levels: Dict[str, Level] = {}
        self._warned_trim = False
        # Decisions of an earlier batch of storage graphs, to build later
        # ones from their rows (``_fastpath.recipe``).
        self._recipe: Optional[StorageRecipe] = None

    @public
    def __call__(self, data_list: List[BaseData]) -> Batch:
        return register_padded(self._collate(data_list))

    def _tensors_and_counts(self, data_list: List[BaseData]) -> Batch:
        """:meth:`__call__` for callers that keep only the batch's tensors
        and counts (:class:`CombinedBatchingCollater`): the batch may lack
        the slice bookkeeping that ``get_example`` and ``to_data_list``
        read, which is a tenth of a fast collation's time."""
        return register_padded(self._collate(data_list, bookkeeping=False))

    def _collate(self, data_list: List[BaseData],
                 bookkeeping: bool = True) -> Batch:
        batch = self._from_recipe(data_list, bookkeeping)
        if batch is not None:
            return batch
        hetero = self._check_input(data_list)
        columns = None if hetero else Columns.of(data_list)
        room = BatchRoom.measure(data_list, self.opts, columns)
        self._check_graphs(data_list, columns, room, hetero)
        if not hetero:
            self._detect_labels_type(data_list, columns,
                                     room.nodes[None].counts)
        num_graphs = len(data_list)
        num_pad_graphs = self.opts.num_graphs - num_graphs
        if num_pad_graphs < 0:
            raise RuntimeError(
                f"The fixed size of {self.opts.num_graphs} graph(s) cannot "
                f"hold the {num_graphs} graph(s) received: a batch holds at "
                "most num_graphs - 1 real graphs plus one padding graph. "
                "Increase num_graphs in FixedSizeOptions or pass fewer "
                "graphs.")
        trimmed_list, columns, room = self._trim_to_fit(
            data_list, columns, room, num_pad_graphs, hetero)
        room.check_fits(num_graphs, self.opts.num_graphs,
                        (self.trim_nodes, self.trim_edges))

        plan = room.plan(self._specs(trimmed_list, columns, room, hetero),
                         num_pad_graphs, hetero, self._trims)
        batch = None
        if self.fast_path and not hetero:
            batch = fast_collate(trimmed_list, columns, plan,
                                 room.nodes[None].counts, self.follow_batch,
                                 self.exclude_keys, bookkeeping)
        # Only a fast batch of untrimmed graphs makes a recipe (which
        # needs graphs read from a storage: StorageRecipe.record).
        recordable = batch is not None and trimmed_list is data_list
        if batch is None:
            if not hetero and not _checked_at_source(columns):
                check_edge_index(trimmed_list, room.nodes[None].counts)
            batch = _from_data_list(trimmed_list, make_padding_graphs(plan),
                                    self.follow_batch, self.exclude_keys)
        keep_padding_indices_in_range(batch, plan, self.opts.num_nodes)
        if self.add_masks_to_batch:
            self._add_masks(batch, room, num_graphs, hetero)
        # A fresh recipe that declined this batch stays: the next may fit.
        if recordable and not self.follow_batch and \
                self._fresh_recipe(data_list) is None:
            self._recipe = StorageRecipe.record(
                data_list, plan.specs[None], self.opts,
                self.add_masks_to_batch, self._recipe_settings(), batch)
        return batch

    def _trim_to_fit(self, data_list: List[BaseData],
                     columns: Optional[Columns], room: BatchRoom,
                     num_pad_graphs: int, hetero: bool
                     ) -> Tuple[List[BaseData], Optional[Columns],
                                BatchRoom]:
        """``data_list`` with nodes and edges trimmed where the collater
        trims and the graphs overflow (a new list then), its columns and
        its room."""
        for kind, trim in (("nodes", self.trim_nodes),
                           ("edges", self.trim_edges)):
            # Real nodes that fill their budget exactly leave padding edges
            # no node to sit on: any trimming then makes room for one (one
            # real node goes, counted and logged as every trim).
            makes_room = kind == "nodes" and num_pad_graphs > 0 and \
                self._trims and room.lacks_padding_node()
            if (trim and room.overflows(kind)) or makes_room:
                data_list = self._trim(data_list, room, kind, num_pad_graphs)
                columns = None if hetero else Columns.of(data_list)
                room = self._count_trimmed(room, BatchRoom.measure(
                    data_list, self.opts, columns))
        return data_list, columns, room

    @property
    def _trims(self) -> bool:
        """Whether the collater trims at all (nodes or edges)."""
        return self.trim_nodes or self.trim_edges

    def _recipe_settings(self) -> Tuple[Any, ...]:
        """What a recipe of this collater holds for: the options' sizes and
        fills and the collater's own settings, as now."""
        opts = self.opts
        return (opts.num_graphs, opts.num_nodes, opts.num_edges,
                opts.node_pad_value, opts.edge_pad_value,
                opts.graph_pad_value, self.add_masks_to_batch,
                self.trim_nodes, self.trim_edges, self.fast_path,
                tuple(self.follow_batch or ()),
                tuple(self.exclude_keys or ()))

    def _fresh_recipe(self, data_list: List[BaseData]
                      ) -> Optional[StorageRecipe]:
        """The recipe of an earlier batch of ``data_list``'s storage, if
        it holds for the collater's settings now."""
        recipe = self._recipe
        if recipe is None or \
                getattr(data_list, "storage", None) is not recipe.storage \
                or recipe.settings != self._recipe_settings():
            return None
        return recipe

    def _from_recipe(self, data_list: List[BaseData],
                     bookkeeping: bool) -> Optional[Batch]:
        """The batch of ``data_list`` built from the recipe of an earlier
        batch of the same storage (``_fastpath.recipe``), or None."""
        recipe = self._fresh_recipe(data_list)
        return None if recipe is None else \
            recipe.collate(data_list, bookkeeping)

    @public
    def padding_batch(self, template: BaseData) -> Batch:
        """A batch of padding graphs only, with the shapes, keys and dtypes
        of the batches of real graphs that look like ``template`` (one real
        graph) and every mask False. It fills the missing mini-batches of a
        final combined batch, so that no real graph is dropped or repeated.

        Example::

            >>> import torch
            >>> from torch_geometric.data import Data
            >>> from poptorch_geometric import FixedSizeOptions
            >>> graph = Data(x=torch.ones(3, 4), y=torch.ones(1),
            ...              edge_index=torch.tensor([[0, 1], [1, 2]]))
            >>> collater = FixedSizeCollater(FixedSizeOptions(9, 11, 5),
            ...                              add_masks_to_batch=True)
            >>> pad = collater.padding_batch(graph)
            >>> real = collater([graph])
            >>> {k: v.shape for k, v in pad.items()} == {
            ...     k: v.shape for k, v in real.items()}
            True
            >>> bool(pad.graphs_mask.any() or pad.nodes_mask.any())
            False
        """
        hetero = self._check_input([template])
        columns = None if hetero else Columns.of([template])
        real = BatchRoom.measure([template], self.opts, columns)
        specs = self._specs([template], columns, real, hetero)
        empty = real.without_graphs()
        plan = empty.plan(specs, self.opts.num_graphs, hetero)
        # Padding graphs carry num_nodes; real ones (first in a normal
        # batch, which decides the keys) usually do not.
        exclude = list(self.exclude_keys or [])
        if not hetero and "num_nodes" not in template.keys():
            exclude.append("num_nodes")
        batch = Batch.from_data_list(make_padding_graphs(plan),
                                     follow_batch=self.follow_batch,
                                     exclude_keys=exclude)
        keep_padding_indices_in_range(batch, plan, self.opts.num_nodes)
        if self.add_masks_to_batch:
            self._add_masks(batch, empty, 0, hetero)
        return register_padded(batch)

    def _check_input(self, data_list: List[BaseData]) -> bool:
        """Validates the list; returns whether it holds ``HeteroData`` (and
        then gives the options a size per type)."""
        if not isinstance(data_list, list):
            raise TypeError(
                f"Expected list, got {type(data_list).__name__}.")
        if not data_list:
            raise ValueError(
                "FixedSizeCollater got an empty list: a batch "
                "needs at least one real graph.")
        first = data_list[0]
        hetero = isinstance(first, HeteroData)
        if hetero and not self.opts.is_hetero():
            self.opts.to_hetero(first.node_types, first.edge_types)
        types = set(map(type, data_list))
        if len(types) != 1:
            raise AssertionError(
                "All graphs of a batch must have the same type, got "
                f"{sorted(t.__name__ for t in types)}.")
        return hetero

    def _check_graphs(self, data_list: List[BaseData],
                      columns: Optional[Columns], room: BatchRoom,
                      hetero: bool) -> None:
        """Raises for graphs whose attributes differ and, for hetero
        graphs, edges outside their graph (``_padding/validate``); the two
        homogeneous paths check edges where they concatenate them, and
        graphs read from a dataset's storage were checked once, with the
        storage."""
        if hetero:
            check_hetero_edge_index(data_list)
        elif not _checked_at_source(columns):
            check_same_attributes(
                columns.mappings if columns is not None else
                [d._store._mapping for d in data_list],
                self.exclude_keys or ())

    def _specs(self, data_list: List[BaseData], columns: Optional[Columns],
               room: BatchRoom, hetero: bool) -> Dict[Hashable, list]:
        if hetero:
            return hetero_specs(
                data_list, {t: r.counts for t, r in room.nodes.items()},
                {t: r.counts for t, r in room.edges.items()}, self.opts,
                self.exclude_keys)
        return {None: homogeneous_specs(
            data_list, columns, room.nodes[None].counts,
            room.edges[None].counts, self.opts, self.exclude_keys,
            self._y_level(), self._levels)}

    def _y_level(self) -> Optional[Level]:
        if self.labels_type is None:
            return None
        return Level.NODE if self.labels_type is self.LabelsType.NODE_LVL \
            else Level.GRAPH

    def _detect_labels_type(self, data_list: List[BaseData],
                            columns: Optional[Columns],
                            node_counts: List[int]) -> None:
        """Decides whether ``y`` is per graph or per node; a batch that
        cannot tell (every graph has one node) keeps the earlier answer."""
        if "y" not in data_list[0] or "y" in (self.exclude_keys or ()):
            return
        if columns is not None:
            rows = columns.leading_sizes("y")
        else:
            ys = [d.y for d in data_list]
            rows = None if any(y.dim() == 0 for y in ys) \
                else [y.shape[0] for y in ys]
        if rows is None:  # a 0-dim label is one per graph
            self.labels_type = self.LabelsType.GRAPH_LVL
            return
        per_node = rows == node_counts
        per_graph = all(r == 1 for r in rows)
        if per_node != per_graph:
            self.labels_type = self.LabelsType.NODE_LVL if per_node \
                else self.LabelsType.GRAPH_LVL
            return
        if not (per_node and self.labels_type is not None):
            raise AssertionError(
                "Incorrect input data: the labels y must be graph-level "
                "(y.shape[0] == 1 for every graph) or node-level (y.shape[0] == "
                "num_nodes for every graph); got rows "
                f"{rows[:8]} for graphs of {node_counts[:8]} nodes.")

    def _trim(self, data_list: List[BaseData], room: BatchRoom, kind: str,
              num_pad_graphs: int) -> List[BaseData]:
        rooms = room.nodes if kind == "nodes" else room.edges
        limits = {}
        for t, r in rooms.items():
            limits[t] = r.limit
            # Leave a padding node so padding edges have a home.
            if kind == "nodes" and num_pad_graphs > 0 and \
                    r.limit - 1 >= len(data_list):
                limits[t] = r.limit - 1
        trimmed = self._prune(kind, data_list, limits)
        self.trimmed.add(sum(a is not b for a, b in zip(data_list, trimmed)))
        return trimmed

    def _count_trimmed(self, before: BatchRoom,
                       after: BatchRoom) -> BatchRoom:
        """Counts and logs what trimming removed (node trimming removes
        edges too); returns ``after``."""
        removed = {k: sum(r.real for r in getattr(before, k).values()) -
                   sum(r.real for r in getattr(after, k).values())
                   for k in ("nodes", "edges")}
        self.trimmed.add(0, **removed)
        if not any(removed.values()):
            return after  # trimming could not free a padding node
        # Warn once per collater: loaders that trim by default would flood
        # the log; the running totals stay in ``self.trimmed``.
        log = logger.debug if self._warned_trim else logger.warning
        self._warned_trim = True
        log("FixedSizeCollater trimmed %d node(s) and %d edge(s) to fit the "
            "fixed size (further trims are logged at debug level; "
            "FixedSizeCollater.trimmed keeps the totals).", removed["nodes"],
            removed["edges"])
        return after

    def _prune(self, kind: str, data_list: List[BaseData],
               limits: Optional[Dict[Hashable, int]]) -> List[BaseData]:
        room = BatchRoom.measure(data_list, self.opts)
        rooms = room.nodes if kind == "nodes" else room.edges
        if limits is None:
            limits = {t: r.limit for t, r in rooms.items()}
        return prune(data_list, kind, {t: r.counts for t, r in rooms.items()},
                     limits)

    def _prune_nodes(self, data_list: List[BaseData],
                     limits: Optional[Dict[Hashable, int]] = None
                     ) -> List[BaseData]:
        """Randomly removes nodes (and their edges) until the node budget
        (``limits`` by type, default: the options' sizes) holds, keeping at
        least one node per graph."""
        return self._prune("nodes", data_list, limits)

    def _prune_edges(self, data_list: List[BaseData],
                     limits: Optional[Dict[Hashable, int]] = None
                     ) -> List[BaseData]:
        """Randomly removes edges until the edge budget (``limits`` by type,
        default: the options' sizes) holds; nodes are kept."""
        return self._prune("edges", data_list, limits)

    def _add_masks(self, batch: Batch, room: BatchRoom, num_real_graphs: int,
                   hetero: bool) -> None:
        batch.graphs_mask = prefix_mask(self.opts.num_graphs,
                                        num_real_graphs)
        if not hetero:
            batch.nodes_mask = prefix_mask(room.nodes[None].limit,
                                           room.nodes[None].real)
            batch.edges_mask = prefix_mask(room.edges[None].limit,
                                           room.edges[None].real)
            return
        for t, r in room.nodes.items():
            batch[t].nodes_mask = prefix_mask(r.limit, r.real)
        for t, r in room.edges.items():
            batch[t].edges_mask = prefix_mask(r.limit, r.real)


def _checked_at_source(columns: Optional[Columns]) -> bool:
    """Whether the graphs behind ``columns`` need no per-batch check of
    their edges and attributes (see ``Columns.checked_at_source``)."""
    return columns is not None and columns.checked_at_source


def _from_data_list(graphs: List[BaseData], padding: List[BaseData],
                    follow_batch: Optional[List[str]],
                    exclude_keys: Optional[List[str]]) -> Batch:
    """``Batch.from_data_list`` of the real graphs and their padding, with
    PyG's failure to join the graphs' tensors said in terms of graphs."""
    try:
        return Batch.from_data_list(graphs + padding,
                                    follow_batch=follow_batch,
                                    exclude_keys=exclude_keys)
    except RuntimeError:
        # torch.cat names neither the attribute nor the graphs.
        check_graphs_join(graphs, exclude_keys or ())
        raise


def _physical_memory() -> Optional[int]:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_budgets_fit_memory(opts: FixedSizeOptions) -> None:
    """Raises when one batch's ``edge_index`` alone (two int64 per edge
    slot) would not fit this machine's memory: a budget that large is a
    mistake (typically the fully connected default of a large node
    budget), better said now than as a failed allocation later."""
    memory = _physical_memory()
    edges = opts.total_num_edges
    if memory is None or 16 * edges <= memory:
        return
    raise ValueError(
        f"The edge budget of {edges} edge slots per batch needs "
        f"{16 * edges / 2**30:,.0f} GiB for edge_index alone, more than this "
        f"machine's {memory / 2**30:,.0f} GiB (without num_edges, "
        "FixedSizeOptions assumes fully connected graphs: num_nodes x "
        "(num_nodes - 1) edges). Set num_edges, or derive the sizes from the "
        "data with FixedSizeOptions.from_dataset, for_packing or "
        "for_batch_size.")


class CombinedBatchingCollater:
    """Collates ``k`` mini-batches at once and concatenates them tensor by
    tensor along dim 0, the layout PopTorch splits across device
    iterations, replicas and gradient accumulation.

    ``edge_index`` tensors become ``[2k, E]`` (stacked, indices local to
    each mini-batch); ``batch`` and ``ptr`` restart at 0 in each mini-batch;
    ``num_nodes``, ``num_edges`` and ``num_graphs`` report one mini-batch;
    non-tensor attributes of ``Data`` are dropped.

    Args:
        collater: collates one mini-batch (a list of samples).
        mini_batch_size: samples per mini-batch; default: the whole list.
        num_mini_batches: mini-batches per combined batch. When given, a
            shorter list (the last of an epoch) is not an error: its last
            mini-batch holds fewer samples, and padding-only mini-batches
            (:meth:`FixedSizeCollater.padding_batch`) make up the count.

    Example::

        >>> import torch
        >>> from torch_geometric.data import Data
        >>> from poptorch_geometric.pyg_collate import Collater
        >>> graphs = [Data(x=torch.ones(2, 1),
        ...                edge_index=torch.tensor([[0, 1], [1, 0]]))] * 4
        >>> out = CombinedBatchingCollater(Collater(), mini_batch_size=2)(graphs)
        >>> out.x.shape, out.edge_index.shape
        (torch.Size([8, 1]), torch.Size([4, 4]))
    """

    def __init__(self, collater: Callable[[List[Any]], Batch],
                 mini_batch_size: Optional[int] = None,
                 num_mini_batches: Optional[int] = None) -> None:
        self.collater = collater
        self.mini_batch_size = mini_batch_size
        self.num_mini_batches = num_mini_batches
        self.parser = PyGArgsParser()

    @public
    def __call__(self, batch_list: List[Any]) -> Batch:
        size = self.mini_batch_size or len(batch_list)
        if self.num_mini_batches is None:
            if len(batch_list) % size != 0:
                raise AssertionError(
                    f"Invalid batch size: {len(batch_list)} samples do not split "
                    f"into mini-batches of {size}.")
        # Only the mini-batches' tensors and counts are kept (see
        # ``concat``): a collater that can skip the rest does.
        collate = getattr(self.collater, "_tensors_and_counts",
                          self.collater)
        batches = [collate(batch_list[i:i + size])
                   for i in range(0, len(batch_list), size)]
        missing = (self.num_mini_batches or 0) - len(batches)
        if missing > 0:
            batches += self.padding_batches(batch_list[0], missing)
        return self.concat(batches)

    def padding_batches(self, template: Any, count: int) -> List[Batch]:
        """``count`` mini-batches of padding graphs only, shaped like those
        of ``template``'s kind (the collater must be a
        :class:`FixedSizeCollater`)."""
        make = getattr(self.collater, "padding_batch", None)
        if make is None:
            raise ValueError(
                f"{type(self.collater).__name__} cannot make padding-only "
                "mini-batches: only a FixedSizeCollater pads an incomplete "
                "combined batch.")
        return [make(template)] * count

    def concat(self, batches: List[Batch]) -> Batch:
        """Concatenates collated mini-batches tensor by tensor along dim 0,
        keeping the first one's structure."""
        columns = zip(*(self.parser.yieldTensors(b) for b in batches))
        # One mini-batch (deviceIterations x replicas x accumulation = 1) is
        # its own concatenation: no copy.
        tensors = [column[0] if len(column) == 1 else
                   torch.cat(column, dim=0) for column in columns]
        combined = self.parser.reconstruct(batches[0], iter(tensors))
        return register_padded(combined) if is_padded_batch(batches[0]) \
            else combined
