"""Fixed-shape ``EdgePooling``: PyG's edge contraction with one cluster
slot per node, so the pooled graph's shapes never depend on the data.

PyG scores every edge, then walks the edges from the best score down and
merges the two ends of an edge whose ends are both still unmerged (a
greedy matching); the other nodes stay clusters of their own. Merged
clusters are numbered in the order they were chosen, then the single
nodes by index. The number of clusters, and of edges between them, depends
on the data. Here:

- ``x``: ``[N, F]``, one slot per input node slot; the clusters come
  first in PyG's order (each the sum of its nodes' features times its
  edge's score, as PyG), the unused slots are rows of 0;
- ``edge_index``: ``[2, E]``, the input's edge slots: the distinct edges
  between clusters first, sorted as PyG's ``coalesce`` sorts them, then
  empty slots ``(-1, -1)`` (marked: inert while a model is traced);
- ``batch``: ``[N]``, each slot's graph, ``-1`` for unused slots;
- ``unpool_info``: PyG's ``UnpoolInfo``, whose ``cluster`` is ``-1`` for
  nodes in no cluster (padding) and whose ``new_edge_score`` has one entry
  per slot (1 for single nodes and unused slots); :meth:`unpool` reads it.

On the used slots and the edges that are not empty the result is PyG's,
when ties in the edge scores are broken alike: here the lower edge index
first, where PyG's CPU sort leaves the order of equal scores unspecified
above 16 edges (the default softmax score ties often: it is 1 for every
edge into a node of in-degree 1).

The greedy matching is sequential by nature (the lexicographically first
maximal matching is P-complete), so its fixed-shape form runs in rounds:
each round merges every edge whose score beats all other unmerged edges at
its ends, which picks exactly the greedy walk's edges, and the rounds are
unrolled as often as the worst case needs (``min(N, E)``). Time and the
traced graph grow with ``min(N, E) * E``: this suits small batches.

Padding nodes of a fixed-size batch that the traced model receives, and
nodes of graph ``-1`` (unused slots of an earlier pooling), join no
cluster. While PopTorch traces a model, PyG's ``EdgePooling.forward`` and
``unpool`` are these (:mod:`poptorch_geometric.override`).

Example::

    >>> _ = torch.manual_seed(0)
    >>> pool = EdgePooling(2)
    >>> x = torch.tensor([[1., 0.], [0., 1.], [2., 2.], [1., 1.]])
    >>> edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    >>> x_out, edge_out, batch_out, info = pool(x, edge_index,
    ...                                         torch.zeros(4).long())
    >>> info.cluster, batch_out        # two merged pairs: two slots used
    (tensor([0, 0, 1, 1]), tensor([ 0,  0, -1, -1]))
"""
from typing import Tuple

import torch
import torch.nn.functional as F
import torch_geometric.nn
from torch import Tensor
from torch_geometric.nn.pool.edge_pool import UnpoolInfo

from .._padding_masks import record_pooled
from ._selection import gather_rows, pooling_input
from .empty_slots import index_select, mark_empty_slots, scatter, to_sink

__all__ = ["EdgePooling", "greedy_matching", "merge_edges"]


def greedy_matching(edge_index: Tensor, score: Tensor, valid: Tensor,
                    num_nodes: int) -> Tuple[Tensor, Tensor]:
    """PyG's greedy edge matching in fixed shapes: ``(chosen, order)``,
    the boolean mask of the chosen edges and the edges by score, best
    first (ties: lower index first). Only ``valid`` edges take part.

    Each round chooses every free edge (both ends unmatched) whose rank is
    the best among the free edges at both its ends. The free edge of
    best rank in a graph is always chosen, so every round matches a node
    of every graph with free edges left: ``min(num_nodes, E)`` rounds
    finish any graph, and choose exactly what the sequential walk
    chooses."""
    num_edges = edge_index.size(1)
    key = torch.where(valid, score, torch.full_like(score, -float("inf")))
    _, order = torch.sort(key, descending=True, stable=True)
    position = torch.arange(num_edges, device=score.device)
    rank = torch.empty_like(position).scatter(0, order, position)
    ends = torch.cat([to_sink(torch.where(valid, edge_index[0], -1),
                              num_nodes),
                      to_sink(torch.where(valid, edge_index[1], -1),
                              num_nodes)])
    matched = torch.zeros(num_nodes + 1, dtype=torch.bool,
                          device=score.device)
    chosen = torch.zeros(num_edges, dtype=torch.bool, device=score.device)
    for _ in range(min(num_nodes, num_edges)):
        taken = matched.index_select(0, ends).view(2, -1).any(0)
        free = valid & ~taken
        candidate = torch.where(free, rank, num_edges).repeat(2)
        best = torch.full((num_nodes + 1, ), num_edges, dtype=rank.dtype,
                          device=rank.device).scatter_reduce(
            0, ends, candidate, reduce="amin")
        wins = free & (best.index_select(0, ends).view(2, -1) ==
                       rank).all(0)
        chosen = chosen | wins
        hits = torch.zeros(num_nodes + 1, dtype=torch.long,
                           device=score.device).index_add(
            0, ends, wins.long().repeat(2))
        matched = matched | (hits > 0)
    return chosen, order


def _clusters(edge_index: Tensor, chosen: Tensor, order: Tensor,
              valid_node: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``(cluster, edge_cluster, merged)``: each node's cluster (-1 for
    nodes in none), each chosen edge's cluster (-1 for the others), and
    the number of merged clusters. Merged clusters are numbered by their
    edge's rank, then single nodes by index, as PyG numbers them."""
    num_nodes = valid_node.size(0)
    in_order = chosen.index_select(0, order).long().cumsum(0) - 1
    edge_cluster = torch.empty_like(in_order).scatter(0, order, in_order)
    edge_cluster = torch.where(chosen, edge_cluster, -1)
    merged = chosen.long().sum()
    cluster = torch.full((num_nodes + 1, ), -1, dtype=torch.long,
                         device=chosen.device)
    for end in edge_index:
        cluster = cluster.scatter(
            0, to_sink(torch.where(chosen, end.long(), -1), num_nodes),
            edge_cluster)
    cluster = cluster[:num_nodes]
    single = valid_node & (cluster < 0)
    cluster = torch.where(single, merged + single.long().cumsum(0) - 1,
                          cluster)
    return cluster, edge_cluster, merged


def _coalesced(edge_index: Tensor, cluster: Tensor, valid: Tensor
               ) -> Tensor:
    """PyG's ``coalesce(cluster[edge_index])`` in the input's edge slots:
    the distinct edges between clusters sorted by (source, target), then
    empty slots."""
    num_slots, num_edges = cluster.size(0), edge_index.size(1)
    ends = cluster.index_select(0, edge_index.reshape(-1).long().clamp(
        min=0)).view(2, -1)
    last = torch.iinfo(torch.long).max
    key = torch.where(valid, ends[0] * num_slots + ends[1], last)
    sorted_key, by_key = torch.sort(key, stable=True)
    first = torch.cat([sorted_key[:1] != last,
                       (sorted_key[1:] != sorted_key[:-1]) &
                       (sorted_key[1:] != last)])
    slot = torch.where(first, first.long().cumsum(0) - 1, num_edges)
    out = torch.full((2, num_edges + 1), -1, dtype=torch.long,
                     device=cluster.device).scatter(
        1, slot.expand(2, -1), ends.index_select(1, by_key))
    return mark_empty_slots(out[:, :num_edges])


def merge_edges(x: Tensor, edge_index: Tensor, batch: Tensor,
                edge_score: Tensor
                ) -> Tuple[Tensor, Tensor, Tensor, UnpoolInfo]:
    """``EdgePooling._merge_edges`` in fixed shapes: the pooled features,
    edges and batch, and the unpooling information (the module's
    description)."""
    num_nodes = x.size(0)
    batch, num_graphs, valid_node = pooling_input(batch, num_nodes,
                                                  edge_index)
    ends_valid = valid_node.index_select(
        0, edge_index.reshape(-1).long().clamp(min=0)).view(2, -1)
    valid = (edge_index >= 0).all(0) & ends_valid.all(0)
    chosen, order = greedy_matching(edge_index, edge_score, valid,
                                    num_nodes)
    cluster, edge_cluster, merged = _clusters(edge_index, chosen, order,
                                              valid_node)
    slot = torch.arange(num_nodes, device=x.device)
    merged_score = torch.zeros(
        num_nodes + 1, dtype=edge_score.dtype,
        device=x.device).scatter(0, to_sink(edge_cluster, num_nodes),
                                 edge_score)[:num_nodes]
    new_edge_score = torch.where(slot < merged, merged_score,
                                 torch.ones_like(merged_score))
    new_x = scatter(x, cluster, 0, num_nodes, "sum") * \
        new_edge_score.view(-1, 1)
    new_edge_index = _coalesced(edge_index, cluster, valid)
    new_batch = torch.full((num_nodes + 1, ), -1, dtype=torch.long,
                           device=x.device).scatter(
        0, to_sink(cluster, num_nodes), batch.long())[:num_nodes]
    new_batch = mark_empty_slots(new_batch)
    record_pooled(new_batch, num_graphs, new_batch >= 0)
    info = UnpoolInfo(edge_index=edge_index, cluster=cluster,
                      batch=batch, new_edge_score=new_edge_score)
    return new_x, new_edge_index, new_batch, info


class EdgePooling(torch_geometric.nn.EdgePooling):
    """``torch_geometric.nn.EdgePooling`` with one cluster slot per node
    (the module's description); same constructor."""

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor
                ) -> Tuple[Tensor, Tensor, Tensor, UnpoolInfo]:
        """Scores the edges, merges the ends of the best ones (a greedy
        matching) and connects the clusters."""
        e = torch.cat([index_select(x, 0, edge_index[0]),
                       index_select(x, 0, edge_index[1])], dim=-1)
        e = self.lin(e).view(-1)
        e = F.dropout(e, p=self.dropout, training=self.training)
        e = self.compute_edge_score(e, edge_index, x.size(0))
        e = e + self.add_to_edge_score
        # PyG's own _merge_edges is still bound to self: not self's.
        return merge_edges(x, edge_index, batch, e)

    def unpool(self, x: Tensor, unpool_info: UnpoolInfo
               ) -> Tuple[Tensor, Tensor, Tensor]:
        """Undoes a pooling step: each node gets its cluster's features
        divided by the cluster's score (0 for nodes in no cluster)."""
        new_x = x / unpool_info.new_edge_score.view(-1, 1)
        return (gather_rows(new_x, unpool_info.cluster),
                unpool_info.edge_index, unpool_info.batch)
