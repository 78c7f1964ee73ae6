"""Placement of the traced ops on (simulated) IPUs and PopTorch's
pipelining rules.

The simulator runs every strategy as the unannotated model would compute
it; what it checks is that PopTorch could have compiled the placement:
stages never decrease along the model, a new
pipeline stage starts each time the IPU changes between consecutive ops, a
pipelined training model needs ``gradientAccumulation >= 2 * stages - 1``
and a pipelined inference model ``deviceIterations >= stages``; the IPUs
a model reserves are a power of two, at most 64 per process.
"""
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import enums
from .._impl import cpp_error
from .._logging import logger
from ..annotations import PipelinedExecution, ShardedExecution
from ..enums import AutoStage


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
            raise cpp_error(
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
            raise cpp_error(
                "poptorch.Options().Training.gradientAccumulation must be "
                "greater than or equal to the number of pipeline stages "
                f"({total}) when using poptorch.PipelinedExecution. Please "
                f"note that a model with {stages} pipeline stages in PopTorch "
                f"will have an additional {stages - 1} stages when training.")
    elif device_iterations < stages:
        raise cpp_error(
            "poptorch.Options().deviceIterations must be greater than or "
            f"equal to the number of pipeline stages ({stages}) when using "
            "PopTorch.PipelinedExecution.")


#: Most IPUs one process can reserve.
MAX_IPUS_PER_PROCESS = 64


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


def ipus_to_reserve(num_model_ipus: int, options: Any) -> int:
    """The number of IPUs to reserve for a model using ``num_model_ipus``
    distinct IPUs under ``options`` (a ``poptorch.Options``).

    Raises the backend's error for too many IPUs, or for a count that is
    not a power of two unless ``options.autoRoundNumIPUs(True)`` was set
    (then it warns and rounds up).
    """
    if num_model_ipus < 1:
        raise ValueError(
            f"num_model_ipus must be at least 1 (got {num_model_ipus})")
    num_ipus = num_model_ipus * options.replication_factor
    if options.connection_type == enums.ConnectionType.Never:
        return num_ipus
    if num_ipus > MAX_IPUS_PER_PROCESS:
        raise cpp_error(
            f"Too many IPUs requested ({num_ipus}). PopTorch can reserve at "
            f"most {MAX_IPUS_PER_PROCESS} IPUs per process: reduce "
            "replicationFactor or the number of IPUs the model uses, or "
            "spread the replicas over several processes "
            "(poptorch.Options().Distributed).")
    rounded = _next_power_of_two(num_ipus)
    if rounded == num_ipus:
        return num_ipus
    if options.auto_round_num_ipus:
        logger.warning(
            "The model specifies the use of %d IPUs, however PopTorch must "
            "reserve a power of 2: reserving %d IPUs instead.", num_ipus,
            rounded)
        return rounded
    raise cpp_error(
        f"The model specifies the use of {num_ipus} IPUs, however PopTorch "
        f"must reserve a minimum of {rounded} in order to allow the model to "
        "run, because PopTorch must reserve a power of 2 or maximum of 64 "
        "IPUs per process. Please reconfigure your model to use a different "
        "number of IPUs or set poptorch.Options().autoRoundNumIPUs(True).")
