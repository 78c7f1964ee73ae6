"""Fixed-shape ``GPSConv``: the global attention runs over all nodes of the
batch with an attention mask that keeps each node within its graph,
instead of a dense per-graph batch whose shape depends on the graph sizes.
Each node attends to the same nodes as in PyG, so the results are equal.

Example::

    >>> from torch_geometric.nn import GINConv
    >>> conv = GPSConv(4, GINConv(torch.nn.Linear(4, 4)), heads=2, norm=None)
    >>> x, batch = torch.randn(5, 4), torch.tensor([0, 0, 0, 1, 1])
    >>> edge_index = torch.tensor([[0, 1, 3], [1, 2, 4]])
    >>> torch.allclose(conv(x, edge_index, batch),
    ...                torch_geometric.nn.GPSConv.forward(
    ...                    conv, x, edge_index, batch), atol=1e-5)
    True
"""
from typing import Any, Optional

import torch
import torch.nn.functional as F
import torch_geometric.nn
from torch import Tensor

__all__ = ["GPSConv"]

_PYG_FORWARD = torch_geometric.nn.GPSConv.forward


def _norm(layer: Any, norm: Optional[torch.nn.Module], h: Tensor,
          batch: Optional[Tensor]) -> Tensor:
    if norm is None:
        return h
    return norm(h, batch=batch) if layer.norm_with_batch else norm(h)


class GPSConv(torch_geometric.nn.GPSConv):
    """``torch_geometric.nn.GPSConv`` whose multi-head attention keeps fixed
    shapes (the Performer attention takes PyG's path)."""

    def forward(self, x: Tensor, edge_index: Any,
                batch: Optional[Tensor] = None, **kwargs: Any) -> Tensor:
        """The local conv plus attention among the nodes of each graph."""
        if not isinstance(self.attn, torch.nn.MultiheadAttention):
            return _PYG_FORWARD(self, x, edge_index, batch, **kwargs)
        hs = []
        if self.conv is not None:
            h = self.conv(x, edge_index, **kwargs)
            h = F.dropout(h, p=self.dropout, training=self.training)
            hs.append(_norm(self, self.norm1, h + x, batch))
        mask = None
        if batch is not None:
            # True where attention is not allowed: nodes of other graphs.
            mask = batch.unsqueeze(1) != batch.unsqueeze(0)
        h, _ = self.attn(x.unsqueeze(0), x.unsqueeze(0), x.unsqueeze(0),
                         attn_mask=mask, need_weights=False)
        h = F.dropout(h[0], p=self.dropout, training=self.training)
        hs.append(_norm(self, self.norm2, h + x, batch))
        out = sum(hs)
        out = out + self.mlp(out)
        return _norm(self, self.norm3, out, batch)
