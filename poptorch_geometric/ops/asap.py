"""Fixed-shape ``ASAPooling``: PyG's adaptive structure-aware pooling with
the fixed-shape selection of :mod:`~poptorch_geometric.ops.topk_pool` and
a coarsened graph of fixed size.

PyG selects clusters like ``TopKPooling`` (K node slots here, the selected
clusters first in PyG's order, ``-1`` in ``perm`` and ``batch`` for unused
slots) and connects them through the sparse product ``S^T A S``, whose
number of edges depends on the data. Here that product is computed over
the edges into a dense ``[K, K]`` matrix, and the coarsened graph has an
edge slot for every pair of slots, row by row: ``edge_index`` is
``[2, K * K]``, a pair that is no edge of PyG's result being an empty slot
``(-1, -1)`` with weight 0. With ``add_self_loops`` one loop per used slot
is appended (``[2, K * K + K]``), carrying the product's diagonal entry
where there is one, as PyG's ``add_remaining_self_loops`` does. The edges
that are not empty are PyG's, with PyG's weights, in row-major order
(PyG's order within a row is its sparse product's). The input's own
self-loops become empty slots
(:func:`~poptorch_geometric.ops.add_remaining_self_loops`).

The dense product takes memory and time in ``K * K`` and ``E * K`` (``E``
the edge slots), which suits the small graphs ASAP is used on.

The cluster GNNs run on edges with empty slots, which are inert inside a
traced model: while PopTorch traces a model, PyG's ``ASAPooling.forward``
is this one (:mod:`poptorch_geometric.override`).

Example::

    >>> _ = torch.manual_seed(0)
    >>> pool = ASAPooling(2, ratio=0.5)
    >>> x = torch.tensor([[1., 0.], [0., 1.], [2., 2.], [1., 1.]])
    >>> edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    >>> out = pool(x, edge_index)
    >>> out.perm, out.edge_index.shape       # 3 slots, 3 x 3 pairs
    (tensor([ 3,  2, -1]), torch.Size([2, 9]))
"""
from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
import torch_geometric.nn
from torch import Tensor

from .._padding_masks import record_pooled
from ._selection import gather_rows, pooling_input, select_top_k
from .empty_slots import (index_select, mark_empty_slots, scatter, softmax,
                          to_sink)
from .self_loops import add_remaining_self_loops
from .topk_pool import selection_scores

__all__ = ["ASAPooling", "ASAPooled"]


class ASAPooled(NamedTuple):
    """``ASAPooling``'s result (a 5-tuple, as PyG's) in fixed shapes."""
    x: Tensor
    edge_index: Tensor
    edge_weight: Optional[Tensor]
    batch: Tensor
    perm: Tensor

    @property
    def mask(self) -> Tensor:
        """The used node slots."""
        return self.perm >= 0


def _coarsen(edge_index: Tensor, weight: Tensor, score: Tensor,
             perm: Tensor, num_nodes: int) -> Tensor:
    """PyG's ``S^T A S`` as a dense ``[K, K]`` matrix: ``A`` holds
    ``weight`` on the edges, ``S`` the edges' ``score`` towards the
    selected nodes (column ``c``: the node of slot ``c`` of ``perm``).
    Called with ones for both, it counts paths: its positive entries are
    the product's sparsity pattern (PyG keeps an entry whose values sum
    to 0)."""
    slots = perm.size(0)
    src, dst = edge_index[0], edge_index[1]
    valid = (src >= 0) & (dst >= 0)
    slot = torch.full((num_nodes + 1, ), -1, dtype=torch.long,
                      device=perm.device).scatter(
        0, to_sink(perm, num_nodes),
        torch.arange(slots, device=perm.device))[:num_nodes]
    column = torch.where(valid, slot.index_select(0, dst.clamp(min=0)), -1)
    weight = torch.where(valid, weight, torch.zeros_like(weight))
    score = torch.where(column >= 0, score, torch.zeros_like(score))
    rows = to_sink(torch.where(valid, src, -1), num_nodes)
    columns = to_sink(column, slots)
    # S[u, c]: the score of the edge u -> perm[c].
    s = torch.zeros(num_nodes + 1, slots + 1, dtype=score.dtype,
                    device=score.device).index_put(
        (rows, columns), score, accumulate=True)[:num_nodes, :slots]
    # (A S)[u, c]: the sum over the edges u -> v of weight * S[v, c].
    a_s = torch.zeros(num_nodes + 1, slots, dtype=score.dtype,
                      device=score.device).index_add(
        0, rows, weight.unsqueeze(-1) *
        s.index_select(0, dst.clamp(min=0)))[:num_nodes]
    # Row c of S^T (A S): the sum over the edges u -> perm[c] of
    # score * (A S)[u, :].
    return torch.zeros(slots + 1, slots, dtype=score.dtype,
                       device=score.device).index_add(
        0, columns, score.unsqueeze(-1) *
        a_s.index_select(0, src.clamp(min=0)))[:slots]


def _pairs(product: Tensor, pattern: Tensor, weighted: bool,
           loops: bool) -> Tuple[Tensor, Optional[Tensor]]:
    """Every pair of slots, row by row, as an edge slot: the pairs of the
    pattern are edges weighted by ``product``, those on the diagonal only
    with ``loops`` (else PyG's ``remove_self_loops`` drops them); the
    others are empty slots."""
    slots = product.size(0)
    index = torch.arange(slots, device=product.device)
    rows = index.view(-1, 1).expand(slots, slots).reshape(-1)
    cols = index.view(1, -1).expand(slots, slots).reshape(-1)
    keep = pattern.reshape(-1) > 0
    if not loops:
        keep = keep & (rows != cols)
    edge_index = mark_empty_slots(
        torch.where(keep, torch.stack([rows, cols]), -1))
    if not weighted:
        return edge_index, None
    return edge_index, torch.where(keep, product.reshape(-1),
                                   torch.zeros_like(product.reshape(-1)))


class ASAPooling(torch_geometric.nn.ASAPooling):
    """``torch_geometric.nn.ASAPooling`` with fixed output shapes (the
    module's description); same constructor."""

    def forward(self, x: Tensor, edge_index: Tensor,
                edge_weight: Optional[Tensor] = None,
                batch: Optional[Tensor] = None) -> ASAPooled:
        """Scores clusters around every node, keeps the best per graph and
        connects them through the clusters' edges."""
        num_nodes = x.size(0)
        batch, num_graphs, valid = pooling_input(batch, num_nodes, edge_index)
        edge_index, edge_weight = add_remaining_self_loops(
            edge_index, edge_weight, fill_value=1., num_nodes=num_nodes)
        x = x.unsqueeze(-1) if x.dim() == 1 else x
        x_pool = x
        if self.gnn_intra_cluster is not None:
            x_pool = self.gnn_intra_cluster(x=x, edge_index=edge_index,
                                            edge_weight=edge_weight)
        src, dst = edge_index[0], edge_index[1]
        x_pool_j = index_select(x_pool, 0, src)
        x_q = scatter(x_pool_j, dst, 0, num_nodes, "max")
        x_q = index_select(self.lin(x_q), 0, dst)
        score = self.att(torch.cat([x_q, x_pool_j], dim=-1)).view(-1)
        score = F.leaky_relu(score, self.negative_slope)
        score = softmax(score, dst, num_nodes=num_nodes)
        score = F.dropout(score, p=self.dropout, training=self.training)
        x = scatter(index_select(x, 0, src) * score.view(-1, 1), dst, 0,
                    num_nodes, "sum")
        fitness = self.gnn_score(x, edge_index).sigmoid().view(-1)
        selection = select_top_k(
            selection_scores(self.select, fitness, batch, valid),
            self.select.ratio, batch, num_graphs=num_graphs, valid=valid)
        perm = selection.perm
        x = gather_rows(x, perm) * gather_rows(fitness, perm).view(-1, 1)
        weight = torch.ones_like(score) if edge_weight is None \
            else edge_weight
        product = _coarsen(edge_index, weight, score, perm, num_nodes)
        ones = torch.ones_like(score)
        pattern = _coarsen(edge_index, ones, ones, perm, num_nodes)
        edge_index, edge_weight = _pairs(product, pattern,
                                         edge_weight is not None,
                                         self.add_self_loops)
        if self.add_self_loops:
            # A slot's loop keeps the weight of the product's diagonal.
            edge_index, edge_weight = add_remaining_self_loops(
                edge_index, edge_weight, num_nodes=perm.size(0))
            # Only used slots get a loop.
            ends = selection.mask.index_select(
                0, edge_index.reshape(-1).clamp(min=0)).view(2, -1)
            edge_index = mark_empty_slots(torch.where(
                ends.all(0) & (edge_index >= 0).all(0), edge_index, -1))
        record_pooled(selection.batch, num_graphs, selection.mask)
        return ASAPooled(x, edge_index, edge_weight, selection.batch, perm)
