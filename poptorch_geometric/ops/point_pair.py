"""PyG's point-pair angle with one sign of zero on every backend.

``PPFConv`` measures the angle between a normal and the vector from one
point to the other with ``atan2(|v1 x v2|, v1 . v2)``. For a self-loop that
vector is zero, and so is the dot product, but its sign depends on the
order of the sum: eager PyTorch gives +0 (angle 0) where inductor's code can
give -0 (angle pi). :func:`get_angle` makes every zero dot product +0, so
the compile backend gives eager PyG's features for self-loops too.

Example::

    >>> normal = torch.tensor([[-1., -2., -3.]])
    >>> get_angle(normal, torch.zeros(1, 3))
    tensor([0.])
"""
import torch
from torch import Tensor

__all__ = ["get_angle"]


def get_angle(v1: Tensor, v2: Tensor) -> Tensor:
    """The angle between the rows of ``v1`` and ``v2``, 0 against a zero
    vector."""
    dot = (v1 * v2).sum(dim=1)
    dot = torch.where(dot == 0, torch.zeros_like(dot), dot)
    return torch.atan2(torch.cross(v1, v2, dim=1).norm(p=2, dim=1), dot)
