"""Fixed-shape ``RGCNConv`` and ``FiLMConv``: each relation aggregates over
all edge slots with the other relations' edges masked out, instead of
selecting that relation's edges (a data-dependent shape).

Example::

    >>> conv = torch_geometric.nn.RGCNConv(4, 2, num_relations=2)
    >>> edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    >>> edge_type = torch.tensor([0, 1, 1])
    >>> x = torch.randn(3, 4)
    >>> torch.allclose(RGCNConv.forward(conv, x, edge_index, edge_type),
    ...                conv(x, edge_index, edge_type), atol=1e-6)
    True
"""
from typing import Optional, Tuple, Union

import torch
import torch_geometric.nn
from torch import Tensor

from ._masked import masked_aggregate
from .empty_slots import index_select

__all__ = ["RGCNConv", "FiLMConv"]

_PYG_RGCN_FORWARD = torch_geometric.nn.RGCNConv.forward
_PYG_FILM_FORWARD = torch_geometric.nn.FiLMConv.forward


def _ends(layer: torch.nn.Module, edge_index: Tensor) -> Tuple[Tensor,
                                                                Tensor]:
    """(source, target) node of each edge for the layer's flow."""
    if layer.flow == "source_to_target":
        return edge_index[0], edge_index[1]
    return edge_index[1], edge_index[0]


class RGCNConv(torch_geometric.nn.RGCNConv):
    """``torch_geometric.nn.RGCNConv`` with a fixed-shape forward for float
    features and edge-index tensors (other inputs take PyG's path)."""

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]],
                edge_index: Tensor, edge_type: Optional[Tensor] = None):
        """The sum over relations of each relation's aggregation times its
        weight, plus the root term."""
        x_l, x_r = x if isinstance(x, tuple) else (x, x)
        if not isinstance(edge_index, Tensor) or edge_type is None or \
                x_l is None or not torch.is_floating_point(x_l):
            return _PYG_RGCN_FORWARD(self, x, edge_index, edge_type)
        weight = self.weight
        if self.num_bases is not None:
            weight = (self.comp @ weight.view(self.num_bases, -1)).view(
                self.num_relations, self.in_channels_l, self.out_channels)
        source, target = _ends(self, edge_index)
        messages = index_select(x_l, 0, source)
        out = x_r.new_zeros(x_r.size(0), self.out_channels)
        for i in range(self.num_relations):
            h = masked_aggregate(messages, target, edge_type == i,
                                 x_r.size(0), self.aggr)
            if self.num_blocks is not None:
                h = h.view(-1, weight.size(1), weight.size(2))
                h = torch.einsum("abc,bcd->abd", h, weight[i])
                out = out + h.contiguous().view(-1, self.out_channels)
            else:
                out = out + h @ weight[i]
        if self.root is not None:
            out = out + x_r @ self.root
        if self.bias is not None:
            out = out + self.bias
        return out


class FiLMConv(torch_geometric.nn.FiLMConv):
    """``torch_geometric.nn.FiLMConv`` with a fixed-shape forward for
    several relations and edge-index tensors."""

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]],
                edge_index: Tensor,
                edge_type: Optional[Tensor] = None) -> Tensor:
        """The FiLM skip term plus each relation's modulated aggregation."""
        if self.num_relations <= 1 or edge_type is None or \
                not isinstance(edge_index, Tensor):
            return _PYG_FILM_FORWARD(self, x, edge_index, edge_type)
        if isinstance(x, Tensor):
            x = (x, x)
        beta, gamma = self.film_skip(x[1]).split(self.out_channels, dim=-1)
        out = gamma * self.lin_skip(x[1]) + beta
        if self.act is not None:
            out = self.act(out)
        source, target = _ends(self, edge_index)
        for i, (lin, film) in enumerate(zip(self.lins, self.films)):
            beta, gamma = film(x[1]).split(self.out_channels, dim=-1)
            messages = index_select(gamma, 0, target) * \
                index_select(lin(x[0]), 0, source) + \
                index_select(beta, 0, target)
            if self.act is not None:
                messages = self.act(messages)
            out = out + masked_aggregate(messages, target, edge_type == i,
                                         x[1].size(0), self.aggr)
        return out
