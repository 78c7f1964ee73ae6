"""Fixed-shape ``MFConv``: each node's degree picks its weights with
``torch.where`` instead of gathering the nodes of each degree
(``nonzero``, a data-dependent shape).

Example::

    >>> conv = MFConv(4, 2, max_degree=2)
    >>> edge_index = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    >>> conv(torch.randn(3, 4), edge_index).shape
    torch.Size([3, 2])
"""
from typing import Optional, Tuple, Union

import torch
import torch_geometric.nn
from torch import Tensor

from .empty_slots import degree

__all__ = ["MFConv"]

_PYG_FORWARD = torch_geometric.nn.MFConv.forward


class MFConv(torch_geometric.nn.MFConv):
    """``torch_geometric.nn.MFConv`` with a fixed-shape forward (edge-index
    tensors; a ``SparseTensor`` takes PyG's path)."""

    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]],
                edge_index: Tensor,
                size: Optional[Tuple[int, int]] = None) -> Tensor:
        """Sums the neighbours, then applies the weights of each node's
        degree."""
        if not isinstance(edge_index, Tensor):
            return _PYG_FORWARD(self, x, edge_index, size)
        if isinstance(x, Tensor):
            x = (x, x)
        x_r = x[1]
        target = 1 if self.flow == "source_to_target" else 0
        num_nodes = x[0].size(self.node_dim)
        num_nodes = size[1] if size is not None else num_nodes
        num_nodes = x_r.size(self.node_dim) if x_r is not None else num_nodes
        deg = degree(edge_index[target], num_nodes, dtype=torch.long)
        deg = deg.clamp(max=self.max_degree).unsqueeze(-1)
        h = self.propagate(edge_index, x=x, size=size)
        out = h.new_zeros(list(h.size())[:-1] + [self.out_channels])
        for i, (lin_l, lin_r) in enumerate(zip(self.lins_l, self.lins_r)):
            r = lin_l(h)
            if x_r is not None:
                r = r + lin_r(x_r)
            out = torch.where(deg == i, r, out)
        return out
