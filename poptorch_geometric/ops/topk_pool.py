"""Fixed-shape ``TopKPooling`` (and the selection ``SAGPooling`` shares):
the selected nodes in a fixed number of slots, the edges filtered by
emptying slots instead of removing them.

PyG keeps ``ceil(ratio * n)`` nodes of a graph of ``n`` nodes, so the
pooled graph's size depends on the data. Here the output always has the
same shapes, set by the input's shapes and the number of graph slots:

- ``x``: ``[K, F]``, K node slots (:func:`~._selection.num_slots`:
  ``ceil(ratio * N) + num_graphs`` for ``N`` input node slots and a
  ratio below 1, ``int(ratio) * num_graphs`` for a ratio of at least 1,
  ``N`` with ``min_score`` or when the number of graphs is unknown, never
  more than ``N``). The selected nodes come first, in PyG's order (graph
  by graph, best score first), each scaled by its score as PyG does;
  unused slots are rows of 0.
- ``edge_index``: ``[2, E]``, the input's edge slots; an edge PyG removes
  is an empty slot ``(-1, -1)``, a kept edge joins the slots of its ends.
  Marked as holding empty slots, which message passing, scatters, softmax,
  degrees and global pooling leave out while a model is traced.
- ``edge_attr``: the input's, zero on the removed edges (None stays None).
- ``batch``: ``[K]``, each slot's graph, ``-1`` for unused slots.
- ``perm``: ``[K]``, each slot's input node, ``-1`` for unused slots.
- ``score``: ``[K]``, the selected nodes' scores, 0 for unused slots.

The slots are shared by the graphs rather than ``ceil(ratio * M)`` per
graph: a fixed-size batch bounds its node count ``N``, not the size ``M``
of its largest graph, which a layer cannot know; shared slots need only
the number of graphs, hold PyG's nodes in PyG's order, and take fewer
slots whenever the graphs differ in size.

The ``mask`` property (``perm >= 0``) gives the used slots. On them, and
on the edges that are not empty, the result is PyG's. The number of graph
slots is known when the traced model receives a fixed-size batch and
passes its ``batch`` (or an earlier pooling's); a padding node of that
batch is never selected. Ties: the lower node index first (PyG's CPU sort
leaves the order of equal scores unspecified above 16 nodes).

While PopTorch traces a model, PyG's ``TopKPooling.forward`` is this one
(:mod:`poptorch_geometric.override`), so PyG models pool as written.

Example::

    >>> _ = torch.manual_seed(0)
    >>> pool = TopKPooling(2, ratio=0.5)
    >>> x = torch.tensor([[1., 0.], [0., 1.], [2., 2.], [1., 1.]])
    >>> edge_index = torch.tensor([[0, 1, 2, 2], [1, 2, 3, 0]])
    >>> out = pool(x, edge_index, batch=torch.tensor([0, 0, 0, 1]))
    >>> out.perm, out.batch      # 4 slots: the graph count is not known
    (tensor([ 1,  0,  3, -1]), tensor([ 0,  0,  1, -1]))
    >>> out.edge_index           # only 1 -> 0 joins two selected nodes
    tensor([[ 1, -1, -1, -1],
            [ 0, -1, -1, -1]])
"""
from typing import NamedTuple, Optional

import torch
import torch_geometric.nn
from torch import Tensor
from torch_geometric.nn.pool.select import SelectTopK

from .._padding_masks import record_pooled
from ._selection import (gather_rows, normalise_per_graph, pooling_input,
                         select_top_k)
from .filter_adj import filter_adj

__all__ = ["TopKPooling", "PooledGraph", "select_and_filter",
           "selection_scores"]


class PooledGraph(NamedTuple):
    """``TopKPooling``'s and ``SAGPooling``'s result (a 6-tuple, as PyG's),
    in fixed shapes: see the module's description."""
    x: Tensor
    edge_index: Tensor
    edge_attr: Optional[Tensor]
    batch: Tensor
    perm: Tensor
    score: Tensor

    @property
    def mask(self) -> Tensor:
        """The used node slots."""
        return self.perm >= 0


def selection_scores(select: SelectTopK, attn: Tensor, batch: Tensor,
            valid: Tensor) -> Tensor:
    """``SelectTopK``'s node scores: the projection through ``act``, or
    its softmax over each graph's nodes with ``min_score``."""
    attn = attn.view(-1, 1) if attn.dim() == 1 else attn
    score = (attn * select.weight).sum(dim=-1)
    if select.min_score is None:
        return select.act(score / select.weight.norm(p=2, dim=-1))
    return normalise_per_graph(score, batch, valid)


def select_and_filter(layer: torch.nn.Module, x: Tensor, attn: Tensor,
                      edge_index: Tensor, edge_attr: Optional[Tensor],
                      batch: Optional[Tensor]) -> PooledGraph:
    """The pooling of ``TopKPooling`` and ``SAGPooling``: ``layer.select``
    scores ``attn``, the best nodes are kept and scaled by their score
    (and ``layer.multiplier``), the edges among them kept."""
    batch, num_graphs, valid = pooling_input(batch, x.size(0), edge_index)
    score = selection_scores(layer.select, attn, batch, valid)
    selection = select_top_k(score, layer.select.ratio, batch,
                             layer.select.min_score, num_graphs=num_graphs,
                             valid=valid)
    kept_score = gather_rows(score, selection.perm)
    pooled = gather_rows(x, selection.perm) * kept_score.view(-1, 1)
    if layer.multiplier != 1:
        pooled = layer.multiplier * pooled
    edge_index, edge_attr = filter_adj(edge_index, edge_attr, selection.perm,
                                       num_nodes=x.size(0))
    record_pooled(selection.batch, num_graphs, selection.mask)
    return PooledGraph(pooled, edge_index, edge_attr, selection.batch,
                       selection.perm, kept_score)


class TopKPooling(torch_geometric.nn.TopKPooling):
    """``torch_geometric.nn.TopKPooling`` with fixed output shapes (the
    module's description); same constructor."""

    def forward(self, x: Tensor, edge_index: Tensor,
                edge_attr: Optional[Tensor] = None,
                batch: Optional[Tensor] = None,
                attn: Optional[Tensor] = None) -> PooledGraph:
        """Pools ``x`` to its best nodes per graph (scored from ``attn``,
        by default ``x``) and keeps the edges among them."""
        return select_and_filter(self, x, x if attn is None else attn,
                                 edge_index, edge_attr, batch)
