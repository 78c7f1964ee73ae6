"""Slices whose start is only known at run time: ``dynamic_slice`` and
``dynamic_update``.

On the simulated IPU the slice positions are computed in the graph from the
start tensor, ``(start + arange(0, size, step)) % shape[dim]``, so a slice
that runs past the end **wraps** to the beginning of the dimension, as on
the IPU. ``dynamic_update`` uses the same wrapped positions (the IPU has no
defined out-of-range behaviour; wrapping keeps every write in range).
Plain CPU calls use PyTorch slicing, which clips.

Example::

    >>> x = torch.arange(8)
    >>> poptorch.dynamic_slice(x, 0, torch.tensor(6), 4, 1)  # CPU: clipped
    tensor([6, 7])
    >>> # traced for the IPU, the same call returns tensor([6, 7, 0, 1])
"""
from typing import Any

import torch

from .. import _impl
from ..errors import createPoptorchError

__all__ = ["dynamic_slice", "dynamic_update"]


def _check_args(op: str, dim: Any, start: Any, size: Any) -> None:
    if not isinstance(dim, int):
        raise createPoptorchError("Dimension must be an integer.")
    if not isinstance(start, torch.Tensor):
        raise createPoptorchError(
            f"Slice start argument to {op} must be a torch.tensor. "
            f"{type(start)} is not supported.")
    if not isinstance(size, int):
        raise createPoptorchError("Size must be an integer.")


def _check_tensor(op: str, value: Any, role: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise createPoptorchError(f"{op} must take a torch.tensor {role}. "
                                  f"{type(value)} is not supported.")


def _check_size(size: int) -> None:
    # Compile-time checks of the IPU backend.
    if size == 0:
        raise _impl.cpp_error(
            "The start and end of a slice must be different.")
    if size < 0:
        raise _impl.cpp_error(
            "Taking a slice of a tensor with the end less than the start is "
            "not supported.")


def _start_value(start: torch.Tensor) -> int:
    return int(start.reshape(-1)[0])


def wrapped_positions(start: torch.Tensor, length: int, size: int,
                       step: int) -> torch.Tensor:
    """``(start + arange(0, size, step)) % length``, computed at run time."""
    if start.numel() != 1:
        raise _impl.cpp_error(
            "The start of a dynamic slice must have exactly one element, got "
            f"shape {list(start.shape)}.")
    offset = start.reshape(())
    if offset.is_floating_point() or offset.dtype == torch.bool:
        offset = offset.to(torch.int32)
    steps = torch.arange(0, size, step, dtype=offset.dtype,
                         device=offset.device)
    return torch.remainder(offset + steps, length)


def dynamic_slice(tensor: torch.Tensor, dim: int, start: torch.Tensor,
                  size: int, step: int) -> torch.Tensor:
    """``size`` elements of ``tensor`` along ``dim`` from the run-time
    ``start``, keeping every ``step``-th one.

    On the IPU ``size`` must divide ``tensor.shape[dim]`` and the slice wraps
    around the end of the dimension.
    """
    _check_tensor("dynamic_slice", tensor, "input")
    _check_args("dynamic_slice", dim, start, size)
    if not isinstance(step, int):
        raise createPoptorchError("Step must be an integer.")
    if not _impl.isRunningOnIpu():
        begin = _start_value(start)
        return torch.ops.aten.slice(tensor, dim, begin, begin + size, step)
    _check_size(size)
    length = tensor.shape[dim]
    if length % size != 0:
        raise _impl.cpp_error(
            f"The size of the slice ({size}) must be a factor of the slicing "
            f"dimension ({length}).")
    if step < 1:
        raise _impl.cpp_error("Slicing step must be at least 1")
    positions = wrapped_positions(start, length, size, step)
    return tensor.index_select(dim, positions)


def dynamic_update(input: torch.Tensor, src: torch.Tensor, dim: int,
                   start: torch.Tensor, size: int) -> torch.Tensor:
    """A copy of ``input`` with ``src`` written along ``dim`` from the
    run-time ``start`` (``size`` elements; ``src.shape[dim]`` must equal
    ``size``)."""
    # ``input`` shadows the builtin to keep PopTorch's keyword name.
    _check_tensor("dynamic_update", input, "input")
    _check_tensor("dynamic_update", src, "src")
    _check_args("dynamic_update", dim, start, size)
    if input.dim() != src.dim():
        raise createPoptorchError(
            "input and src tensors must have same dimensionality. "
            f"({input.dim()}) vs ({src.dim()})")
    if input.dtype != src.dtype:
        raise createPoptorchError("input and src tensor must have same dtype. "
                                  f"({input.dtype} vs {src.dtype})")
    if not _impl.isRunningOnIpu():
        begin = _start_value(start)
        return torch.slice_scatter(input, src, dim, begin, begin + size)
    _check_size(size)
    if size > input.shape[dim]:
        raise _impl.cpp_error(
            f"dynamic_update: size ({size}) is larger than dimension {dim} of "
            f"the input ({input.shape[dim]}).")
    if src.shape[dim] != size:
        raise _impl.cpp_error(
            f"dynamic_update: src has {src.shape[dim]} elements along "
            f"dimension {dim} but size is {size}; they must be equal.")
    positions = wrapped_positions(start, input.shape[dim], size, 1)
    # index_put takes int32 positions (the IPU has no int64); it indexes the
    # leading dimension, so bring ``dim`` to the front and back.
    updated = input.movedim(dim, 0).index_put((positions, ),
                                              src.movedim(dim, 0))
    return updated.movedim(0, dim)
