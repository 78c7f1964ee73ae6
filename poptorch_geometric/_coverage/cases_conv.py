"""Coverage cases for every class of ``torch_geometric.nn.conv``.

Each case builds the layer with small sizes and calls it with the batch
attributes it needs. Layers that PopTorch's user guide says need an
argument for fixed shapes get it, and the case's note says so.
"""
from typing import Dict, List, Tuple

import torch
from torch.nn import Linear, ReLU, Sequential
from torch_geometric.data import Batch
from torch_geometric.nn import conv
from torch_geometric.utils import degree

from .data import EDGE_DIM, IN_CHANNELS as C, NUM_NODE_TYPES, NUM_RELATIONS
from .probe import Case

__all__ = ["CONV_CASES", "NOT_A_LAYER"]

OUT = 8
#: Classes of ``torch_geometric.nn.conv`` that are no layer of their own.
NOT_A_LAYER = {"MessagePassing": "base class of every row: its forward is "
                                 "abstract"}
_META = (["n"], [("n", "to", "n"), ("n", "rev", "n")])


def _mlp(i: int, o: int) -> Sequential:
    return Sequential(Linear(i, o), ReLU(), Linear(o, o))


def _dicts(x: torch.Tensor, data: Batch) -> Tuple[Dict, Dict]:
    ei = data.edge_index
    return {"n": x}, {_META[1][0]: ei, _META[1][1]: ei.flip([0])}


def _mesh_index(data: Batch) -> torch.Tensor:
    """MeshCNN's 4 neighbours of each element: the next 4 in its graph."""
    count = data.ptr[1:] - data.ptr[:-1]
    start = data.ptr[:-1][data.batch]
    own = torch.arange(data.num_nodes, device=data.batch.device)
    local = own - start
    steps = torch.arange(1, 5, device=own.device)
    nbrs = start.unsqueeze(1) + (local.unsqueeze(1) + steps) % \
        count[data.batch].unsqueeze(1)
    return torch.stack([own.repeat_interleave(4), nbrs.reshape(-1)])


def pna_degree() -> torch.Tensor:
    """The in-degree histogram of the probe graphs (PNA's ``deg``)."""
    from .data import make_batches
    ei = make_batches(0).plain.edge_index
    d = degree(ei[1], int(ei.max()) + 1, dtype=torch.long)
    return torch.bincount(d)


def _c(name, build, call, note="", known=""):
    return Case(name, "conv", build, call, note=note, known=known)


def _x_ei(layer, x, d):
    return layer(x, d.edge_index)


def _x_ei_w(layer, x, d):
    return layer(x, d.edge_index, d.get("edge_weight"))


def _x_ei_attr(layer, x, d):
    return layer(x, d.edge_index, d.edge_attr)


def _x_ei_type(layer, x, d):
    return layer(x, d.edge_index, d.edge_type)


def _x_x0_ei(layer, x, d):
    return layer(x, d.x, d.edge_index)


def _x_pos_ei(layer, x, d):
    return layer(x, d.pos, d.edge_index)


def _x_batch(layer, x, d):
    return layer(x, d.batch)


def _hetero(layer, x, d):
    return layer(*_dicts(x, d))["n"]


CONV_CASES: List[Case] = [
    _c("SimpleConv", lambda: conv.SimpleConv("mean", "self_loop"), _x_ei_w),
    _c("GCNConv", lambda: conv.GCNConv(C, OUT), _x_ei_w),
    _c("ChebConv", lambda: conv.ChebConv(C, OUT, K=3), _x_ei_w),
    _c("SAGEConv", lambda: conv.SAGEConv(C, OUT), _x_ei),
    _c("CuGraphSAGEConv", lambda: conv.CuGraphSAGEConv(C, OUT), _x_ei),
    _c("GraphConv", lambda: conv.GraphConv(C, OUT), _x_ei_w),
    _c("GravNetConv", lambda: conv.GravNetConv(C, OUT, 3, 8, k=3), _x_batch),
    _c("GatedGraphConv", lambda: conv.GatedGraphConv(C, 2), _x_ei_w),
    _c("ResGatedGraphConv",
       lambda: conv.ResGatedGraphConv(C, OUT, edge_dim=EDGE_DIM),
       _x_ei_attr),
    _c("GATConv", lambda: conv.GATConv(C, OUT, heads=2, edge_dim=EDGE_DIM),
       _x_ei_attr),
    _c("CuGraphGATConv", lambda: conv.CuGraphGATConv(C, OUT), _x_ei),
    _c("FusedGATConv",
       lambda: conv.FusedGATConv(C, OUT, add_self_loops=False), _x_ei),
    _c("GATv2Conv",
       lambda: conv.GATv2Conv(C, OUT, heads=2, edge_dim=EDGE_DIM),
       _x_ei_attr),
    _c("TransformerConv",
       lambda: conv.TransformerConv(C, OUT, heads=2, beta=True,
                                    edge_dim=EDGE_DIM), _x_ei_attr),
    _c("AGNNConv", lambda: conv.AGNNConv(), _x_ei),
    _c("TAGConv", lambda: conv.TAGConv(C, OUT, K=2), _x_ei_w),
    _c("GINConv", lambda: conv.GINConv(_mlp(C, OUT), train_eps=True),
       _x_ei),
    _c("GINEConv", lambda: conv.GINEConv(_mlp(C, OUT), edge_dim=EDGE_DIM),
       _x_ei_attr),
    _c("ARMAConv", lambda: conv.ARMAConv(C, OUT, num_stacks=2,
                                         num_layers=2), _x_ei_w),
    _c("SGConv", lambda: conv.SGConv(C, OUT, K=2), _x_ei_w),
    _c("SSGConv", lambda: conv.SSGConv(C, OUT, alpha=0.1, K=2), _x_ei_w),
    _c("APPNP", lambda: conv.APPNP(K=2, alpha=0.1), _x_ei_w),
    _c("MFConv", lambda: conv.MFConv(C, OUT, max_degree=3), _x_ei),
    _c("RGCNConv", lambda: conv.RGCNConv(C, OUT, NUM_RELATIONS),
       _x_ei_type),
    _c("FastRGCNConv", lambda: conv.FastRGCNConv(C, OUT, NUM_RELATIONS),
       _x_ei_type),
    _c("CuGraphRGCNConv",
       lambda: conv.CuGraphRGCNConv(C, OUT, NUM_RELATIONS), _x_ei_type),
    _c("RGATConv", lambda: conv.RGATConv(C, OUT, NUM_RELATIONS),
       _x_ei_type),
    _c("SignedConv", lambda: conv.SignedConv(C, OUT, first_aggr=True),
       lambda layer, x, d: layer(x, d.edge_index, d.edge_index.flip([0]))),
    _c("DNAConv", lambda: conv.DNAConv(C, heads=2),
       lambda layer, x, d: layer(torch.stack([x, d.x], dim=1),
                                 d.edge_index, d.get("edge_weight"))),
    _c("PointNetConv",
       lambda: conv.PointNetConv(Linear(C + 3, OUT), Linear(OUT, OUT)),
       _x_pos_ei),
    _c("GMMConv", lambda: conv.GMMConv(C, OUT, dim=EDGE_DIM, kernel_size=2),
       _x_ei_attr),
    _c("SplineConv", lambda: conv.SplineConv(C, OUT, dim=3, kernel_size=2),
       lambda layer, x, d: layer(x, d.edge_index,
                                 d.edge_attr[:, :3].sigmoid()),
       note="pseudo-coordinates in [0, 1], as SplineConv requires"),
    _c("NNConv", lambda: conv.NNConv(C, OUT, Linear(EDGE_DIM, C * OUT)),
       _x_ei_attr),
    _c("CGConv", lambda: conv.CGConv(C, dim=EDGE_DIM), _x_ei_attr),
    _c("EdgeConv", lambda: conv.EdgeConv(_mlp(2 * C, OUT)), _x_ei),
    _c("DynamicEdgeConv", lambda: conv.DynamicEdgeConv(_mlp(2 * C, OUT), 3),
       _x_batch),
    _c("XConv", lambda: conv.XConv(C, OUT, dim=3, kernel_size=2),
       lambda layer, x, d: layer(x, d.pos, d.batch),
       note="needs kernel_size (2) points in every graph"),
    _c("PPFConv", lambda: conv.PPFConv(Linear(C + 4, OUT), Linear(OUT, OUT)),
       lambda layer, x, d: layer(x, d.pos, d.normal, d.edge_index)),
    _c("FeaStConv", lambda: conv.FeaStConv(C, OUT, heads=2), _x_ei),
    _c("PointTransformerConv", lambda: conv.PointTransformerConv(C, OUT),
       _x_pos_ei),
    _c("HypergraphConv", lambda: conv.HypergraphConv(C, OUT),
       lambda layer, x, d: layer(x, d.edge_index, num_edges=d.num_nodes),
       note="num_edges given"),
    _c("LEConv", lambda: conv.LEConv(C, OUT), _x_ei_w),
    _c("PNAConv", lambda: conv.PNAConv(
        C, OUT, ["mean", "min", "max", "std"],
        ["identity", "amplification", "attenuation"], pna_degree(),
        edge_dim=EDGE_DIM), _x_ei_attr),
    _c("ClusterGCNConv", lambda: conv.ClusterGCNConv(C, OUT, diag_lambda=1.),
       _x_ei),
    _c("GENConv", lambda: conv.GENConv(C, OUT, edge_dim=EDGE_DIM,
                                       learn_t=True), _x_ei_attr),
    _c("GCN2Conv", lambda: conv.GCN2Conv(C, alpha=0.1, theta=0.5, layer=1),
       _x_x0_ei),
    _c("PANConv", lambda: conv.PANConv(C, OUT, filter_size=2), _x_ei),
    _c("WLConv", lambda: conv.WLConv(),
       lambda layer, x, d: layer(d.colors, d.edge_index),
       known="colour refinement hashes neighbourhoods into a Python dict "
             "that grows with the data"),
    _c("WLConvContinuous", lambda: conv.WLConvContinuous(), _x_ei_w),
    _c("FiLMConv", lambda: conv.FiLMConv(C, OUT, NUM_RELATIONS), _x_ei_type),
    _c("SuperGATConv", lambda: conv.SuperGATConv(C, OUT, heads=2),
       lambda layer, x, d: layer(x, d.edge_index, d.edge_index.flip([0])),
       note="neg_edge_index given: negative sampling draws a "
            "data-dependent number of edges"),
    _c("FAConv", lambda: conv.FAConv(C), _x_x0_ei),
    _c("EGConv", lambda: conv.EGConv(C, C, num_heads=4, num_bases=2),
       _x_ei, note="default aggregators (symnorm); the others call "
                   "add_remaining_self_loops without num_nodes: a clear "
                   "error"),
    _c("PDNConv", lambda: conv.PDNConv(C, OUT, EDGE_DIM, 8), _x_ei_attr),
    _c("GeneralConv", lambda: conv.GeneralConv(
        C, OUT, in_edge_channels=EDGE_DIM, attention=True), _x_ei_attr),
    _c("HGTConv", lambda: conv.HGTConv(C, OUT, _META, heads=2), _hetero),
    _c("HEATConv", lambda: conv.HEATConv(
        C, OUT, NUM_NODE_TYPES, NUM_RELATIONS, 4, EDGE_DIM, 4, heads=2),
       lambda layer, x, d: layer(x, d.edge_index, d.node_type, d.edge_type,
                                 d.edge_attr)),
    _c("HeteroConv", lambda: conv.HeteroConv({
        _META[1][0]: conv.GCNConv(C, OUT),
        _META[1][1]: conv.SAGEConv(C, OUT)}), _hetero),
    _c("HANConv", lambda: conv.HANConv(C, OUT, _META, heads=2), _hetero,
       known="its semantic attention averages over all node slots, "
             "padding nodes included"),
    _c("LGConv", lambda: conv.LGConv(), _x_ei_w),
    _c("PointGNNConv", lambda: conv.PointGNNConv(
        Linear(C, 3), Linear(3 + C, C), Linear(C, C)), _x_pos_ei),
    _c("GPSConv", lambda: conv.GPSConv(C, conv.GINConv(_mlp(C, C)), heads=2),
       call=lambda layer, x, d: layer(x, d.edge_index, d.batch)),
    _c("AntiSymmetricConv", lambda: conv.AntiSymmetricConv(C), _x_ei),
    _c("DirGNNConv", lambda: conv.DirGNNConv(conv.GraphConv(C, OUT)),
       _x_ei),
    _c("MixHopConv", lambda: conv.MixHopConv(C, OUT, powers=[0, 1, 2]),
       _x_ei_w),
    _c("MeshCNNConv", lambda: conv.MeshCNNConv(C, OUT),
       lambda layer, x, d: layer(x, _mesh_index(d))),
]
