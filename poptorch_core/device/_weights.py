"""Bytes that each weight brings with it: itself, its gradient, its
gradient accumulator and its optimizer state (see :mod:`.memory` for the
rules).

The optimizer is read with the same resolution the simulated device
optimizer uses, so a native ``torch.optim`` optimizer counts as the
PopTorch optimizer it runs as.

Example::

    >>> w = torch.nn.Parameter(torch.zeros(10, 10))
    >>> opt = torch.optim.Adam([w])
    >>> weight_bytes(w, opt, accumulation=1)["optimizer_state"]
    804
"""
from typing import Dict, Mapping, Optional, Tuple

import torch

from ..optim._algorithms import slots, storage_dtype
from ..optim._resolve import ResolvedOptimizer, resolve_optimizer
from ..optim._types import OptimizerType


def _nbytes(numel: int, dtype: torch.dtype) -> int:
    return numel * torch.empty((), dtype=dtype).element_size()


def _groups(resolved: Optional[ResolvedOptimizer]
            ) -> Dict[int, Dict[str, object]]:
    """id(host parameter) -> its group's hyper-parameters."""
    if resolved is None:
        return {}
    return {id(p): hp for hp, params in zip(resolved.groups, resolved.params)
            for p in params}


def optimizer_state_bytes(kind: OptimizerType, hp: Mapping[str, object],
                          attrs: Mapping[str, object], numel: int,
                          accumulation: int) -> int:
    """Bytes of one weight's optimizer state."""
    if kind.family == "sgd":
        velocity = hp["momentum"] != 0
        if kind == OptimizerType.SGD1:  # accumulator and velocity combined
            velocity = velocity or accumulation > 1
        dtype = attrs.get("velocity_accum_type", torch.float32)
        return _nbytes(numel, dtype) if velocity else 0
    total = 0
    for slot in slots(kind, hp, attrs).values():
        dtype = storage_dtype(slot, attrs)
        total += _nbytes(1 if slot.scalar else numel, dtype)
    return total


def weight_bytes(param: torch.Tensor, optimizer: Optional[object],
                 accumulation: int, trainable: Optional[bool] = None,
                 shape: Optional[Tuple[int, ...]] = None,
                 resolved: Optional[ResolvedOptimizer] = None
                 ) -> Dict[str, int]:
    """Bytes per category for one weight.

    Args:
        param: the host parameter (looked up in the optimizer by identity).
        optimizer: the host optimizer, or None (inference).
        accumulation: gradient accumulation count.
        trainable: whether it gets a gradient (default:
            ``param.requires_grad`` and an optimizer is given).
        shape: the shape one replica holds (default: ``param.shape``).
        resolved: ``resolve_optimizer(optimizer)``, if already computed.
    """
    shape = tuple(param.shape) if shape is None else tuple(shape)
    numel = 1
    for size in shape:
        numel *= int(size)
    own = _nbytes(numel, param.dtype)
    out = {"parameters": own, "gradients": 0, "accumulators": 0,
           "optimizer_state": 0}
    if optimizer is None:
        return out
    if trainable is None:
        trainable = param.requires_grad
    if not trainable:
        return out
    out["gradients"] = own
    if resolved is None:
        resolved = resolve_optimizer(optimizer)
    attrs = resolved.attributes
    if accumulation > 1 and resolved.kind != OptimizerType.SGD1:
        out["accumulators"] = _nbytes(numel, attrs.get("accum_type",
                                                       torch.float32))
    hp = _groups(resolved).get(id(param))
    if hp is not None:
        out["optimizer_state"] = optimizer_state_bytes(
            resolved.kind, hp, attrs, numel, accumulation)
    return out
