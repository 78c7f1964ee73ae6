"""IPU dtype rules at the graph boundary.

The IPU has no 64-bit types: int64 becomes int32 and float64 becomes float32
on the way in (inputs, parameters, buffers) and on the way out (outputs).
A value that does not fit int32 is an error, never a silent wrap.
"""
from typing import Optional, Set

import torch

from ._impl import cpp_error
from ._logging import logger

_SUPPORTED = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
              torch.float16, torch.float32}
_DEMOTED = {torch.int64: torch.int32, torch.float64: torch.float32,
            torch.bfloat16: torch.float32}
_INT32 = torch.iinfo(torch.int32)
_FLOAT32_MAX = torch.finfo(torch.float32).max


def ipu_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a tensor of ``dtype`` has on the simulated IPU."""
    if dtype in _SUPPORTED:
        return dtype
    if dtype in _DEMOTED:
        return _DEMOTED[dtype]
    raise cpp_error(f"Unsupported input type {dtype}")


def check_fits_int32(tensor: torch.Tensor, what: str) -> None:
    """Raises if an int64 ``tensor`` holds a value outside the int32 range."""
    if tensor.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(tensor))
    if lo < _INT32.min or hi > _INT32.max:
        bad = hi if hi > _INT32.max else lo
        raise cpp_error(
            f"{what} of dtype torch.int64 holds the value {bad}, which "
            f"does not fit torch.int32 (range [{_INT32.min}, {_INT32.max}]). "
            "The IPU has no 64-bit integers and PopTorch demotes int64 to "
            "int32; scale or offset the values so that they fit, or pass "
            "them as float32.")


def to_ipu(tensor: torch.Tensor, what: str,
           device: Optional[torch.device] = None,
           keep_int64: bool = False) -> torch.Tensor:
    """``tensor`` with its IPU dtype on ``device`` (no copy when nothing
    changes). ``what`` names the tensor in errors. ``keep_int64`` checks an
    int64 tensor against the int32 range but leaves it int64, for graphs
    that would only widen it back
    (``_executor.backends.passes.wide_inputs``)."""
    dtype = ipu_dtype(tensor.dtype)
    if tensor.dtype == torch.int64:
        check_fits_int32(tensor, what)
        if keep_int64:
            dtype = torch.int64
    if dtype == tensor.dtype and (device is None or tensor.device == device):
        return tensor
    return tensor.to(device=device, dtype=dtype)


def warn_if_overflowed(original: torch.Tensor, demoted: torch.Tensor,
                       what: str, warned: Set[str]) -> None:
    """Warns when float64 values beyond float32's range became infinities
    on the way to the IPU, once for each input ``what`` names (``warned``
    holds the names warned about)."""
    if what in warned or not bool(demoted.isinf().any()):
        return
    overflowed = demoted.isinf() & original.to(demoted.device).isfinite()
    if not bool(overflowed.any()):
        return
    warned.add(what)
    value = original[overflowed.to(original.device)][0].item()
    logger.warning(
        "The input %s of dtype torch.float64 holds %g, beyond "
        "torch.float32's range (+-%g): the IPU has no 64-bit floats, so it becomes inf there. "
        "Scale the values into float32's range (or take their logarithm) "
        "before the call.", what, value, _FLOAT32_MAX)


def output_to_host(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """An output as returned to the user: long -> int32, double -> float32,
    on the CPU."""
    if tensor.dtype == torch.int64:
        check_fits_int32(tensor, what)
        tensor = tensor.to(torch.int32)
    elif tensor.dtype == torch.float64:
        tensor = tensor.to(torch.float32)
    return tensor if tensor.device.type == "cpu" else tensor.cpu()
