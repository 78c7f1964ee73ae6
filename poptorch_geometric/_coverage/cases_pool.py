"""Coverage cases for the node-selection poolings of
``torch_geometric.nn.pool`` and ``filter_adj``, run by
:mod:`.pool_probe`: each call returns the dict that probe compares (the
used rows, the pooled edges and the row-level tensors)."""
from typing import Any, Dict, List, Optional

import torch
from torch_geometric.nn import GraphConv, pool
from torch_geometric.nn.pool.connect import filter_edges

from .data import IN_CHANNELS as C
from .probe import Case

__all__ = ["SELECT_NAMES", "SELECT_CASES"]

SELECT_NAMES = ("TopKPooling", "SAGPooling", "ASAPooling", "EdgePooling",
                "filter_adj")


def _out(x: torch.Tensor, used: torch.Tensor, edge_index: torch.Tensor,
         edge_values: Optional[torch.Tensor], **rows: torch.Tensor
         ) -> Dict[str, Any]:
    return {"rows": x, "used": used, "edge_index": edge_index,
            "edge_values": edge_values, **rows}


def _select(layer, x, d) -> Dict[str, Any]:
    x, edge_index, edge_attr, batch, perm, score = layer(
        x, d.edge_index, d.edge_attr, d.batch)
    return _out(x, perm >= 0, edge_index, edge_attr, batch=batch, perm=perm,
                score=score)


def _asap(layer, x, d) -> Dict[str, Any]:
    x, edge_index, edge_weight, batch, perm = layer(
        x, d.edge_index, getattr(d, "edge_weight", None), d.batch)
    return _out(x, perm >= 0, edge_index, edge_weight, batch=batch,
                perm=perm)


def _edge(layer, x, d) -> Dict[str, Any]:
    x, edge_index, batch, _ = layer(x, d.edge_index, d.batch)
    return _out(x, batch >= 0, edge_index, None, batch=batch)


class _FilterAdj(torch.nn.Module):
    """``filter_adj`` keeping every other node, on edge values computed
    from the features (so that gradients flow through it)."""

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                num_nodes: int) -> Dict[str, Any]:
        node_index = torch.arange(0, num_nodes, 2, device=x.device)
        values = x.index_select(0, edge_index[0]) * \
            x.index_select(0, edge_index[1])
        # The module attribute: the name the override substitutes.
        edge_index, values = filter_edges.filter_adj(
            edge_index, values, node_index, num_nodes=num_nodes)
        return _out(values, (edge_index >= 0).all(0), edge_index, None)


SELECT_CASES: List[Case] = [
    Case("TopKPooling", "select", lambda: pool.TopKPooling(C, ratio=0.5),
         _select),
    Case("SAGPooling", "select", lambda: pool.SAGPooling(C, ratio=0.5),
         _select),
    Case("ASAPooling", "select",
         lambda: pool.ASAPooling(C, ratio=0.5, GNN=GraphConv), _asap,
         note="GNN=GraphConv"),
    Case("EdgePooling", "select", lambda: pool.EdgePooling(
        C, edge_score_method=pool.EdgePooling.compute_edge_score_tanh),
        _edge, note="tanh edge scores (softmax scores tie, and PyG's order "
        "of ties is unspecified)"),
    Case("filter_adj", "select", _FilterAdj,
         lambda layer, x, d: layer(x, d.edge_index, d.num_nodes),
         note="every other node kept"),
]
