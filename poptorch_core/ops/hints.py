"""Ops that are identities numerically and carry compiler hints.

On the simulated IPU each one leaves a marker node in the captured graph
(``torch.ops.poptorch.<name>``: a copy of its input whose gradient passes
through), so later passes and the device model can read the hint; plain CPU
calls return their input unchanged (``serializedMatMul`` computes the
product).

Example::

    >>> y = poptorch.recomputationCheckpoint(torch.ones(2))
    >>> a, b = poptorch.recomputationCheckpoint(torch.ones(2), torch.ones(3))
    >>> z = poptorch.set_available_memory(torch.ones(2), 0.3)
"""
from typing import Any, Callable

import torch

from .. import _impl
from ..enums import MatMulSerializationMode, OverlapMode
from ..errors import createPoptorchError
from ._registration import define_identity_op

__all__ = ["nop", "recomputationCheckpoint", "set_available_memory",
           "serializedMatMul", "set_overlap_for_input",
           "set_overlap_for_output"]

_nop = define_identity_op("nop")
_recomputation_checkpoint = define_identity_op("recomputation_checkpoint")
_set_available_memory = define_identity_op("set_available_memory",
                                           "float proportion")
_set_matmul_serialization = define_identity_op(
    "set_matmul_serialization", "str mode, int factor, bool keep_precision")
_set_overlap_for_input = define_identity_op("set_overlap_for_input",
                                            "str mode")
_set_overlap_for_output = define_identity_op("set_overlap_for_output",
                                             "str mode")


def _on_ipu(marker: Callable[..., torch.Tensor], tensor: torch.Tensor,
            *metadata: Any) -> torch.Tensor:
    return marker(tensor, *metadata) if _impl.isRunningOnIpu() else tensor


def nop(tensor: torch.Tensor) -> torch.Tensor:
    """An identity the IPU compiler never optimises away."""
    if not isinstance(tensor, torch.Tensor):
        raise createPoptorchError("nop must take a torch.tensor argument. "
                                  f"{type(tensor)} is not supported.")
    return _on_ipu(_nop, tensor)


def recomputationCheckpoint(*tensors: Any) -> Any:
    """Marks tensors to keep (not recompute) in the backward pass.

    One tensor returns a tensor, several return a tuple, and a single list
    or tuple returns the same container type.
    """
    container = None
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        container, tensors = type(tensors[0]), tuple(tensors[0])
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ValueError("All inputs must be tensors")
    marked = tuple(_on_ipu(_recomputation_checkpoint, t) for t in tensors)
    if container is not None:
        return container(marked)
    return marked[0] if len(marked) == 1 else marked


def set_available_memory(tensor: torch.Tensor,
                         available_memory_proportion: float) -> torch.Tensor:
    """Sets the proportion of tile memory the op producing ``tensor`` may
    use for temporaries."""
    if not isinstance(tensor, torch.Tensor):
        raise createPoptorchError(
            "You may only set available memory for torch.tensor values. "
            f"{type(tensor)} is not supported.")
    proportion = float(available_memory_proportion)
    if not 0.0 < proportion <= 1.0:
        raise ValueError(
            f"available_memory_proportion must be in (0, 1], got "
            f"{available_memory_proportion!r}: it is the share of each "
            "tile's memory the op may use for temporaries.")
    return _on_ipu(_set_available_memory, tensor, proportion)


def serializedMatMul(lhs: torch.Tensor, rhs: torch.Tensor,
                     mode: MatMulSerializationMode, factor: int = 0,
                     keep_precision: bool = False) -> torch.Tensor:
    """``torch.matmul(lhs, rhs)``, split into ``factor`` pieces along the
    dimension ``mode`` names when compiled for an IPU."""
    if not isinstance(keep_precision, bool):
        raise AssertionError(f"keep_precision must be a bool (got "
                             f"{type(keep_precision).__name__})")
    if not isinstance(factor, int):
        raise AssertionError(
            f"factor must be an int (got {type(factor).__name__})")
    if not isinstance(mode, MatMulSerializationMode):
        raise AssertionError(f"mode must be a poptorch.MatMulSerializationMode"
                             f" (got {type(mode).__name__})")
    return _on_ipu(_set_matmul_serialization, torch.matmul(lhs, rhs),
                   mode.value, factor, keep_precision)


def _set_overlap(marker: Callable[..., torch.Tensor], tensors: Any,
                 mode: OverlapMode) -> Any:
    if not isinstance(mode, OverlapMode):
        raise TypeError("mode must be a poptorch.OverlapMode, got "
                        f"{type(mode).__name__}.")
    if isinstance(tensors, torch.Tensor):
        return _on_ipu(marker, tensors, mode.value)
    if isinstance(tensors, (list, tuple)):
        marked = [_set_overlap(marker, t, mode) for t in tensors]
        if hasattr(tensors, "_fields"):  # namedtuple
            return type(tensors)(*marked)
        return type(tensors)(marked)
    if isinstance(tensors, dict):
        return {k: _set_overlap(marker, v, mode) for k, v in tensors.items()}
    raise createPoptorchError(
        "You may only set overlap for torch.tensor inputs/outputs. "
        f"{type(tensors)} is not supported.")


def set_overlap_for_input(input_tensors: Any, mode: OverlapMode) -> Any:
    """Lets the transfer of ``input_tensors`` (any nesting) overlap with
    compute; returns them in the same structure."""
    return _set_overlap(_set_overlap_for_input, input_tensors, mode)


def set_overlap_for_output(output_tensors: Any, mode: OverlapMode) -> Any:
    """Lets the transfer of ``output_tensors`` (any nesting) overlap with
    compute; returns them in the same structure."""
    return _set_overlap(_set_overlap_for_output, output_tensors, mode)
