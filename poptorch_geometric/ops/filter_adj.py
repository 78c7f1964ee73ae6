"""Fixed-shape ``filter_adj``: the edges among the selected nodes,
relabelled to their clusters, without dropping any edge slot.

PyG's ``filter_adj`` (``torch_geometric.nn.pool.connect.filter_edges``)
keeps the edges whose both ends are selected and removes the others, a
data-dependent number of edges. Here the output has as many edge slots as
the input: a removed edge becomes an empty slot, ``(-1, -1)`` with a zero
attribute, and the kept edges stay in their order, so the edges that are
not empty are exactly PyG's, in PyG's order. The edge index is marked as
holding empty slots (:mod:`~poptorch_geometric.ops.empty_slots`), so
message passing, scatters, softmax and degrees leave them out while a
model is traced. ``node_index`` may hold ``-1`` (an unused slot of a
fixed-shape selection), which selects nothing.

Example::

    >>> edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    >>> filter_adj(edge_index, None, torch.tensor([3, 0, 1, -1]),
    ...            num_nodes=4)
    (tensor([[ 1, -1, -1,  0],
            [ 2, -1, -1,  1]]), None)
    >>> filter_adj(edge_index, torch.ones(4), torch.tensor([1, 2]),
    ...            num_nodes=4)
    (tensor([[-1,  0, -1, -1],
            [-1,  1, -1, -1]]), tensor([0., 1., 0., 0.]))
"""
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils.num_nodes import maybe_num_nodes

from .empty_slots import mark_empty_slots, to_sink

__all__ = ["filter_adj"]


def filter_adj(edge_index: Tensor, edge_attr: Optional[Tensor],
               node_index: Tensor, cluster_index: Optional[Tensor] = None,
               num_nodes: Optional[int] = None
               ) -> Tuple[Tensor, Optional[Tensor]]:
    """``torch_geometric.nn.pool.connect.filter_edges.filter_adj`` with the
    removed edges as empty slots: ``[2, E]`` edges between the clusters of
    the selected nodes (``cluster_index``, by default the position in
    ``node_index``) and ``edge_attr`` with the removed edges' rows zeroed.
    Without ``num_nodes`` the node count is read from ``edge_index``'s
    values, as PyG does (an error inside a traced model: pass it)."""
    num_nodes = maybe_num_nodes(edge_index, num_nodes)
    if cluster_index is None:
        cluster_index = torch.arange(node_index.size(0),
                                     device=node_index.device)
    cluster_index = torch.where(node_index >= 0, cluster_index.long(), -1)
    # Each node's cluster, -1 for nodes not selected; unused selection
    # slots write to a sink row past the last node.
    cluster = torch.full((num_nodes + 1, ), -1, dtype=torch.long,
                         device=node_index.device).scatter(
        0, to_sink(node_index.long(), num_nodes), cluster_index)[:num_nodes]
    ends = cluster.index_select(0, edge_index.reshape(-1).long().clamp(
        min=0)).view(2, -1)
    keep = (edge_index >= 0).all(0) & (ends >= 0).all(0)
    filtered = mark_empty_slots(torch.where(keep, ends, -1))
    if edge_attr is None:
        return filtered, None
    rows = keep.view((-1, ) + (1, ) * (edge_attr.dim() - 1))
    return filtered, torch.where(rows, edge_attr, torch.zeros_like(edge_attr))
