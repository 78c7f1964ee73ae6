"""Small helpers that PopTorch exports at the top level."""
from typing import Any

import torch

__all__ = ["accessAttributes", "getIpuTensorId"]


def accessAttributes(*args: Any) -> None:
    """Touches the ``.data`` of every tensor in ``args`` (which triggers the
    implicit weight sync of trained parameters)."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            _ = arg.data
        elif isinstance(arg, (list, tuple)):
            accessAttributes(*arg)
        elif isinstance(arg, dict):
            accessAttributes(*arg.values())


def getIpuTensorId(tensor: torch.Tensor) -> int:
    """A stable id for ``tensor`` within this process."""
    return id(tensor)
