"""ATen rewrites applied while tracing.

int64 indices are demoted to int32 at the graph boundary (an IPU has no
64-bit types), but some CPU kernels still insist on int64 indices: the
scatter kernels' fast path for an *expanded* index (stride 0, which is how
PyG broadcasts its edge index) rejects int32. These rewrites widen such an
index just before the op. They narrow stride-0 dimensions first, so only the
small un-expanded index is copied and the fast path is kept.
"""
from typing import Callable, Dict, Optional

import torch

__all__: list = []

aten = torch.ops.aten


def _widened_index(index: torch.Tensor) -> Optional[torch.Tensor]:
    if index.dtype != torch.int32:
        return None
    base = index
    for dim, (size, stride) in enumerate(zip(index.shape, index.stride())):
        if stride == 0 and size > 1:
            base = base.narrow(dim, 0, 1)
    return base.long().expand(index.shape)


def _with_long_index(op) -> Callable:
    def rewrite(self, dim, index, *args, **kwargs):
        wide = _widened_index(index)
        if wide is None:
            return NotImplemented  # trace the op unchanged
        return op(self, dim, wide, *args, **kwargs)
    return rewrite


INT32_INDEX_DECOMPOSITIONS: Dict[object, Callable] = {
    op: _with_long_index(op) for op in (
        aten.scatter_add.default, aten.scatter_add_.default,
        aten.scatter_reduce.two, aten.scatter_reduce_.two)
}
