"""Fixed-shape node selection: PyG's ``topk`` (``SelectTopK``) without a
data-dependent number of selected nodes, shared by the pooling layers.

PyG keeps ``ceil(ratio * n)`` nodes of each graph of ``n`` nodes (or
``int(ratio)`` for a ratio of at least 1, or those scoring above
``min_score``), a number that depends on the data. Here the selection has a
fixed number of **slots**, :func:`num_slots`: enough for any graph sizes
that fit the input's node slots. The selected nodes fill the first slots
in PyG's order (graph by graph, best score first, or by node index with
``min_score``), so the used slots hold exactly PyG's result; the other
slots are unused: node ``-1`` and graph ``-1`` (an empty slot that
scatters and global pooling leave out while a model is traced).

Nodes whose graph is ``-1`` (unused slots of an earlier pooling) and, in a
traced model that receives a fixed-size batch, its padding nodes are never
selected. Ties: the lower node index first (PyG's CPU sort leaves the order
of equal scores unspecified above 16 nodes).

Example::

    >>> score = torch.tensor([0.1, 0.9, 0.5, 0.3, 0.8])
    >>> batch = torch.tensor([0, 0, 0, 1, 1])
    >>> sel = select_top_k(score, 0.5, batch, num_graphs=2)
    >>> sel.perm, sel.batch      # min(5, ceil(0.5 * 5) + 2) slots
    (tensor([ 1,  2,  4, -1, -1]), tensor([ 0,  0,  1, -1, -1]))
"""
import dataclasses
import math
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from .._padding_masks import graph_slots, node_mask
from .empty_slots import mark_empty_slots, scatter, softmax

__all__ = ["Selection", "num_slots", "graph_count", "pooling_input",
           "select_top_k", "normalise_per_graph", "gather_rows",
           "dense_groups"]

Ratio = Union[int, float]


@dataclasses.dataclass
class Selection:
    """Selected nodes in slots: ``perm[i]`` is the node of slot ``i`` (-1:
    unused), ``batch[i]`` its graph (-1: unused, marked as holding empty
    slots), ``mask`` the used slots."""
    perm: Tensor
    batch: Tensor
    mask: Tensor

    @property
    def slots(self) -> int:
        return self.perm.size(0)


def graph_count(batch: Optional[Tensor]) -> Optional[int]:
    """The number of graph slots behind ``batch`` when the traced model
    knows it (a fixed-size batch's vector, or an earlier pooling's); 1
    without a batch vector; None otherwise."""
    if batch is None:
        return 1
    return graph_slots(batch)


def pooling_input(batch: Optional[Tensor], num_nodes: int, like: Tensor
                  ) -> Tuple[Tensor, Optional[int], Tensor]:
    """What a pooling layer needs to know of its nodes: the batch vector
    (zeros, of ``like``'s dtype, without one), the number of graph slots
    (:func:`graph_count`) and the nodes that may be selected: not in
    graph -1 (an unused slot of an earlier pooling) and, while a model
    that receives a fixed-size batch is traced, not one of its padding
    nodes."""
    num_graphs = graph_count(batch)
    real = node_mask(batch, num_nodes)
    if batch is None:
        batch = like.new_zeros(num_nodes)
    valid = batch >= 0
    return batch, num_graphs, valid if real is None else valid & real


def num_slots(num_nodes: int, ratio: Optional[Ratio],
              min_score: Optional[float],
              num_graphs: Optional[int]) -> int:
    """Slots that hold every selection of ``num_nodes`` nodes in at most
    ``num_graphs`` graphs: ``ceil(ratio * num_nodes) + num_graphs`` for a
    ratio below 1 (each graph rounds up once), ``int(ratio) * num_graphs``
    for a ratio of at least 1, all nodes with ``min_score`` or an unknown
    number of graphs; never more than ``num_nodes``."""
    if min_score is not None or num_graphs is None:
        return num_nodes
    if ratio >= 1:
        return min(num_nodes, int(ratio) * num_graphs)
    # PyG rounds ratio * n in the features' float type: one more slot
    # covers that rounding up.
    return min(num_nodes, math.ceil(float(ratio) * num_nodes) + num_graphs)


def dense_groups(batch: Tensor, valid: Tensor,
                 score: Optional[Tensor] = None) -> "_Groups":
    """Nodes ordered graph by graph (by ``score``, best first, within a
    graph when given; else by index), with each node's rank in its graph,
    the graph's size and a dense graph number; invalid nodes form a group
    of their own, last."""
    count = batch.size(0)
    key = torch.where(valid, batch.long(),
                      torch.iinfo(torch.long).max)
    if score is None:
        _, order = torch.sort(key, stable=True)
    else:
        _, by_score = torch.sort(score, descending=True, stable=True)
        _, by_graph = torch.sort(key.index_select(0, by_score), stable=True)
        order = by_score.index_select(0, by_graph)
    sorted_key = key.index_select(0, order)
    starts = torch.cat([torch.ones(min(count, 1), dtype=torch.bool,
                                   device=batch.device),
                        sorted_key[1:] != sorted_key[:-1]])
    position = torch.arange(count, device=batch.device)
    first = torch.cummax(torch.where(starts, position, 0), dim=0).values
    group = starts.long().cumsum(0) - 1
    sizes = torch.zeros(count, dtype=torch.long, device=batch.device
                        ).index_add(0, group, torch.ones_like(group))
    return _Groups(order, position - first, sizes.index_select(0, group),
                   group, valid.index_select(0, order))


@dataclasses.dataclass
class _Groups:
    """:func:`dense_groups`' result, all in sorted order."""
    order: Tensor
    rank: Tensor
    size: Tensor
    group: Tensor
    valid: Tensor

    def group_of_nodes(self) -> Tensor:
        """Each node's dense group (-1 for invalid nodes), in node order."""
        group = torch.where(self.valid, self.group, -1)
        return torch.empty_like(group).scatter(0, self.order, group)


def _place(chosen: Tensor, nodes: Tensor, slots: int,
           batch: Tensor) -> Selection:
    """The ``chosen`` of ``nodes`` (both in PyG's order) in the first
    slots."""
    position = chosen.long().cumsum(0) - 1
    slot = torch.where(chosen & (position < slots), position, slots)
    perm = torch.full((slots + 1, ), -1, dtype=torch.long,
                      device=nodes.device).scatter(0, slot, nodes)[:slots]
    used = perm >= 0
    graph = batch.long().index_select(0, perm.clamp(min=0))
    return Selection(perm, mark_empty_slots(torch.where(used, graph, -1)),
                     used)


def select_top_k(score: Tensor, ratio: Optional[Ratio], batch: Tensor,
                 min_score: Optional[float] = None, tol: float = 1e-7,
                 num_graphs: Optional[int] = None,
                 valid: Optional[Tensor] = None) -> Selection:
    """PyG's ``topk(score, ratio, batch, min_score, tol)`` in
    :func:`num_slots` slots. ``score`` is one value per node (for
    ``min_score``, already normalised per graph as ``SelectTopK`` does);
    ``valid`` defaults to the nodes of a graph other than -1."""
    if min_score is None and ratio is None:
        raise ValueError("At least one of the 'ratio' and 'min_score' "
                         "parameters must be specified")
    score = score.view(-1)
    valid = batch >= 0 if valid is None else valid
    slots = num_slots(score.size(0), ratio, min_score, num_graphs)
    if min_score is not None:
        groups = dense_groups(batch, valid)
        group = groups.group_of_nodes()
        top = scatter(score, group, 0, score.size(0), "max")
        top = top.index_select(0, group.clamp(min=0)) - tol
        chosen = valid & (score > top.clamp(max=min_score))
        nodes = torch.arange(score.size(0), device=score.device)
        return _place(chosen, nodes, slots, batch)
    groups = dense_groups(batch, valid, score)
    if ratio >= 1:
        keep = torch.full_like(groups.size, int(ratio))
    else:
        keep = (float(ratio) * groups.size.to(score.dtype)).ceil().long()
    chosen = groups.valid & (groups.rank < keep)
    return _place(chosen, groups.order, slots, batch)


def normalise_per_graph(score: Tensor, batch: Tensor,
                        valid: Tensor) -> Tensor:
    """PyG's ``softmax(score, batch)`` over the valid nodes of each graph,
    without reading the number of graphs from ``batch``."""
    group = dense_groups(batch, valid).group_of_nodes()
    return softmax(score, group, num_nodes=score.size(0))


def gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """``values[index]`` with rows of 0 where ``index`` is -1."""
    rows = values.index_select(0, index.clamp(min=0))
    used = (index >= 0).view((-1, ) + (1, ) * (rows.dim() - 1))
    return torch.where(used, rows, torch.zeros_like(rows))
