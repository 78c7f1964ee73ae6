"""Placement of the traced ops on (simulated) IPUs and PopTorch's
pipelining rules.

The simulator runs every strategy as the unannotated model would compute
it; what it checks is that PopTorch could have compiled the placement: a new
pipeline stage starts each time the IPU changes between consecutive ops, a
pipelined training model needs ``gradientAccumulation >= 2 * stages - 1``
and a pipelined inference model ``deviceIterations >= stages``.
"""
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._impl import _cpp_error
from ..annotations import PipelinedExecution, ShardedExecution

__all__: list = []


@dataclasses.dataclass
class Placement:
    """Where the traced ops ran: per block ``(stage, ipu)``, the number of
    forward pipeline stages and the number of distinct IPUs used."""
    blocks: Dict[str, Tuple[int, int]]
    forward_stages: int
    num_ipus: int


def resolve(strategy: Any, seen_blocks: Sequence[Tuple[str, Optional[int]]],
            op_blocks: List[Optional[Tuple[str, Optional[int]]]]
            ) -> Placement:
    """Resolves the blocks seen while tracing with ``strategy``."""
    if not seen_blocks:
        return Placement({}, 1, 1)
    blocks = strategy._resolve(seen_blocks)
    ipus = [blocks[op[0]][1] if op is not None else 0 for op in op_blocks]
    switches = sum(1 for a, b in zip(ipus, ipus[1:]) if a != b)
    return Placement(blocks, switches + 1, len(set(ipus)) or 1)


def check(strategy: Any, placement: Placement, training: bool,
          gradient_accumulation: int, device_iterations: int) -> None:
    """Raises PopTorch's backend errors for a pipelined strategy."""
    if not isinstance(strategy, PipelinedExecution) or \
            isinstance(strategy, ShardedExecution):
        return
    stages = placement.forward_stages
    if training:
        total = 2 * stages - 1
        if gradient_accumulation < total:
            raise _cpp_error(
                "poptorch.Options().Training.gradientAccumulation must be "
                "greater than or equal to the number of pipeline stages "
                f"({total}) when using poptorch.PipelinedExecution. Please "
                f"note that a model with {stages} pipeline stages in PopTorch "
                f"will have an additional {stages - 1} stages when training.")
    elif device_iterations < stages:
        raise _cpp_error(
            "poptorch.Options().deviceIterations must be greater than or "
            f"equal to the number of pipeline stages ({stages}) when using "
            "PopTorch.PipelinedExecution.")
