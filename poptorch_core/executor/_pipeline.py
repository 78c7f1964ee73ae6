"""Placement of the traced ops on (simulated) IPUs and PopTorch's
pipelining rules.

The simulator runs every strategy as the unannotated model would compute
it; what it checks is that PopTorch could have compiled the placement:
stages never decrease along the model, a new
pipeline stage starts each time the IPU changes between consecutive ops, a
pipelined training model needs ``gradientAccumulation >= 2 * stages - 1``
and a pipelined inference model ``deviceIterations >= stages``.
"""
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._impl import _cpp_error
from ..annotations import PipelinedExecution, ShardedExecution
from ..enums import AutoStage

__all__: list = []


@dataclasses.dataclass
class Placement:
    """Where the traced ops ran: per block ``(stage, ipu)``, the number of
    forward pipeline stages and the number of distinct IPUs used."""
    blocks: Dict[str, Tuple[int, int]]
    forward_stages: int
    num_ipus: int
    #: ``(block_id, stage)`` of each traced op, in trace order (ops before
    #: the first block are in stage 0).
    op_stages: List[Tuple[Optional[str], int]] = dataclasses.field(
        default_factory=list)


def resolve(strategy: Any, seen_blocks: Sequence[Tuple[str, Optional[int]]],
            op_blocks: List[Optional[Tuple[str, Optional[int]]]]
            ) -> Placement:
    """Resolves the blocks seen while tracing with ``strategy``."""
    if not seen_blocks:
        return Placement({}, 1, 1)
    blocks = strategy._resolve(seen_blocks)
    ipus = [blocks[op[0]][1] if op is not None else 0 for op in op_blocks]
    switches = sum(1 for a, b in zip(ipus, ipus[1:]) if a != b)
    op_stages = [(op[0], blocks[op[0]][0]) if op is not None else (None, 0)
                 for op in op_blocks]
    return Placement(blocks, switches + 1, len(set(ipus)) or 1, op_stages)


def _check_stage_order(strategy: Any, placement: Placement) -> None:
    """Pipeline stages run in order: an op may not go back to an earlier
    stage (blocks on IPUs 0 -> 1 -> 0 with ``AutoStage.SameAsIpu``)."""
    highest: Tuple[Optional[str], int] = (None, 0)
    for block_id, stage in placement.op_stages:
        if stage < highest[1]:
            auto = getattr(strategy, "_auto_stage", None)
            hint = ("With poptorch.AutoStage.SameAsIpu a block's stage is its "
                    "IPU, so a model that returns to an earlier IPU (for "
                    "example 0 -> 1 -> 0) cannot be pipelined: use "
                    "poptorch.PipelinedExecution(poptorch.AutoStage."
                    "AutoIncrement), or list the stages explicitly."
                    if auto == AutoStage.SameAsIpu else
                    "Give the blocks stages that increase along the model.")
            raise _cpp_error(
                f"Pipeline stages must not decrease along the model: block "
                f"'{block_id}' runs in stage {stage} after block "
                f"'{highest[0]}' in stage {highest[1]}. {hint}")
        if stage > highest[1]:
            highest = (block_id, stage)


def check(strategy: Any, placement: Placement, training: bool,
          gradient_accumulation: int, device_iterations: int) -> None:
    """Raises PopTorch's backend errors for a pipelined strategy."""
    if not isinstance(strategy, PipelinedExecution):
        return
    _check_stage_order(strategy, placement)
    if isinstance(strategy, ShardedExecution):
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
