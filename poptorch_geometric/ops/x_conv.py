"""Fixed-shape ``XConv``: its ``K * dilation`` nearest points per point
come from the fixed-shape :func:`~.knn.knn` instead of
``torch.ops.pyg.knn`` (a data-dependent number of pairs, and a ``ptr``
read from the batch vector's values), and the batch norms of its first
MLP, which see ``K`` rows per point, take their statistics over the rows
of real points.

PyG's XConv needs ``K * dilation`` points in every graph (it reshapes the
pairs to ``[N, K, ...]``); so does this one on the real graphs. A padding
graph with fewer points gets empty slots, which read the last row: its
outputs are finite and are not the real points' business.

Example::

    >>> conv = XConv(4, 3, dim=2, kernel_size=2)
    >>> pos, batch = torch.randn(6, 2), torch.tensor([0, 0, 0, 1, 1, 1])
    >>> conv(torch.randn(6, 4), pos, batch).shape
    torch.Size([6, 3])
"""
from typing import Optional

import torch
import torch_geometric.nn
from torch import Tensor

from .._padding_masks import real_rows, rows_within
from .knn import knn

__all__ = ["XConv"]


class XConv(torch_geometric.nn.XConv):
    """``torch_geometric.nn.XConv`` on the fixed-shape kNN graph of
    ``pos``."""

    def forward(self, x: Optional[Tensor], pos: Tensor,
                batch: Optional[Tensor] = None) -> Tensor:
        """PointCNN's X-transformation of each point's ``K`` nearest points
        (every ``dilation``-th of the ``K * dilation`` nearest)."""
        pos = pos.unsqueeze(-1) if pos.dim() == 1 else pos
        (N, D), K = pos.size(), self.kernel_size
        edge_index = knn(pos, pos, K * self.dilation, batch, batch)
        if self.dilation > 1:
            edge_index = edge_index[:, ::self.dilation]
        row, col = edge_index[0], edge_index[1]
        pos = pos[col] - pos[row]
        real = real_rows(self, N) if self.training else None
        with rows_within(None if real is None else
                         real.repeat_interleave(K)):
            x_star = self.mlp1(pos)
        if x is not None:
            x = x.unsqueeze(-1) if x.dim() == 1 else x
            x = x[col].view(N, K, self.in_channels)
            x_star = torch.cat([x_star, x], dim=-1)
        x_star = x_star.transpose(1, 2).contiguous()
        transform_matrix = self.mlp2(pos.view(N, K * D))
        x_transformed = torch.matmul(x_star, transform_matrix)
        return self.conv(x_transformed)
