"""Fixed-shape ``ChebConv``: the scaled Laplacian's diagonal is shifted by
subtracting 1 from the last ``num_nodes`` edges, the diagonal that
``get_laplacian`` appends, instead of an in-place update through a boolean
mask. Self-loops of the input keep their (zero) weight, so the result
equals PyG's for every node.

Example::

    >>> conv = torch_geometric.nn.ChebConv(4, 2, K=2)
    >>> x, edge_index = torch.randn(3, 4), torch.tensor([[0, 1], [1, 2]])
    >>> expected = conv(x, edge_index)
    >>> conv.__norm__ = ChebConv.__norm__.__get__(conv)
    >>> torch.allclose(conv(x, edge_index), expected, atol=1e-6)
    True
"""
from typing import Optional, Tuple

import torch
import torch_geometric.nn
from torch import Tensor
from torch_geometric.utils import get_laplacian

__all__ = ["ChebConv"]


class ChebConv(torch_geometric.nn.ChebConv):
    """``torch_geometric.nn.ChebConv`` whose normalisation keeps fixed
    shapes. ``lambda_max`` per graph (a tensor with ``batch``) works as in
    PyG."""

    def __norm__(self, edge_index: Tensor, num_nodes: Optional[int],
                 edge_weight: Optional[Tensor],
                 normalization: Optional[str],
                 lambda_max: Optional[Tensor] = None,
                 dtype: Optional[torch.dtype] = None,
                 batch: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        edge_index, edge_weight = get_laplacian(edge_index, edge_weight,
                                                normalization, dtype,
                                                num_nodes)
        if lambda_max is None:
            lambda_max = 2.0 * edge_weight.max()
        elif not isinstance(lambda_max, Tensor):
            lambda_max = torch.tensor(lambda_max, dtype=dtype,
                                      device=edge_index.device)
        if batch is not None and lambda_max.numel() > 1:
            lambda_max = lambda_max[batch[edge_index[0]]]
        edge_weight = (2.0 * edge_weight) / lambda_max
        edge_weight = edge_weight.masked_fill(edge_weight == float("inf"), 0)
        position = torch.arange(edge_weight.size(0), device=edge_index.device)
        diagonal = position >= edge_weight.size(0) - num_nodes
        return edge_index, edge_weight - diagonal.to(edge_weight.dtype)
