"""Batches of storage graphs built from a recipe of an earlier batch.

A fixed-size collation decides a dozen things per batch (which keys are
kept, each key's level, fill and concatenation dim, the labels' level,
where node and edge counts come from, how padding is shared) and then
gathers the tensors. For graphs read from one dataset storage
(``storage.GraphStorage``, tagged on the list by ``graph_cache``) the
decisions come out the same batch after batch; only the graphs' rows
change. A :class:`StorageRecipe` keeps the decisions of one full collation
and builds later batches from the rows alone: one gather index per group of
keys with equal slices, one gather per key from its padded storage copy,
the node offsets of index keys, the batch vector, the pointer and the
masks: a few dozen NumPy operations, and far fewer Python calls per batch
than the full path. In a training loop every piece of code runs with cold
caches after the compiled step, so fewer of them is what makes loading
cheaper there (``docs/design/collation.rst``).

Invariants (what keeps a batch built from a recipe bit-identical to the
full path's, so that using one is never visible):

* a recipe is recorded only from a batch the full path built from storage
  alone (every kept tensor key read from the storage, no 0-dim or
  ``num_nodes`` key, no graph-level index key, no trimming; non-tensor
  keys such as SMILES strings are listed from the graphs, as the full path
  lists them), and only after rebuilding that same batch from the recipe
  gave equal keys, dtypes, values and slice bookkeeping
  (:meth:`StorageRecipe.record`);
* a batch is built from a recipe only when what the full path decides per
  batch comes out as recorded: every level unambiguous and the same, the
  same level of the labels, the graphs within the budgets, a padding graph
  slot and a padding node left. Otherwise :meth:`StorageRecipe.collate`
  returns None and the caller collates in full, which trims or raises as
  it always does;
* a recipe holds for the storage object and the settings it was recorded
  with (:attr:`StorageRecipe.settings`, compared by the caller on every
  batch): other options, keys or masks make it stale.

Example::

    >>> import torch
    >>> from torch_geometric.datasets import FakeDataset
    >>> from poptorch_geometric import FixedSizeOptions
    >>> from poptorch_geometric.collate import FixedSizeCollater
    >>> from poptorch_geometric._fastpath.graph_cache import cached_graphs
    >>> torch.manual_seed(0) and None
    >>> ds = cached_graphs(FakeDataset(num_graphs=8, avg_num_nodes=6))
    >>> collater = FixedSizeCollater(FixedSizeOptions(60, 600, 5))
    >>> first = collater._tensors_and_counts(ds.__getitems__([0, 1, 2]))
    >>> collater._recipe is not None
    True
    >>> batch = collater._tensors_and_counts(ds.__getitems__([3, 4]))
    >>> full = FixedSizeCollater(FixedSizeOptions(60, 600, 5),
    ...                          fast_path=False)([ds[3], ds[4]])
    >>> all(torch.equal(batch[k], full[k]) for k in full.keys())
    True
"""
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch
from torch_geometric.data.storage import E_KEYS, N_KEYS

from .._padding.columns import cat_dim
from .._padding.plan import (AttrSpec, Level, graph_spec, split_evenly,
                             split_hosted)
from ..common import DataBatch as _DATA_BATCH
from .vectorised import listable_values, sizes_ptr as _ptr

#: Dtypes of index keys whose node offsets a recipe adds (PyG's sum with a
#: 0-dim int64 tensor keeps them).
_OFFSET_DTYPES = (torch.int32, torch.int64)


def prefix_mask(length: int, num_true: int) -> Tensor:
    """A bool tensor of ``length`` whose first ``num_true`` entries are
    True (built in NumPy: one tensor operation fewer per mask, three
    masks per batch)."""
    mask = np.zeros(length, dtype=np.bool_)
    mask[:max(num_true, 0)] = True
    return torch.from_numpy(mask)


@dataclasses.dataclass(frozen=True)
class _Key:
    """How one kept key is gathered: a tensor from the storage, or (level
    ``OTHER``) a non-tensor value of each graph, listed."""
    name: str
    level: Level
    #: The storage tensor with its fill entry appended (None for OTHER).
    padded: Optional[Tensor] = None
    offset: bool = False  # node offsets are added (an index key)
    dim: int = 0


def _level(sizes: np.ndarray, nodes: np.ndarray,
           edges: np.ndarray) -> Optional[Level]:
    """The level ``classify_tensor`` gives sizes ``sizes`` when the sizes
    tell it alone; None where it would be ambiguous."""
    node_ok = np.array_equal(sizes, nodes)
    edge_ok = np.array_equal(sizes, edges)
    if node_ok != edge_ok:
        counts = nodes if node_ok else edges
        if (counts != 1).any():
            return Level.NODE if node_ok else Level.EDGE
        return None
    return None if node_ok else Level.GRAPH


def _labels_level(sizes: np.ndarray, nodes: np.ndarray) -> Optional[Level]:
    """The labels' level ``_detect_labels_type`` sets for leading sizes
    ``sizes``; None where it would keep an earlier answer or raise."""
    per_node = np.array_equal(sizes, nodes)
    per_graph = bool((sizes == 1).all())
    if per_node == per_graph:
        return None
    return Level.NODE if per_node else Level.GRAPH


def _count_group(storage: Any, mapping: Dict[str, Any],
                 known: Sequence[str]) -> Optional[str]:
    """The storage group whose sizes the full path counts nodes (edges)
    with: the first well-known key's, when every well-known key of the
    graphs is served and in that group (``Columns._counts``)."""
    candidates = [k for k in mapping if k in known]
    if not candidates or not all(storage.serves(k, cat_dim(k))
                                 for k in candidates):
        return None
    groups = {storage.group(k) for k in candidates}
    return groups.pop() if len(groups) == 1 else None


class _Rows:
    """The per-batch values a recipe reads: sizes of each storage group at
    the batch's rows, and their gather indices (one per group and padding
    length)."""

    def __init__(self, storage: Any, rows: np.ndarray) -> None:
        self.storage, self.rows = storage, rows
        self._sizes: Dict[str, np.ndarray] = {}
        self._indices: Dict[Tuple[str, int], Tensor] = {}

    def sizes(self, key: str) -> np.ndarray:
        group = self.storage.group(key)
        sizes = self._sizes.get(group)
        if sizes is None:
            sizes = self._sizes[group] = self.storage.sizes(key, self.rows)
        return sizes

    def index(self, key: str, pad: int) -> Tensor:
        group = (self.storage.group(key), pad)
        index = self._indices.get(group)
        if index is None:
            index = self._indices[group] = self.storage.gather_index(
                key, self.rows, self.sizes(key), pad)
        return index


class StorageRecipe:
    """The decisions of one full collation of storage graphs, to build
    later batches of the same storage from their rows (see the module
    docstring). Made by :meth:`record`; :meth:`collate` builds a batch."""

    def __init__(self, storage: Any, settings: Tuple[Any, ...],
                 keys: List[_Key], groups: Tuple[str, str], opts: Any,
                 masks: bool, batch_vector: bool) -> None:
        self.storage = storage
        #: What the recipe holds for (compared by the caller).
        self.settings = settings
        self._keys = keys
        # The level of each group of keys with equal slices is checked
        # once per batch (the labels' separately: another rule decides it).
        checks = {(storage.group(k.name), k.name == "y"): k for k in keys
                  if k.level is not Level.OTHER}
        self._checks = [(k.name, labels, k.level)
                        for (_, labels), k in checks.items()]
        self._node_group, self._edge_group = groups
        self._num_graphs = opts.num_graphs
        self._num_nodes, self._num_edges = opts.num_nodes, opts.num_edges
        self._masks = masks
        self._batch_vector = batch_vector
        #: Read per batch for the padding of non-tensor keys.
        self._opts = opts

    @classmethod
    def record(cls, graphs: Any, specs: List[AttrSpec], opts: Any,
               masks: bool, settings: Tuple[Any, ...],
               batch: Batch) -> Optional["StorageRecipe"]:
        """The recipe of ``batch``, which the full path collated from
        ``graphs`` (a list tagged with its storage and rows) with padding
        ``specs``, and masks when ``masks``; None when the batch did not
        come from storage alone or the recipe does not rebuild it
        exactly."""
        storage = getattr(graphs, "storage", None)
        if storage is None or not graphs or isinstance(opts.num_nodes, dict):
            return None
        mapping = graphs[0]._store._mapping
        groups = (_count_group(storage, mapping, N_KEYS),
                  _count_group(storage, mapping, E_KEYS))
        if None in groups or "num_nodes" in mapping or \
                "num_edges" in mapping:
            return None
        # The specs follow the first graph's key order, as the batch does.
        keys = [_recipe_key(storage, spec) for spec in specs]
        if None in keys:
            return None
        recipe = cls(storage, settings, keys, groups, opts, masks,
                     graphs[0]._store.can_infer_num_nodes)
        built = recipe.collate(graphs, _slices(batch) is not None)
        return recipe if _same(built, batch) else None

    def collate(self, graphs: Any,
                bookkeeping: bool = True) -> Optional[Batch]:
        """The batch the full path would collate from ``graphs`` (of this
        recipe's storage), or None when the full path would decide
        differently for it (see the module docstring). Without
        ``bookkeeping``, no ``_slice_dict`` and ``_inc_dict``, as
        ``fast_collate``."""
        sized = self._sized(graphs)
        if sized is None:
            return None
        out = type.__call__(_DATA_BATCH)
        # The mapping of a fresh store, written directly: PyG's setters
        # only end there for tensor values (as in ``types._data_batch``),
        # after bookkeeping that costs more than the rest of the batch's.
        mapping = out._store._mapping
        slices: Dict[str, Any] = {}
        incs: Dict[str, Any] = {}
        for key in self._keys:
            if key.level is Level.OTHER:
                found = _listed(key.name, graphs, self._num_graphs,
                                self._opts)
                if found is None:
                    return None
            else:
                found = _tensor_entry(key, sized, bookkeeping)
            mapping[key.name], slices[key.name], incs[key.name] = found
        if self._batch_vector:
            mapping["batch"] = torch.from_numpy(np.repeat(
                np.arange(self._num_graphs, dtype=np.int64), sized.counts))
            mapping["ptr"] = torch.from_numpy(sized.ptr)
        out._num_graphs = self._num_graphs
        if bookkeeping:
            out._slice_dict, out._inc_dict = slices, incs
        if self._masks:
            mapping["graphs_mask"] = prefix_mask(self._num_graphs,
                                                 sized.num_real)
            mapping["nodes_mask"] = prefix_mask(self._num_nodes,
                                                sized.real_nodes)
            mapping["edges_mask"] = prefix_mask(self._num_edges,
                                                sized.real_edges)
        return out

    def _sized(self, graphs: Any) -> Optional["_Sized"]:
        """The sizes of a batch of ``graphs`` and of its padding, or None
        when the full path would decide otherwise than recorded."""
        rows = _Rows(self.storage, graphs.positions)
        nodes = rows.sizes(self._node_group)
        edges = rows.sizes(self._edge_group)
        num_real = len(nodes)
        num_pad = self._num_graphs - num_real
        real_nodes, real_edges = int(nodes.sum()), int(edges.sum())
        node_pad = self._num_nodes - real_nodes
        edge_pad = self._num_edges - real_edges
        # Without a padding graph slot, or a padding node for padding
        # edges, the full path raises or trims.
        if num_real == 0 or num_pad <= 0 or node_pad <= 0 or edge_pad < 0:
            return None
        for name, labels, level in self._checks:
            sizes = rows.sizes(name)
            found = _labels_level(sizes, nodes) if labels else \
                _level(sizes, nodes, edges)
            if found is not level:
                return None
        counts = np.concatenate([nodes, split_evenly(node_pad, num_pad)])
        ptr = np.zeros(self._num_graphs + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        return _Sized(rows, counts, np.concatenate(
            [edges, split_hosted(edge_pad, num_pad, min(num_pad, node_pad))]),
            ptr, num_real, real_nodes, real_edges)


@dataclasses.dataclass
class _Sized:
    """The sizes of one batch: ``counts`` and ``edge_counts`` of every
    graph (real, then padding), the node pointer, and the real totals."""
    rows: _Rows
    counts: np.ndarray
    edge_counts: np.ndarray
    ptr: np.ndarray
    num_real: int
    real_nodes: int
    real_edges: int


def _tensor_entry(key: _Key, sized: _Sized, bookkeeping: bool
                  ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Tensor key ``key`` of the batch, with its slices and increments
    when ``bookkeeping`` (as ``fast_collate`` builds them)."""
    value, sizes = _gather(key, sized)
    if not bookkeeping:
        return value, None, None
    incs = torch.from_numpy(sized.ptr[:-1].copy()) if key.offset \
        else torch.zeros(len(sizes), dtype=torch.long)
    return value, _ptr(sizes), incs


def _listed(name: str, graphs: Any, num_graphs: int,
            opts: Any) -> Optional[Tuple[List[Any], Tensor, None]]:
    """Non-tensor key ``name`` of the batch (strings, say), its slices and
    increments, as ``fast_collate`` lists them: the graphs' values, then
    the padding graphs' (``pad_graph_defaults``, or the first graph's);
    None where the full path would not list them. (A storage hands out
    numbers as tensors: a number here is a graph's own, left to the full
    path.)"""
    column = [graph._store._mapping[name] for graph in graphs]
    if not listable_values(column) or isinstance(column[0], (int, float)):
        return None
    # The padding value is the full path's: ``graph_spec``'s fill.
    fill = graph_spec(opts, name, column[0], None, use_defaults=True).fill
    values = column + [fill] * (num_graphs - len(column))
    return values, torch.arange(len(values) + 1), None


def _gather(key: _Key, sized: _Sized) -> Tuple[Tensor, np.ndarray]:
    """Key ``key`` of the batch (the real graphs' values, then padding,
    with node offsets added to index keys, as ``fast_collate`` does) and
    its size in every graph."""
    rows = sized.rows
    sizes = rows.sizes(key.name)
    if key.level is Level.NODE:
        all_sizes = sized.counts
    elif key.level is Level.EDGE:
        all_sizes = sized.edge_counts
    else:  # one copy of the first graph's shape per padding graph
        num_pad = len(sized.counts) - len(sizes)
        all_sizes = np.concatenate([sizes, np.full(num_pad, sizes[0])])
    pad = int(all_sizes[len(sizes):].sum())
    value = rows.storage.gather_padded(key.name, key.padded,
                                       rows.index(key.name, pad))
    # PyG adds the offsets only when the last one is non-zero.
    ptr = sized.ptr
    if key.offset and ptr[-2] != 0:
        shape = [1] * value.dim()
        shape[key.dim] = -1
        array = value.numpy()
        array += np.repeat(ptr[:-1], all_sizes).reshape(shape).astype(
            array.dtype, copy=False)
    return value, all_sizes


def _recipe_key(storage: Any, spec: AttrSpec) -> Optional[_Key]:
    """How ``spec``'s key is gathered from ``storage``; None when the full
    path does more than a gather and offsets for it."""
    if spec.level is Level.OTHER:
        return _Key(spec.key, Level.OTHER)
    if spec.cat_dim is None or not storage.serves(spec.key, spec.cat_dim):
        return None
    padded = storage.padded(spec.key, spec.fill)
    if padded is None or (spec.incremented and (
            spec.level is Level.GRAPH or
            padded.dtype not in _OFFSET_DTYPES)):
        return None
    return _Key(spec.key, spec.level, padded, spec.incremented,
                storage.cat_dim(spec.key))


def _same(built: Optional[Batch], batch: Batch) -> bool:
    """True when ``built`` has ``batch``'s keys, in order, with equal
    values, its graph count, and its slice bookkeeping (where ``batch`` has
    any)."""
    if built is None or built.num_graphs != batch.num_graphs:
        return False
    pairs = [(built._store._mapping, batch._store._mapping)]
    if _slices(batch) is not None:
        if _slices(built) is None:
            return False
        pairs += [(built._slice_dict, batch._slice_dict),
                  (built._inc_dict, batch._inc_dict)]
    return all(_same_values(a, b) for a, b in pairs)


def _slices(batch: Batch) -> Optional[Dict[str, Any]]:
    """``batch``'s ``_slice_dict`` (None without bookkeeping)."""
    return getattr(batch, "_slice_dict", None)


def _same_values(built: Dict[str, Any], expected: Dict[str, Any]) -> bool:
    """Equal keys in the same order; tensors equal with equal dtypes, other
    values equal and of the same type."""
    if list(built) != list(expected):
        return False
    for key, value in expected.items():
        other = built[key]
        if isinstance(value, Tensor):
            if not (isinstance(other, Tensor) and value.dtype == other.dtype
                    and torch.equal(value, other)):
                return False
        elif type(other) is not type(value) or other != value:
            return False
    return True
