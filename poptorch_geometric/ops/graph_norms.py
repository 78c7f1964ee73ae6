"""PyG's graph-wise norms for fixed-size batches: ``LayerNorm`` (graph
mode), ``GraphNorm``, ``PairNorm``, ``MeanSubtractionNorm`` and
``GraphSizeNorm``.

Each normalises every graph of a batch by that graph's statistics when it
gets the ``batch`` vector, and the whole input as one graph without it (as
inside an MLP). While a model that receives a fixed-size batch is traced:

- without ``batch``, the statistics are those of the real nodes only (the
  batch's mask with as many entries as the input has rows), so the real
  rows equal eager PyG on the unpadded batch; padding rows stay finite;
- with the batch's own ``batch`` vector and no ``batch_size`` (or
  ``dim_size``), the size is the batch's number of graph slots instead of
  a value read from the tensor (which a traced model may not do). Padding
  graphs are separate graphs, so the real graphs' statistics are exact.

Otherwise each forward is PyG's.

Example::

    >>> from torch_geometric.nn import GraphNorm as PyGGraphNorm
    >>> norm = PyGGraphNorm(1)
    >>> x = torch.tensor([[1.], [3.]])
    >>> GraphNorm.forward(norm, x)      # not traced: PyG's forward
    tensor([[-1.0000],
            [ 1.0000]], grad_fn=<AddBackward0>)
"""
from typing import Optional

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor

from .._padding_masks import graph_slots, real_rows
from ._masked import masked_mean

__all__ = ["LayerNorm", "GraphNorm", "PairNorm", "MeanSubtractionNorm",
           "GraphSizeNorm"]

_PYG = {cls: cls.forward for cls in (
    pyg_nn.LayerNorm, pyg_nn.GraphNorm, pyg_nn.PairNorm,
    pyg_nn.MeanSubtractionNorm, pyg_nn.GraphSizeNorm)}


def _real_nodes(layer: torch.nn.Module, x: Tensor,
                batch: Optional[Tensor]) -> Optional[Tensor]:
    """The real rows of ``x`` when ``layer`` treats it as one graph."""
    return real_rows(layer, x.shape[0]) if batch is None else None


def _size(batch: Optional[Tensor], size: Optional[int]) -> Optional[int]:
    return size if size is not None else graph_slots(batch)


class LayerNorm(pyg_nn.LayerNorm):
    """``torch_geometric.nn.LayerNorm``; in ``mode="graph"`` over the real
    nodes of a traced fixed-size batch (``mode="node"`` is per node)."""

    def forward(self, x: Tensor, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None) -> Tensor:
        """Normalises each graph over its nodes and channels."""
        real = _real_nodes(self, x, batch) if self.mode == "graph" else None
        if real is None:
            return _PYG[pyg_nn.LayerNorm](self, x, batch,
                                          _size(batch, batch_size))
        dims = list(range(x.dim()))
        mean, _ = masked_mean(x, real, dims)
        x = x - mean
        var, _ = masked_mean(x * x, real, dims)
        out = x / (var.sqrt() + self.eps)
        if self.weight is not None and self.bias is not None:
            out = out * self.weight + self.bias
        return out


class GraphNorm(pyg_nn.GraphNorm):
    """``torch_geometric.nn.GraphNorm`` over the real nodes of a traced
    fixed-size batch."""

    def forward(self, x: Tensor, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None) -> Tensor:
        """Normalises each graph's nodes per channel."""
        real = _real_nodes(self, x, batch)
        if real is None:
            return _PYG[pyg_nn.GraphNorm](self, x, batch,
                                          _size(batch, batch_size))
        mean, _ = masked_mean(x, real, [0])
        out = x - mean * self.mean_scale
        var, _ = masked_mean(out * out, real, [0])
        return self.weight * out / (var + self.eps).sqrt() + self.bias


class PairNorm(pyg_nn.PairNorm):
    """``torch_geometric.nn.PairNorm`` over the real nodes of a traced
    fixed-size batch."""

    def forward(self, x: Tensor, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None) -> Tensor:
        """Centres each graph's nodes and rescales them."""
        real = _real_nodes(self, x, batch)
        if real is None:
            return _PYG[pyg_nn.PairNorm](self, x, batch,
                                         _size(batch, batch_size))
        mean, _ = masked_mean(x, real, [0])
        x = x - mean
        if self.scale_individually:
            return self.scale * x / (self.eps + x.norm(2, -1, keepdim=True))
        square, _ = masked_mean(x.pow(2).sum(-1, keepdim=True), real, [0])
        return self.scale * x / (self.eps + square).sqrt()


class MeanSubtractionNorm(pyg_nn.MeanSubtractionNorm):
    """``torch_geometric.nn.MeanSubtractionNorm`` over the real nodes of a
    traced fixed-size batch."""

    def forward(self, x: Tensor, batch: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
        """Subtracts each graph's mean."""
        real = _real_nodes(self, x, batch)
        if real is None:
            return _PYG[pyg_nn.MeanSubtractionNorm](self, x, batch,
                                                    _size(batch, dim_size))
        mean, _ = masked_mean(x, real, [0])
        return x - mean


class GraphSizeNorm(pyg_nn.GraphSizeNorm):
    """``torch_geometric.nn.GraphSizeNorm``: divides by the square root of
    the number of real nodes of a traced fixed-size batch."""

    def forward(self, x: Tensor, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None) -> Tensor:
        """Scales each graph's nodes by its size to the power -1/2."""
        real = _real_nodes(self, x, batch)
        if real is None:
            return _PYG[pyg_nn.GraphSizeNorm](self, x, batch,
                                              _size(batch, batch_size))
        count = real.sum().to(x.dtype).clamp(min=1)
        return x * count.pow(-0.5)
