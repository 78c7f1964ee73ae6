"""``MeshCNNConv`` without in-place writes to strided slices (an IPU rule):
the four kernels' results are interleaved with one ``stack``.

Example::

    >>> conv = torch_geometric.nn.MeshCNNConv(3, 2)
    >>> x_j = torch.randn(8, 3)
    >>> torch.allclose(MeshCNNConv.message(conv, x_j), conv.message(x_j))
    True
"""
import torch
import torch_geometric.nn
from torch import Tensor

__all__ = ["MeshCNNConv"]


class MeshCNNConv(torch_geometric.nn.MeshCNNConv):
    """``torch_geometric.nn.MeshCNNConv`` whose messages keep fixed shapes
    and need no strided in-place update."""

    def message(self, x_j: Tensor) -> Tensor:
        """For each edge, its neighbours ``a, b, c, d`` (rows ``4i`` to
        ``4i + 3`` of ``x_j``) give the four messages ``k1(|a - c|)``,
        ``k2(a + c)``, ``k3(|b - d|)`` and ``k4(b + d)``, in that order."""
        a, b, c, d = (x_j[i::4] for i in range(4))
        messages = torch.stack([
            self.kernels[1](torch.abs(a - c)), self.kernels[2](a + c),
            self.kernels[3](torch.abs(b - d)), self.kernels[4](b + d)],
            dim=1)
        return messages.reshape(x_j.size(0), self.out_channels)
