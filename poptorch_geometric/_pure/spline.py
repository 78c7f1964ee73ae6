"""SplineCNN's B-spline basis and weighting in plain PyTorch, for PyG's
``SplineConv`` where pyg-lib does not provide ``spline_basis`` and
``spline_weighting``.

Semantics of ``torch_spline_conv`` (whose kernels pyg-lib took over): a
pseudo-coordinate ``u`` in dimension ``d`` is scaled to ``v = u *
(kernel_size[d] - degree * is_open_spline[d])``; the ``degree + 1``
B-spline pieces that are non-zero at ``v`` belong to the kernel weights
``(floor(v) + k) % kernel_size[d]`` for ``k = 0 .. degree`` and weigh
``N(frac(v) + degree - k)``, ``N`` being the uniform B-spline of that
degree. Over ``D`` dimensions an edge has ``(degree + 1) ** D``
combinations, ``k`` of dimension 0 varying fastest; each one's basis value
is the product over the dimensions and its weight index is
``sum_d index_d * prod(kernel_size[:d])``.

Pseudo-coordinates belong in ``[0, 1]`` (PyG's documentation). Outside,
the indices wrap around (``torch_spline_conv`` reads out of bounds there
for negative values); the kernels stay defined and traceable: every shape
depends on the input shapes only, so ``SplineConv`` also runs in traced
models.

Example::

    >>> basis, index = spline_basis(torch.tensor([[0.25]]),
    ...                             torch.tensor([3]),
    ...                             torch.tensor([1], dtype=torch.uint8), 1)
    >>> basis, index
    (tensor([[0.5000, 0.5000]]), tensor([[0, 1]]))
    >>> weight = torch.arange(3.).view(3, 1, 1)   # kernel weights 0, 1, 2
    >>> spline_weighting(torch.ones(1, 1), weight, basis, index)
    tensor([[0.5000]])
"""
from typing import Tuple

import torch
from torch import Tensor

__all__ = ["spline_basis", "spline_weighting"]


def _pieces(v: Tensor, k: Tensor, degree: int) -> Tensor:
    """``N(v + degree - k)`` for ``v`` in ``[0, 1)``: the piece ``k`` of the
    uniform B-spline of ``degree`` (torch_spline_conv's formulas)."""
    if degree == 1:
        return torch.where(k == 0, 1 - v, v)
    if degree == 2:
        return torch.where(k == 0, 0.5 * (1 - v) ** 2,
                           torch.where(k == 1, -v * v + v + 0.5,
                                       0.5 * v * v))
    return torch.where(
        k == 0, (1 - v) ** 3 / 6,
        torch.where(k == 1, (3 * v ** 3 - 6 * v * v + 4) / 6,
                    torch.where(k == 2,
                                (-3 * v ** 3 + 3 * v * v + 3 * v + 1) / 6,
                                v ** 3 / 6)))


def spline_basis(pseudo: Tensor, kernel_size: Tensor,
                 is_open_spline: Tensor, degree: int
                 ) -> Tuple[Tensor, Tensor]:
    """The basis values and kernel weight indices of every edge, both
    ``[E, (degree + 1) ** D]``, for pseudo-coordinates ``[E, D]`` (a 1-D
    ``pseudo`` is one dimension). ``degree`` is 1, 2 or 3."""
    if degree not in (1, 2, 3):
        raise ValueError(f"spline_basis: degree must be 1, 2 or 3, got "
                         f"{degree!r}.")
    pseudo = pseudo.unsqueeze(-1) if pseudo.dim() == 1 else pseudo
    dims = pseudo.size(1)
    if kernel_size.numel() != dims or is_open_spline.numel() != dims:
        raise ValueError(
            f"spline_basis: pseudo has {dims} dimensions but kernel_size "
            f"and is_open_spline have {kernel_size.numel()} and "
            f"{is_open_spline.numel()} entries: give one per dimension.")
    device = pseudo.device
    kernel_size = kernel_size.to(device, torch.long)
    combos = (degree + 1) ** dims
    # k[s, d]: digit d of s in base degree + 1, dimension 0 the fastest
    # (made from Python ints: a constant of a traced graph).
    k = torch.tensor([[s // (degree + 1) ** d % (degree + 1)
                       for d in range(dims)] for s in range(combos)],
                     dtype=torch.long, device=device).view(combos, dims)
    scale = kernel_size - degree * is_open_spline.to(device, torch.long)
    v = pseudo * scale.to(pseudo.dtype)
    start = torch.floor(v)
    index = (start.long().unsqueeze(1) + k) % kernel_size        # [E, S, D]
    stride = torch.cumprod(torch.cat([kernel_size.new_ones(1),
                                      kernel_size[:-1]]), 0)
    weight_index = (index * stride).sum(-1)
    basis = _pieces((v - start).unsqueeze(1), k, degree).prod(-1)
    return basis, weight_index


def spline_weighting(x: Tensor, weight: Tensor, basis: Tensor,
                     weight_index: Tensor) -> Tensor:
    """``out[e] = sum_s basis[e, s] * x[e] @ weight[weight_index[e, s]]``:
    ``[E, out_channels]`` for ``x`` ``[E, in]`` and ``weight`` ``[K, in,
    out]``. Every kernel weight is applied to every edge once, then each
    edge's own are picked (a gather of weights per edge would take
    ``in x out`` values per combination)."""
    edges, combos = basis.shape
    kernels, channels_in, channels_out = weight.shape
    per_kernel = (x @ weight.transpose(0, 1).reshape(
        channels_in, kernels * channels_out)).view(edges, kernels,
                                                   channels_out)
    picked = per_kernel.gather(1, weight_index.unsqueeze(-1).expand(
        edges, combos, channels_out))
    return (basis.unsqueeze(-1).to(picked.dtype) * picked).sum(1)
