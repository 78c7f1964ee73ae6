"""Aggregation over a subset of the edges given as a mask, keeping every
edge slot: the fixed-shape form of ``propagate(edge_index[:, mask])``."""
import math

import torch
from torch import Tensor

from .empty_slots import scatter

__all__ = ["masked_aggregate"]


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
