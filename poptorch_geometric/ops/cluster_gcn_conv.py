"""Fixed-shape ``ClusterGCNConv``: self-loops are replaced by weighting
the existing ones 0 and appending one per node, and the diagonal boost is
added with a multiplication instead of boolean indexing. The result equals
PyG's for every node, looped or not.

Example::

    >>> conv = ClusterGCNConv(4, 2, diag_lambda=1.0)
    >>> edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 1, 1]])
    >>> conv(torch.randn(3, 4), edge_index).shape
    torch.Size([3, 2])
"""
import torch
import torch_geometric.nn
from torch import Tensor

from .empty_slots import scatter

__all__ = ["ClusterGCNConv"]

_PYG_FORWARD = torch_geometric.nn.ClusterGCNConv.forward


class ClusterGCNConv(torch_geometric.nn.ClusterGCNConv):
    """``torch_geometric.nn.ClusterGCNConv(in_channels, out_channels,
    diag_lambda=0., add_self_loops=True, bias=True, **kwargs)`` with a
    fixed-shape forward for edge-index tensors (sparse inputs take PyG's
    path)."""

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """PyG's ClusterGCN propagation with every edge slot kept."""
        if not isinstance(edge_index, Tensor) or edge_index.is_sparse:
            return _PYG_FORWARD(self, x, edge_index)
        num_nodes = x.size(self.node_dim)
        row, col = edge_index[0], edge_index[1]
        keep = torch.ones_like(row, dtype=x.dtype)
        if self.add_self_loops:
            keep = (row != col).to(x.dtype)
            loops = torch.arange(num_nodes, device=row.device,
                                 dtype=row.dtype)
            row, col = torch.cat([row, loops]), torch.cat([col, loops])
            keep = torch.cat([keep, keep.new_ones(num_nodes)])
        deg_inv = 1. / scatter(keep, col, 0, num_nodes,
                               reduce="sum").clamp(min=1.)
        is_loop = (row == col).to(x.dtype)
        edge_weight = keep * (deg_inv[col] +
                              is_loop * self.diag_lambda * deg_inv[row])
        out = self.propagate(torch.stack([row, col]), x=x,
                             edge_weight=edge_weight)
        return self.lin_out(out) + self.lin_root(x)
