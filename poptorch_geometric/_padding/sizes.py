"""Node and edge counts of graphs, computed the way PyG computes them.

``Data.num_nodes`` walks the store through several Python properties; the
collaters need the counts of every graph of every batch, so for plain
``Data`` objects the common cases are answered straight from the attribute
dict, with exactly PyG's rules, and anything unusual goes to PyG.

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> g = Data(x=torch.ones(3, 1), edge_index=torch.zeros(2, 4).long())
    >>> node_count(g), edge_count(g)
    (3, 4)
"""
from typing import Dict, FrozenSet, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.storage import E_KEYS, N_KEYS
from torch_geometric.typing import EdgeType, NodeType

from .columns import Columns, cat_dim

_STRIDED = torch.strided


def _count(data: Data, explicit: str, known_keys: FrozenSet[str],
           fallback: str) -> int:
    # PyG's rule: an explicit count, else the size of the first tensor in
    # store order whose key is well known; anything unusual goes to PyG.
    if type(data) is Data:
        mapping = data._store._mapping
        if explicit in mapping:
            return mapping[explicit]
        for key, value in mapping.items():
            if key in known_keys:
                if type(value) is Tensor and value.layout is _STRIDED \
                        and value.dim() > 0:
                    return value.size(cat_dim(key))
                break
    return getattr(data, fallback) or 0


def node_count(data: Data) -> int:
    """``data.num_nodes`` (0 when PyG cannot tell)."""
    return _count(data, "num_nodes", N_KEYS, "num_nodes")


def edge_count(data: Data) -> int:
    """``data.num_edges``."""
    return _count(data, "num_edges", E_KEYS, "num_edges")


def homogeneous_counts(data_list: List[Data], columns: Optional[Columns]
                       ) -> Tuple[List[int], List[int]]:
    """Per-graph node and edge counts (from ``columns`` when they can
    tell)."""
    nodes = columns.node_counts() if columns is not None else None
    edges = columns.edge_counts() if columns is not None else None
    if nodes is None:
        nodes = [node_count(d) for d in data_list]
    if edges is None:
        edges = [edge_count(d) for d in data_list]
    return nodes, edges


def hetero_counts(data_list: List[HeteroData]
                  ) -> Tuple[Dict[NodeType, List[int]],
                             Dict[EdgeType, List[int]]]:
    """Per-type, per-graph node and edge counts, for the types of the first
    graph (PyG batches only graphs with the same types)."""
    first = data_list[0]
    nodes = {t: [d[t].num_nodes or 0 for d in data_list]
             for t in first.node_types}
    edges = {t: [d[t].num_edges for d in data_list]
             for t in first.edge_types}
    return nodes, edges

