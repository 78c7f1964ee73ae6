"""Fixed-shape ``DynamicEdgeConv`` and ``GravNetConv``: the kNN graph they
build in ``forward`` comes from the fixed-shape :func:`~.knn.knn` (``k``
slots per node, empty slots -1, inert in message passing) instead of
``torch.ops.pyg.knn``, whose number of pairs depends on the data and
whose ``ptr`` input is read from the batch vector's values.

On every node they equal PyG's layers, also for nodes whose graph has
fewer than ``k`` nodes (PyG then finds fewer neighbours; the empty slots
add nothing).

Example::

    >>> conv = DynamicEdgeConv(torch.nn.Linear(4, 3), k=2)
    >>> conv(torch.randn(5, 2), torch.tensor([0, 0, 0, 1, 1])).shape
    torch.Size([5, 3])
    >>> GravNetConv(2, 3, 2, 4, k=2)(torch.randn(5, 2)).shape
    torch.Size([5, 3])
"""
from typing import Optional, Tuple, Union

import torch
import torch_geometric.nn
from torch import Tensor

from .knn import knn

__all__ = ["DynamicEdgeConv", "GravNetConv"]

Batches = Union[Optional[Tensor], Tuple[Optional[Tensor], Optional[Tensor]]]


def _pair(x: Union[Tensor, Tuple[Tensor, Tensor]], batch: Batches,
          layer: str) -> Tuple[Tuple[Tensor, Tensor],
                               Tuple[Optional[Tensor], Optional[Tensor]]]:
    """PyG's reading of the layers' inputs: one tensor or a (source,
    target) pair of each."""
    pair = (x, x) if isinstance(x, Tensor) else x
    if pair[0].dim() != 2:
        raise ValueError(f"Static graphs not supported in {layer}")
    if isinstance(batch, Tensor) or batch is None:
        return pair, (batch, batch)
    return pair, (batch[0], batch[1])


class DynamicEdgeConv(torch_geometric.nn.DynamicEdgeConv):
    """``torch_geometric.nn.DynamicEdgeConv`` on the fixed-shape kNN graph
    of its input features."""

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]],
                batch: Batches = None) -> Tensor:
        """EdgeConv over each node's ``k`` nearest nodes of its graph in
        feature space (itself included, as PyG)."""
        x, b = _pair(x, batch, "DynamicEdgeConv")
        edge_index = knn(x[0], x[1], self.k, b[0], b[1]).flip([0])
        return self.propagate(edge_index, x=x)


class GravNetConv(torch_geometric.nn.GravNetConv):
    """``torch_geometric.nn.GravNetConv`` on the fixed-shape kNN graph of
    its learned space."""

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]],
                batch: Batches = None) -> Tensor:
        """Aggregates ``lin_h`` features of each node's ``k`` nearest nodes
        in the ``lin_s`` space, weighted by ``exp(-10 d^2)``."""
        bipartite = not isinstance(x, Tensor)
        x, b = _pair(x, batch, "'GravNetConv'")
        h_l = self.lin_h(x[0])
        s_l = self.lin_s(x[0])
        s_r = self.lin_s(x[1]) if bipartite else s_l
        edge_index = knn(s_l, s_r, self.k, b[0], b[1]).flip([0])
        # An empty slot reads the last rows: finite, and its message goes
        # to the dropped sink.
        edge_weight = (s_l[edge_index[0]] - s_r[edge_index[1]]).pow(2).sum(-1)
        edge_weight = torch.exp(-10. * edge_weight)
        out = self.propagate(edge_index, x=(h_l, None),
                             edge_weight=edge_weight,
                             size=(s_l.size(0), s_r.size(0)))
        return self.lin_out1(x[1]) + self.lin_out2(out)
