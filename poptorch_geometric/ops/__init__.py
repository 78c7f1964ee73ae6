"""Fixed-shape replacements of PyG ops and layers, in plain PyTorch.

Output shapes depend only on input shapes and Python arguments, never on
tensor values, so a model using them traces once and compiles once for
fixed-size batches. Neighbour searches mark empty slots with -1 (both
entries of an edge). :mod:`poptorch_geometric.override` substitutes these
for PyG's versions while PopTorch traces a model; they are also usable
directly.

Empty slots are inert in PyG's message passing, scatters, softmax and
degrees while a model is traced (:mod:`.empty_slots`, whose ``scatter``,
``softmax``, ``degree`` and ``index_select`` follow the same rule when
called directly). Code that indexes with an edge index itself
(``x[edge_index[0]]``) reads row -1, the last one, for an empty slot: weigh
such terms by ``edge_index[0] >= 0``.

Example::

    >>> from poptorch_geometric import ops
    >>> pos = torch.tensor([[0., 0.], [1., 0.], [0., 3.]])
    >>> ops.knn_graph(pos, k=1, loop=False)
    tensor([[1, 0, 0],
            [0, 1, 2]])
"""
from . import empty_slots, point_pair
from .aggregation import Aggregation
from .asap import ASAPooling
from .batch_norm import BatchNorm1d
from .cheb_conv import ChebConv
from .cluster_gcn_conv import ClusterGCNConv
from .dynamic_graph_convs import DynamicEdgeConv, GravNetConv
from .edge_pool import EdgePooling
from .filter_adj import filter_adj
from .gps_conv import GPSConv
from .graph_norms import (GraphNorm, GraphSizeNorm, LayerNorm,
                          MeanSubtractionNorm, PairNorm)
from .hetero_linear import HeteroLinear
from .instance_norm import InstanceNorm
from .knn import knn
from .knn_graph import knn_graph
from .knn_interpolate import knn_interpolate
from .mesh_cnn_conv import MeshCNNConv
from .mf_conv import MFConv
from .nearest import nearest
from .quantile import QuantileAggregation
from .radius import radius, radius_graph
from .relational import FiLMConv, RGCNConv
from .sag_pool import SAGPooling
from .self_loops import add_remaining_self_loops, remove_self_loops
from .to_dense_batch import to_dense_batch
from .topk_pool import PooledGraph, TopKPooling
from .x_conv import XConv

__all__ = [
    "knn", "knn_graph", "knn_interpolate", "radius", "radius_graph",
    "nearest", "InstanceNorm", "HeteroLinear", "MFConv", "ClusterGCNConv",
    "Aggregation", "QuantileAggregation", "ChebConv", "RGCNConv", "FiLMConv",
    "GPSConv", "MeshCNNConv", "remove_self_loops", "add_remaining_self_loops",
    "to_dense_batch", "empty_slots", "point_pair", "BatchNorm1d",
    "LayerNorm", "GraphNorm", "PairNorm", "MeanSubtractionNorm",
    "GraphSizeNorm", "DynamicEdgeConv", "GravNetConv", "XConv",
    "TopKPooling", "SAGPooling", "PooledGraph", "filter_adj", "ASAPooling",
    "EdgePooling",
]
