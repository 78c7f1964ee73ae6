"""Implicit casting of mixed float16 / float32 operands, as on the IPU.

PopTorch lets float16 and float32 tensors meet in one op. Elementwise ops
follow PyTorch's type promotion (float16 with float32 gives float32), which
torch already does on the host. Ops that torch's CPU kernels refuse to mix
are cast here, the way the IPU computes them:

- matrix products and convolutions (``linear``, ``matmul``, ``mm``,
  ``bmm``, ``addmm``, ``conv*``, ...) run in the dtype of their input
  activation: the weights are cast to it, so ``model.half()`` fed float32
  inputs computes in float32, and a float32 ``Linear`` fed float16 inputs
  returns float16 (PopTorch's documented behaviour);
- normalisations (``batch_norm``, ``layer_norm``, ``group_norm``,
  ``instance_norm``) of a float32 input with float16 parameters cast the
  parameters up; float16 running statistics are updated through the cast;
- in-place index updates (``index_add_``, ``scatter_add_``,
  ``index_put_``, ...) cast their source to the updated tensor's dtype.

This is PopTorch 3.4's behaviour; ``opts.Precision.halfFloatCasting`` is
deprecated there and does not change it.

Example::

    >>> model = torch.nn.Linear(3, 2).half()
    >>> out = poptorch.inferenceModel(model)(torch.randn(4, 3))
    >>> out.dtype
    torch.float32
"""
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

_HALVES = (torch.float16, torch.float32)

# Products: the operand whose dtype the others take.
_PRODUCTS: Dict[Callable, int] = {
    fn: 0 for fn in (
        F.linear, F.bilinear, torch.matmul, torch.Tensor.matmul,
        torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm, torch.bmm,
        torch.Tensor.bmm, torch.mv, torch.Tensor.mv, torch.dot,
        torch.Tensor.dot, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d,
        F.conv_transpose2d, F.conv_transpose3d)}
_PRODUCTS.update({fn: 1 for fn in (torch.addmm, torch.Tensor.addmm,
                                   torch.baddbmm, torch.Tensor.baddbmm,
                                   torch.addmv, torch.Tensor.addmv)})

# Normalisations: (argument names, the running statistics among them).
_NORMS: Dict[Callable, Tuple[Sequence[str], Sequence[str]]] = {
    F.batch_norm: (("input", "running_mean", "running_var", "weight",
                    "bias"), ("running_mean", "running_var")),
    F.instance_norm: (("input", "running_mean", "running_var", "weight",
                       "bias"), ("running_mean", "running_var")),
    F.layer_norm: (("input", "normalized_shape", "weight", "bias"), ()),
    F.group_norm: (("input", "num_groups", "weight", "bias"), ()),
}

_INDEX_UPDATES = {
    getattr(owner, name) for owner in (torch, torch.Tensor)
    for name in ("index_add", "index_add_", "scatter_add", "scatter_add_",
                 "scatter", "scatter_", "index_put", "index_put_",
                 "index_copy", "index_copy_", "masked_scatter",
                 "masked_scatter_", "scatter_reduce", "scatter_reduce_")
    if hasattr(owner, name)}


def _is_half_or_float(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in _HALVES


def _cast_others(args: Sequence[Any], kwargs: Dict[str, Any],
                 dtype: torch.dtype, keep: int) -> Tuple[tuple, dict]:
    def cast(value, position=None):
        if position != keep and _is_half_or_float(value) and \
                value.dtype != dtype:
            return value.to(dtype)
        return value
    return (tuple(cast(a, i) for i, a in enumerate(args)),
            {k: cast(v) for k, v in kwargs.items()})


def _mixed(tensors: Sequence[Any]) -> bool:
    return len({t.dtype for t in tensors if _is_half_or_float(t)}) > 1


def _norm_call(func: Callable, args: Sequence[Any],
               kwargs: Dict[str, Any]) -> Optional[Callable[[], Any]]:
    names, stats = _NORMS[func]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    extra = args[len(names):]
    x = bound.get("input")
    if not (_is_half_or_float(x) and x.dtype == torch.float32):
        return None
    params = [n for n in names[1:] if _is_half_or_float(bound.get(n)) and
              bound[n].dtype == torch.float16]
    if not params:
        return None
    originals = {n: bound[n] for n in params}
    for name in params:
        bound[name] = bound[name].float()

    def call():
        out = func(*[bound[n] for n in names], *extra,
                   **{k: v for k, v in bound.items() if k not in names})
        with torch.no_grad():
            for name in stats:
                if name in originals:
                    originals[name].copy_(bound[name])
        return out
    return call


def cast_mixed(func: Callable, args: Sequence[Any],
               kwargs: Dict[str, Any]) -> Optional[Callable[[], Any]]:
    """A call of ``func`` with IPU casting, or None when nothing is mixed."""
    tensors = [a for a in list(args) + list(kwargs.values())
               if isinstance(a, torch.Tensor)]
    if func in _NORMS:
        return _norm_call(func, args, kwargs)
    if not _mixed(tensors):
        return None
    if func in _PRODUCTS:
        keep = _PRODUCTS[func]
        if keep >= len(args) or not _is_half_or_float(args[keep]):
            return None
        new_args, new_kwargs = _cast_others(args, kwargs, args[keep].dtype,
                                            keep)
    elif func in _INDEX_UPDATES and args and _is_half_or_float(args[0]):
        new_args, new_kwargs = _cast_others(args, kwargs, args[0].dtype, 0)
    else:
        return None
    return lambda: func(*new_args, **new_kwargs)
