"""Coverage cases for the models of ``torch_geometric.nn.models.basic_gnn``,
the aggregations of ``torch_geometric.nn.aggr``, the global pooling
functions and the norms of ``torch_geometric.nn.norm``."""
import inspect
from typing import Callable, List

import torch
from torch.nn import Linear
from torch_geometric.nn import aggr, models, norm, pool

from .cases_conv import OUT, pna_degree
from .data import IN_CHANNELS as C, NUM_NODE_TYPES
from .probe import Case

__all__ = ["MODEL_CASES", "AGGR_CASES", "POOL_CASES", "NORM_CASES",
           "NOT_A_LAYER", "MAX_NUM_ELEMENTS"]

#: At least the node count of every graph of both batches, given to
#: aggregations that pad each graph to a dense tensor.
MAX_NUM_ELEMENTS = 12
NOT_A_LAYER = {"Aggregation": "base class of every aggregation row"}
_BATCH_STATS = ("training statistics are taken over all node slots, padding "
                "nodes included")
_PNA = dict(aggregators=["mean", "min", "max", "std"],
            scalers=["identity", "amplification", "attenuation"])


def _model(name: str, build: Callable[[], torch.nn.Module]) -> Case:
    return Case(name, "model", build,
                lambda layer, x, d: layer(x, d.edge_index))


MODEL_CASES: List[Case] = [
    _model("GCN", lambda: models.GCN(C, 16, 2, OUT)),
    _model("GraphSAGE", lambda: models.GraphSAGE(C, 16, 2, OUT)),
    _model("GIN", lambda: models.GIN(C, 16, 2, OUT)),
    _model("GAT", lambda: models.GAT(C, 16, 2, OUT, heads=2)),
    _model("PNA", lambda: models.PNA(C, 16, 2, OUT, deg=pna_degree(),
                                     **_PNA)),
    _model("EdgeCNN", lambda: models.EdgeCNN(C, 16, 2, OUT)),
]


def _aggregate(layer: torch.nn.Module, x: torch.Tensor, d) -> torch.Tensor:
    kwargs = {}
    if "max_num_elements" in inspect.signature(layer.forward).parameters:
        kwargs["max_num_elements"] = MAX_NUM_ELEMENTS
    return layer(x, d.batch, dim_size=d.num_graphs, **kwargs)


def _a(name: str, build: Callable[[], torch.nn.Module],
       known: str = "") -> Case:
    return Case(name, "aggr", build, _aggregate, level="graph", known=known,
                note="dim_size given" + (
                    ", max_num_elements given" if "max_num_elements" in
                    inspect.signature(getattr(aggr, name).forward).parameters
                    else ""))


AGGR_CASES: List[Case] = [
    _a("MultiAggregation",
       lambda: aggr.MultiAggregation(["mean", "max", "sum"])),
    _a("SumAggregation", aggr.SumAggregation),
    _a("MeanAggregation", aggr.MeanAggregation),
    _a("MaxAggregation", aggr.MaxAggregation),
    _a("MinAggregation", aggr.MinAggregation),
    _a("MulAggregation", aggr.MulAggregation),
    _a("VarAggregation", aggr.VarAggregation),
    _a("StdAggregation", aggr.StdAggregation),
    _a("SoftmaxAggregation", lambda: aggr.SoftmaxAggregation(learn=True)),
    _a("PowerMeanAggregation",
       lambda: aggr.PowerMeanAggregation(learn=True)),
    _a("MedianAggregation", aggr.MedianAggregation),
    _a("QuantileAggregation", lambda: aggr.QuantileAggregation([0.25, 0.75])),
    _a("LSTMAggregation", lambda: aggr.LSTMAggregation(C, OUT)),
    _a("GRUAggregation", lambda: aggr.GRUAggregation(C, OUT)),
    _a("Set2Set", lambda: aggr.Set2Set(C, processing_steps=2)),
    _a("DegreeScalerAggregation", lambda: aggr.DegreeScalerAggregation(
        ["mean", "max"], ["identity", "amplification"], pna_degree())),
    _a("SortAggregation", lambda: aggr.SortAggregation(k=3)),
    _a("GraphMultisetTransformer",
       lambda: aggr.GraphMultisetTransformer(C, k=4, heads=2)),
    _a("AttentionalAggregation",
       lambda: aggr.AttentionalAggregation(Linear(C, 1), Linear(C, OUT))),
    _a("EquilibriumAggregation",
       lambda: aggr.EquilibriumAggregation(C, OUT, num_layers=[8, 8]),
       known="it optimises its output with autograd inside forward"),
    _a("MLPAggregation", lambda: aggr.MLPAggregation(
        C, OUT, MAX_NUM_ELEMENTS, num_layers=1)),
    _a("DeepSetsAggregation",
       lambda: aggr.DeepSetsAggregation(Linear(C, C), Linear(C, OUT))),
    _a("SetTransformerAggregation",
       lambda: aggr.SetTransformerAggregation(C, heads=2)),
    _a("LCMAggregation", lambda: aggr.LCMAggregation(C, C)),
    _a("VariancePreservingAggregation", aggr.VariancePreservingAggregation),
    _a("PatchTransformerAggregation", lambda: aggr.PatchTransformerAggregation(
        C, OUT, patch_size=2, hidden_channels=16)),
]


class _Pool(torch.nn.Module):
    """A global pooling function as a module."""

    def __init__(self, function: Callable):
        super().__init__()
        self.function = function

    def forward(self, x: torch.Tensor, batch: torch.Tensor,
                size: int) -> torch.Tensor:
        return self.function(x, batch, size=size)


POOL_CASES: List[Case] = [
    Case(name, "pool", lambda name=name: _Pool(getattr(pool, name)),
         lambda layer, x, d: layer(x, d.batch, d.num_graphs),
         level="graph", note="size given")
    for name in ("global_add_pool", "global_mean_pool", "global_max_pool")
]


def _n(name: str, build: Callable[[], torch.nn.Module],
       call: Callable, note: str = "", known: str = "") -> Case:
    return Case(name, "norm", build, call, note=note, known=known)


def _per_graph(layer, x, d):
    return layer(x, d.batch, d.num_graphs)


NORM_CASES: List[Case] = [
    _n("BatchNorm", lambda: norm.BatchNorm(C), lambda layer, x, d: layer(x)),
    _n("HeteroBatchNorm", lambda: norm.HeteroBatchNorm(C, NUM_NODE_TYPES),
       lambda layer, x, d: layer(x, d.node_type),
       known=_BATCH_STATS + "; it also calls unique"),
    _n("InstanceNorm", lambda: norm.InstanceNorm(C, affine=True),
       _per_graph, note="batch_size given"),
    _n("LayerNorm", lambda: norm.LayerNorm(C), _per_graph,
       note="batch_size given"),
    _n("HeteroLayerNorm", lambda: norm.HeteroLayerNorm(C, NUM_NODE_TYPES),
       lambda layer, x, d: layer(x, d.node_type)),
    _n("GraphNorm", lambda: norm.GraphNorm(C), _per_graph,
       note="batch_size given"),
    _n("GraphSizeNorm", norm.GraphSizeNorm, _per_graph,
       note="batch_size given"),
    _n("PairNorm", norm.PairNorm, _per_graph, note="batch_size given"),
    _n("MeanSubtractionNorm", norm.MeanSubtractionNorm, _per_graph,
       note="dim_size given"),
    _n("MessageNorm", lambda: norm.MessageNorm(learn_scale=True),
       lambda layer, x, d: layer(x, 2 * d.x)),
    _n("DiffGroupNorm", lambda: norm.DiffGroupNorm(C, groups=2),
       lambda layer, x, d: layer(x)),
]
