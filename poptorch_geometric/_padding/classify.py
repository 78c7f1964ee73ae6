"""Which attributes are node-, edge- or graph-level, decided over a batch.

PyG decides per graph (``store.is_node_attr``), which is ambiguous for small
graphs: a graph-level ``y`` of shape ``[1, 1]`` looks node-level on a
one-node graph. Padding needs one answer per batch, so an attribute is
node-level when its size matches the node count of *every* graph, edge-level
when it matches every edge count, and graph-level when it matches neither.
Only when the sizes cannot tell (every graph has one node, or node and edge
counts coincide) does the collater fall back to an earlier batch's answer
(``memory``) and then to PyG's rule on the first graph, each only where the
sizes allow its answer.

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> gs = [Data(x=torch.ones(n, 2), y=torch.ones(1, 1)) for n in (1, 3)]
    >>> classify_tensor("y", [1, 1], [1, 3], [0, 0], gs[0], {})
    <Level.GRAPH: 'graph'>
"""
from typing import Any, Dict, Hashable, List, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from .columns import Columns
from .plan import (GLOBAL, AttrSpec, Level, edge_fill, graph_spec,
                       is_incremented, node_fill)

_STRIDED = torch.strided

#: Attribute keys that are not padded: PyG batches them specially.
_SPECIAL_KEYS = ("num_nodes", "ptr")


def _cat_dim(data: Any, key: str, value: Tensor, store: Any) -> int:
    cat_dim = data.__cat_dim__(key, value, store)
    if not isinstance(cat_dim, int) or value.layout != _STRIDED:
        raise ValueError(
            f"Attribute '{key}' is a sparse tensor; fixed-size batching "
            "pads dense tensors only. Convert it to a dense tensor or "
            "exclude it (exclude_keys).")
    return cat_dim


def classify_tensor(key: str, sizes: Sequence[int],
                    node_counts: Sequence[int], edge_counts: Sequence[int],
                    first: Data, memory: Dict[str, Level]) -> Level:
    """The level of a tensor attribute of ``Data`` graphs whose sizes along
    the concatenation dim are ``sizes`` (see the module docstring).
    ``memory`` holds answers of earlier batches and is updated with
    unambiguous answers."""
    node_ok = sizes == node_counts
    edge_ok = sizes == edge_counts
    if node_ok != edge_ok:
        counts = node_counts if node_ok else edge_counts
        if any(c != 1 for c in counts):
            level = Level.NODE if node_ok else Level.EDGE
            memory[key] = level
            return level
    elif not node_ok:
        memory[key] = Level.GRAPH
        return Level.GRAPH
    # Ambiguous: only the levels the sizes allow may be chosen, or the
    # attribute would fit none of the batch's fixed sizes.
    one_per_graph = all(s == 1 for s in sizes)
    allowed = {level for level, ok in ((Level.NODE, node_ok),
                                       (Level.EDGE, edge_ok),
                                       (Level.GRAPH, one_per_graph)) if ok}
    if memory.get(key) in allowed:
        return memory[key]
    store = first._store
    if Level.NODE in allowed and store.is_node_attr(key):
        return Level.NODE
    if Level.EDGE in allowed and store.is_edge_attr(key):
        return Level.EDGE
    if Level.GRAPH in allowed:
        return Level.GRAPH
    return Level.NODE if node_ok else Level.EDGE


def homogeneous_specs(data_list: List[Data], columns: Optional[Columns],
                      node_counts: List[int], edge_counts: List[int],
                      opts: Any, exclude_keys: Sequence[str],
                      y_level: Optional[Level],
                      memory: Dict[str, Level]) -> List[AttrSpec]:
    """Padding specs of every attribute of ``Data`` graphs, in the first
    graph's key order. ``y_level`` forces the level of ``y`` (from the
    collater's label detection)."""
    first = data_list[0]
    specs: List[AttrSpec] = []
    for key, v0 in first._store._mapping.items():
        if key in exclude_keys or key in _SPECIAL_KEYS:
            continue
        if not isinstance(v0, Tensor):
            specs.append(graph_spec(opts, key, v0, None, use_defaults=True))
            continue
        if key == "y" and y_level is not None:
            level = y_level
        elif v0.dim() == 0:
            level = Level.GRAPH
        else:
            cat_dim = _cat_dim(first, key, v0, first._store)
            sizes = columns.sizes(key, cat_dim) if columns is not None \
                else [d[key].shape[cat_dim] for d in data_list]
            level = classify_tensor(key, sizes, node_counts, edge_counts,
                                    first, memory)
        specs.append(_tensor_spec(first, first._store, key, v0, level,
                                  opts, None))
    return specs


def _tensor_spec(data: Any, store: Any, key: str, v0: Tensor, level: Level,
                 opts: Any, store_type: Optional[Hashable]) -> AttrSpec:
    cat_dim = None if v0.dim() == 0 else _cat_dim(data, key, v0, store)
    if level is Level.GRAPH:
        return graph_spec(opts, key, v0, cat_dim, use_defaults=True)
    fill = node_fill(opts, key, store_type) if level is Level.NODE \
        else edge_fill(opts, key, store_type)
    return AttrSpec(key, level, v0, fill, cat_dim, is_incremented(key))


def hetero_specs(data_list: List[HeteroData],
                 node_counts: Dict[Hashable, List[int]],
                 edge_counts: Dict[Hashable, List[int]], opts: Any,
                 exclude_keys: Sequence[str]
                 ) -> Dict[Hashable, List[AttrSpec]]:
    """Padding specs of every store of ``HeteroData`` graphs: global-store
    entries are graph-level; a node (edge) store tensor is node (edge) level
    when its size matches the node (edge) count of its type in every graph,
    graph-level otherwise; non-tensors are copied from the first graph."""
    first = data_list[0]
    specs: Dict[Hashable, List[AttrSpec]] = {GLOBAL: []}
    for key, v0 in first._global_store.items():
        if key in exclude_keys or key in _SPECIAL_KEYS:
            continue
        cat_dim = None
        if isinstance(v0, Tensor) and v0.dim() > 0:
            cat_dim = _cat_dim(first, key, v0, first._global_store)
        specs[GLOBAL].append(graph_spec(opts, key, v0, cat_dim,
                                        use_defaults=True))
    for store in first.node_stores + first.edge_stores:
        store_type = store._key
        is_node = store_type in node_counts
        counts = node_counts[store_type] if is_node \
            else edge_counts[store_type]
        store_specs = specs.setdefault(store_type, [])
        for key, v0 in store.items():
            if key in exclude_keys or key in _SPECIAL_KEYS:
                continue
            if not isinstance(v0, Tensor):
                store_specs.append(
                    graph_spec(opts, key, v0, None, use_defaults=False))
                continue
            level = Level.GRAPH
            if v0.dim() > 0:
                cat_dim = _cat_dim(first, key, v0, store)
                sizes = [d[store_type][key].shape[cat_dim]
                         for d in data_list]
                if sizes == counts:
                    level = Level.NODE if is_node else Level.EDGE
            store_specs.append(_tensor_spec(first, store, key, v0, level,
                                            opts, store_type))
    return specs

