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
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.storage import E_KEYS, N_KEYS
from torch_geometric.typing import EdgeType, NodeType

from ._columns import Columns

__all__: List[str] = []

_STRIDED = torch.strided


def node_count(data: Data) -> int:
    """``data.num_nodes`` (0 when PyG cannot tell)."""
    if type(data) is Data:
        mapping = data._store._mapping
        if "num_nodes" in mapping:
            return mapping["num_nodes"]
        for key, value in mapping.items():
            if key in N_KEYS:
                # N_KEYS never hold "index", so Data concatenates them on 0.
                if type(value) is Tensor and value.layout is _STRIDED:
                    return value.size(0)
                break
    return data.num_nodes or 0


def edge_count(data: Data) -> int:
    """``data.num_edges``."""
    if type(data) is Data:
        mapping = data._store._mapping
        if "num_edges" in mapping:
            return mapping["num_edges"]
        for key, value in mapping.items():
            if key in E_KEYS:
                if type(value) is Tensor and value.layout is _STRIDED:
                    return value.size(-1 if "index" in key else 0)
                break
    return data.num_edges


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

