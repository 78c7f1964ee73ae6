"""Fixed-shape ``HeteroLinear``: one matrix product per type, selected
with ``torch.where``, instead of sorting rows by type and slicing segments
(data-dependent).

Example::

    >>> lin = HeteroLinear(3, 2, num_types=2)
    >>> x, types = torch.randn(4, 3), torch.tensor([1, 0, 1, 0])
    >>> expected = torch.stack([x[i] @ lin.weight[t] + lin.bias[t]
    ...                         for i, t in enumerate(types)])
    >>> torch.allclose(lin(x, types), expected, atol=1e-6)
    True
"""
import torch
import torch_geometric.nn
from torch import Tensor

__all__ = ["HeteroLinear"]


class HeteroLinear(torch_geometric.nn.HeteroLinear):
    """``torch_geometric.nn.HeteroLinear`` (same constructor and weight
    layout ``[num_types, in, out]``) whose forward has no data-dependent
    shape. Rows whose type is outside ``range(num_types)`` get zeros before
    the bias."""

    def forward(self, x: Tensor, type_vec: Tensor) -> Tensor:
        """Row ``i`` times the weight of type ``type_vec[i]``, plus its
        bias."""
        out = x.new_zeros(x.size(0), self.out_channels)
        for i in range(self.num_types):
            mask = (type_vec == i).unsqueeze(-1)
            out = torch.where(mask, x @ self.weight[i], out)
        if self.bias is not None:
            out = out + self.bias[type_vec]
        return out
