"""``torch_scatter``'s scatter functions in plain PyTorch, with the same
signatures and results: what the override substitutes for the optional
``torch_scatter`` package (``pip install .[scatter]``) while a model is
traced, since its compiled kernels do not trace. Give the output size
(``dim_size`` or ``out``): without it the size is read from ``index``'s
values, as torch_scatter does, which a traced model may not do.

Example::

    >>> src = torch.tensor([1., 5., 2., 4.])
    >>> index = torch.tensor([0, 0, 2, 2])
    >>> scatter_max(src, index, dim_size=3)
    (tensor([5., 0., 4.]), tensor([1, 4, 3]))
    >>> scatter(src, index, dim_size=3, reduce="mean")
    tensor([3., 0., 3.])
"""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

__all__ = ["scatter", "scatter_sum", "scatter_add", "scatter_mul",
           "scatter_mean", "scatter_min", "scatter_max", "scatter_std",
           "scatter_logsumexp", "scatter_softmax", "scatter_log_softmax",
           "segment_csr"]


def _broadcast(index: Tensor, src: Tensor, dim: int) -> Tensor:
    """torch_scatter's rule: a lower-dimensional index lines up with
    ``src`` from ``dim`` on and is expanded over the other dimensions."""
    dim = dim + src.dim() if dim < 0 else dim
    if index.dim() == 1:
        index = index.view((1, ) * dim + (-1, ) +
                           (1, ) * (src.dim() - dim - 1))
    while index.dim() < src.dim():
        index = index.unsqueeze(-1)
    return index.expand_as(src)


def _size(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor],
          dim_size: Optional[int]) -> list:
    if out is not None:
        return list(out.shape)
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() else 0
    size = list(src.shape)
    size[dim] = dim_size
    return size


def _reduce(src: Tensor, index: Tensor, dim: int,
            out: Optional[Tensor], dim_size: Optional[int], how: str,
            include_self: bool = True) -> Tensor:
    index = _broadcast(index, src, dim).long()
    base = out if out is not None else src.new_zeros(
        _size(src, index, dim, out, dim_size))
    if how == "prod" and out is None:
        base = base + 1
    return base.scatter_reduce(dim, index, src, how,
                               include_self=include_self)


def scatter_sum(src: Tensor, index: Tensor, dim: int = -1,
                out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Sums ``src`` into the slots given by ``index`` along ``dim``."""
    return _reduce(src, index, dim, out, dim_size, "sum")


scatter_add = scatter_sum


def scatter_mul(src: Tensor, index: Tensor, dim: int = -1,
                out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Multiplies ``src`` into the slots (empty slots are 1)."""
    return _reduce(src, index, dim, out, dim_size, "prod")


def scatter_mean(src: Tensor, index: Tensor, dim: int = -1,
                 out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None) -> Tensor:
    """The mean of the entries of each slot (empty slots are 0)."""
    total = scatter_sum(src, index, dim, out, dim_size)
    dim = dim + src.dim() if dim < 0 else dim
    ones = torch.ones(index.shape, dtype=src.dtype, device=src.device)
    count = scatter_sum(ones, index, min(dim, index.dim() - 1), None,
                        total.size(dim)).clamp(min=1)
    count = _broadcast(count, total, dim)
    if total.is_floating_point():
        return total / count
    return torch.div(total, count, rounding_mode="floor")


def _arg(src: Tensor, index: Tensor, dim: int, best: Tensor) -> Tensor:
    """torch_scatter's arg rule: the first position holding the slot's
    value; ``src.size(dim)`` for empty slots."""
    dim = dim + src.dim() if dim < 0 else dim
    full = _broadcast(index, src, dim).long()
    hit = src == best.gather(dim, full)
    position = torch.arange(src.size(dim), device=src.device).view(
        (1, ) * dim + (-1, ) + (1, ) * (src.dim() - dim - 1)).expand_as(src)
    position = torch.where(hit, position, src.size(dim))
    arg = torch.full(best.shape, src.size(dim), dtype=torch.long,
                     device=src.device)
    return arg.scatter_reduce(dim, full, position, "amin", include_self=True)


def _extreme(how: str, src: Tensor, index: Tensor, dim: int,
             out: Optional[Tensor], dim_size: Optional[int]
             ) -> Tuple[Tensor, Tensor]:
    best = _reduce(src, index, dim, out, dim_size, how,
                   include_self=out is not None)
    return best, _arg(src, index, dim, best)


def scatter_max(src: Tensor, index: Tensor, dim: int = -1,
                out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """``(max, argmax)`` of each slot (empty slots: 0 and
    ``src.size(dim)``)."""
    return _extreme("amax", src, index, dim, out, dim_size)


def scatter_min(src: Tensor, index: Tensor, dim: int = -1,
                out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """``(min, argmin)`` of each slot (empty slots: 0 and
    ``src.size(dim)``)."""
    return _extreme("amin", src, index, dim, out, dim_size)


def scatter(src: Tensor, index: Tensor, dim: int = -1,
            out: Optional[Tensor] = None, dim_size: Optional[int] = None,
            reduce: str = "sum") -> Tensor:
    """``torch_scatter.scatter``: reduce is sum/add, mul, mean, min or
    max."""
    if reduce in ("sum", "add"):
        return scatter_sum(src, index, dim, out, dim_size)
    if reduce == "mul":
        return scatter_mul(src, index, dim, out, dim_size)
    if reduce == "mean":
        return scatter_mean(src, index, dim, out, dim_size)
    if reduce == "min":
        return scatter_min(src, index, dim, out, dim_size)[0]
    if reduce == "max":
        return scatter_max(src, index, dim, out, dim_size)[0]
    raise ValueError(f"reduce must be sum, add, mul, mean, min or max, got "
                     f"{reduce!r}.")


def scatter_std(src: Tensor, index: Tensor, dim: int = -1,
                out: Optional[Tensor] = None, dim_size: Optional[int] = None,
                unbiased: bool = True) -> Tensor:
    """The standard deviation of each slot, as ``torch_scatter``."""
    dim = dim + src.dim() if dim < 0 else dim
    ones = torch.ones_like(src)
    count = scatter_sum(ones, index, dim, None, dim_size if out is None
                        else out.size(dim))
    mean = scatter_sum(src, index, dim, None, count.size(dim)) / \
        count.clamp(min=1)
    centred = src - mean.gather(dim, _broadcast(index, src, dim).long())
    total = scatter_sum(centred * centred, index, dim, out, count.size(dim))
    if unbiased:
        count = (count - 1).clamp(min=1)
    return (total / (count + 1e-6)).sqrt()


def scatter_logsumexp(src: Tensor, index: Tensor, dim: int = -1,
                      out: Optional[Tensor] = None,
                      dim_size: Optional[int] = None,
                      eps: float = 1e-12) -> Tensor:
    """``log(sum(exp(src)))`` of each slot, computed stably (empty slots:
    0). ``out`` is not supported while tracing: give ``dim_size``."""
    if out is not None:
        raise ValueError("scatter_logsumexp(out=...) is not supported while "
                         "a model is traced for the IPU: pass dim_size and "
                         "combine the result with out yourself.")
    full = _broadcast(index, src, dim).long()
    size = _size(src, index, dim, None, dim_size)
    # Empty slots keep -inf, so their result is log(eps) - inf -> 0 below.
    best = torch.full(size, -math.inf, dtype=src.dtype, device=src.device)
    best = best.scatter_reduce(dim, full, src, "amax", include_self=True)
    shifted = (src - best.gather(dim, full)).nan_to_num(nan=-math.inf)
    total = scatter_sum(shifted.exp(), index, dim, None, size[dim])
    return ((total + eps).log() + best).nan_to_num(neginf=0.0)


def scatter_softmax(src: Tensor, index: Tensor, dim: int = -1,
                    dim_size: Optional[int] = None) -> Tensor:
    """The softmax of the entries of each slot, in ``src``'s shape."""
    best = scatter_max(src, index, dim, None, dim_size)[0]
    full = _broadcast(index, src, dim).long()
    exp = (src - best.gather(dim, full)).exp()
    total = scatter_sum(exp, index, dim, None, best.size(dim))
    return exp / total.gather(dim, full)


def scatter_log_softmax(src: Tensor, index: Tensor, dim: int = -1,
                        eps: float = 1e-12,
                        dim_size: Optional[int] = None) -> Tensor:
    """The log-softmax of the entries of each slot, in ``src``'s shape."""
    best = scatter_max(src, index, dim, None, dim_size)[0]
    full = _broadcast(index, src, dim).long()
    shifted = src - best.gather(dim, full)
    total = scatter_sum(shifted.exp(), index, dim, None, best.size(dim))
    return shifted - (total + eps).log().gather(dim, full)


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None,
                reduce: str = "sum") -> Tensor:
    """Reduces the segments ``src[indptr[i]:indptr[i + 1]]`` along the
    dimension of ``indptr`` (1-D ``indptr`` only)."""
    if indptr.dim() != 1:
        raise ValueError("segment_csr while tracing supports a 1-D indptr "
                         f"only, got shape {tuple(indptr.shape)}.")
    segments = indptr.size(0) - 1
    position = torch.arange(src.size(0), device=src.device)
    # Entries outside every segment go to a spare slot, dropped below.
    owner = torch.searchsorted(indptr, position, right=True) - 1
    owner = torch.where((position >= indptr[-1]) | (owner < 0), segments,
                        owner)
    result = scatter(src, owner, 0, None, segments + 1, reduce)[:segments]
    return result if out is None else out.copy_(result)
