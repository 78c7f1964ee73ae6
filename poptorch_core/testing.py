"""Comparison helpers for tests written against PopTorch."""
from typing import Any

import torch

__all__ = ["allclose"]


def allclose(ref: Any, other: Any, **kwargs) -> bool:
    """``torch.allclose`` over matching nested structures.

    Tensors, tuples and lists must match in type and length; anything else
    is compared with ``==``.
    """
    if isinstance(ref, torch.Tensor):
        return isinstance(other, torch.Tensor) and \
            ref.shape == other.shape and torch.allclose(ref, other, **kwargs)
    if isinstance(ref, (tuple, list)):
        return type(ref) is type(other) and len(ref) == len(other) and all(
            allclose(a, b, **kwargs) for a, b in zip(ref, other))
    return ref == other
