"""Shape and dtype of ``torch.fx`` nodes, whichever tracer filled them in.

``make_fx`` stores the traced value in ``node.meta["val"]``; FX shape
propagation stores a ``TensorMetadata`` in ``node.meta["tensor_meta"]``.
"""
from typing import Optional, Tuple

import torch
import torch.fx

__all__ = ["node_shape_dtype"]


def node_shape_dtype(
        node: torch.fx.Node) -> Optional[Tuple[Tuple[int, ...], torch.dtype]]:
    """``(shape, dtype)`` of a node whose value is one tensor, else None.

    Example::

        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> gm = make_fx(lambda x: x + 1)(torch.zeros(2))
        >>> node_shape_dtype(next(iter(gm.graph.nodes)))
        ((2,), torch.float32)
    """
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return tuple(int(d) for d in val.shape), val.dtype
    meta = node.meta.get("tensor_meta")
    if meta is not None and hasattr(meta, "shape") and hasattr(meta, "dtype"):
        return tuple(int(d) for d in meta.shape), meta.dtype
    return None
