"""Reductions over the entries a mask selects, keeping every slot:
aggregation over a subset of the edges (the fixed-shape form of
``propagate(edge_index[:, mask])``) and means over the real rows of a
padded tensor (the statistics of padding-aware norms)."""
import math
from typing import Sequence, Tuple

import torch
from torch import Tensor

from .empty_slots import scatter

__all__ = ["masked_aggregate", "masked_mean"]


def masked_mean(x: Tensor, rows: Tensor, dims: Sequence[int]
                ) -> Tuple[Tensor, Tensor]:
    """The mean of ``x`` over ``dims`` (dim 0 among them) counting only the
    rows where the boolean ``rows`` is True, with the reduced dims kept,
    and the number of entries counted. With no row selected the mean is 0.
    Unselected rows never reach the result, even when they hold inf or nan.

    Example::

        >>> x = torch.tensor([[1., 2.], [3., 4.], [100., 100.]])
        >>> masked_mean(x, torch.tensor([True, True, False]), [0])
        (tensor([[2., 3.]]), tensor(2.))
    """
    selected = rows.view((-1, ) + (1, ) * (x.dim() - 1))
    total = torch.where(selected, x, torch.zeros_like(x)).sum(
        tuple(dims), keepdim=True)
    per_row = math.prod(x.shape[d] for d in dims if d % x.dim() != 0)
    count = rows.sum().to(x.dtype) * per_row
    return total / count.clamp(min=1), count


def masked_aggregate(src: Tensor, index: Tensor, mask: Tensor,
                     dim_size: int, reduce: str) -> Tensor:
    """``scatter(src[mask], index[mask], 0, dim_size, reduce)`` for
    ``reduce`` in sum/add, mean, max and min, without boolean indexing;
    groups with no selected entry get 0, as PyG."""
    mask = mask.view((-1, ) + (1, ) * (src.dim() - 1))
    if reduce in ("sum", "add", "mean"):
        total = scatter(torch.where(mask, src, torch.zeros_like(src)), index,
                        0, dim_size, reduce="sum")
        if reduce != "mean":
            return total
        count = scatter(mask.to(src.dtype).expand_as(src), index, 0,
                        dim_size, reduce="sum")
        return total / count.clamp(min=1)
    if reduce in ("max", "min"):
        fill = -math.inf if reduce == "max" else math.inf
        picked = scatter(torch.where(mask, src, torch.full_like(src, fill)),
                         index, 0, dim_size, reduce=reduce)
        return torch.where(picked.isinf(), torch.zeros_like(picked), picked)
    raise ValueError(f"Aggregation {reduce!r} over a subset of edges is not "
                     "supported for fixed shapes: use 'sum', 'mean', 'max' "
                     "or 'min'.")
