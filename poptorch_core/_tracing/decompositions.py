"""ATen rewrites applied while tracing.

Two kinds: dtype repairs, so graphs run with the IPU's int32 indices, and
pattern rewrites that keep the numerics but run faster on the host (the
simulator's counterpart of PopART's pattern passes).

int64 values are demoted to int32 at the graph boundary (an IPU has no
64-bit types), so models see int32 indices and labels, as on an IPU. Some
CPU kernels still insist on int64 for an index or target argument; these
rewrites widen such an int32 argument just before the op, so the graph runs
on the host. For the scatter kernels, whose fast path takes an *expanded*
index (stride 0, which is how PyG broadcasts its edge index), stride-0
dimensions are narrowed first so only the small un-expanded index is copied
and the fast path is kept.
"""
from typing import Callable, Dict, Optional

import torch

aten = torch.ops.aten


def _widened(index: object) -> Optional[torch.Tensor]:
    if not isinstance(index, torch.Tensor) or index.dtype != torch.int32:
        return None
    base = index
    for dim, (size, stride) in enumerate(zip(index.shape, index.stride())):
        if stride == 0 and size > 1:
            base = base.narrow(dim, 0, 1)
    return base.long().expand(index.shape)


def _widen_arg(op, position: int) -> Callable:
    def rewrite(*args, **kwargs):
        if position >= len(args):
            return NotImplemented
        wide = _widened(args[position])
        if wide is None:
            return NotImplemented  # trace the op unchanged
        args = args[:position] + (wide,) + args[position + 1:]
        return op(*args, **kwargs)
    return rewrite


# (op, position of the argument that must be int64)
_LONG_ARGUMENTS = [
    (aten.scatter_add.default, 2), (aten.scatter_add_.default, 2),
    (aten.scatter_reduce.two, 2), (aten.scatter_reduce_.two, 2),
    (aten.cross_entropy_loss.default, 1), (aten.nll_loss_nd.default, 1),
    (aten.nll_loss.default, 1), (aten.nll_loss2d.default, 1),
    (aten.multi_margin_loss.default, 1),
    (aten.multilabel_margin_loss.default, 1), (aten.one_hot.default, 0),
    (aten.take.default, 1), (aten.index_copy.default, 2),
    (aten.index_copy_.default, 2), (aten.index_fill.int_Scalar, 2),
    (aten.index_fill.int_Tensor, 2), (aten.index_fill_.int_Scalar, 2),
    (aten.index_fill_.int_Tensor, 2),
    # index_select accepts int32, but its backward (index_add_) is several
    # times slower on CPU with int32 indices than with int64 ones.
    (aten.index_select.default, 2),
]

def _embedding_as_index_select(weight, indices, padding_idx=-1,
                               scale_grad_by_freq=False, sparse=False):
    # An embedding lookup is a row gather; its backward through
    # index_select (an index_add) is cheaper on CPU than
    # embedding_dense_backward, which sorts the indices first.
    if padding_idx != -1 or scale_grad_by_freq or sparse:
        return NotImplemented
    flat = indices.reshape(-1)
    rows = torch.ops.aten.index_select.default(
        weight, 0, flat.long() if flat.dtype == torch.int32 else flat)
    return rows.view(*indices.shape, weight.shape[1])


TRACE_DECOMPOSITIONS: Dict[object, Callable] = {
    op: _widen_arg(op, position) for op, position in _LONG_ARGUMENTS}
TRACE_DECOMPOSITIONS[aten.embedding.default] = _embedding_as_index_select
