"""Fixed-shape ``SAGPooling``: PyG's self-attention pooling, whose scores
come from a GNN over the graph, with the fixed-shape selection and edge
filtering of :mod:`~poptorch_geometric.ops.topk_pool` (same output
contract: K node slots with the selected nodes first in PyG's order,
``-1`` in ``perm`` and ``batch`` for unused slots, removed edges as empty
slots).

The scoring GNN runs on the given edges, which may hold empty slots (the
edges of an earlier pooling): inside a traced model they are inert.

While PopTorch traces a model, PyG's ``SAGPooling.forward`` is this one
(:mod:`poptorch_geometric.override`).

Example::

    >>> _ = torch.manual_seed(0)
    >>> pool = SAGPooling(2, ratio=0.5)
    >>> x = torch.tensor([[1., 0.], [0., 1.], [2., 2.], [1., 1.]])
    >>> edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    >>> pool(x, edge_index).perm     # one graph: ceil(0.5 * 4) + 1 slots
    tensor([ 1,  0, -1])
"""
from typing import Optional

import torch_geometric.nn
from torch import Tensor

from .topk_pool import PooledGraph, select_and_filter

__all__ = ["SAGPooling"]


class SAGPooling(torch_geometric.nn.SAGPooling):
    """``torch_geometric.nn.SAGPooling`` with fixed output shapes; same
    constructor."""

    def forward(self, x: Tensor, edge_index: Tensor,
                edge_attr: Optional[Tensor] = None,
                batch: Optional[Tensor] = None,
                attn: Optional[Tensor] = None) -> PooledGraph:
        """Scores the nodes with ``self.gnn`` over ``attn`` (by default
        ``x``), keeps the best per graph and the edges among them."""
        attn = x if attn is None else attn
        attn = attn.view(-1, 1) if attn.dim() == 1 else attn
        attn = self.gnn(attn, edge_index)
        return select_and_filter(self, x, attn, edge_index, edge_attr, batch)
