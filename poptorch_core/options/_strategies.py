"""Stages, phases and execution strategies (``opts.setExecutionStrategy``).

A strategy maps the blocks a model starts while it is traced (see
``poptorch.Block``) to pipeline stages, IPUs and, for phased execution,
execution phases. The simulator computes exactly what the unannotated model
computes; the placement only feeds validation, IPU counting and the
simulated device model.

Example::

    >>> strategy = poptorch.PipelinedExecution(
    ...     poptorch.Stage("embed"), poptorch.Stage("layer1", "layer2").ipu(1))
    >>> strategy._resolve([("embed", 0), ("layer1", None), ("layer2", 1)])
    {'embed': (0, 0), 'layer1': (1, 1), 'layer2': (1, 1)}
"""
from typing import (Any, Dict, Iterable, List, NamedTuple, Optional,
                    Sequence, Tuple, Union)

from .. import enums
from .._impl import cpp_error

__all__ = [
    "Stage", "Phase", "PipelinedExecution", "ShardedExecution",
    "SerialPhasedExecution", "ParallelPhasedExecution"
]

#: A block as recorded while tracing: ``(block_id, ipu_id or None)``.
SeenBlock = Tuple[str, Optional[int]]
#: Where a block runs: ``(stage_id, ipu_id)``.
Placement = Tuple[int, int]


def check_ipu_id(ipu_id: Any, what: str = "ipu_id") -> None:
    if ipu_id is not None and (not isinstance(ipu_id, int)
                               or isinstance(ipu_id, bool) or ipu_id < 0):
        raise ValueError(f"{what} must be a non-negative int or None (got "
                         f"{ipu_id!r})")


def record_block(blocks: Dict[str, Optional[int]], block_id: str,
                  ipu_id: Optional[int]) -> None:
    """Adds a sighting of ``block_id`` to ``blocks`` (first-seen order).

    A later sighting without an IPU inherits the first one's; two different
    IPUs for one block id cannot be placed and are an error.
    """
    known = blocks.get(block_id)
    if known is not None and ipu_id is not None and known != ipu_id:
        raise cpp_error(
            f"Block '{block_id}' was started on IPU {known} and again on IPU "
            f"{ipu_id}: give each placement its own block id")
    if known is None:
        blocks[block_id] = ipu_id


def _unique_blocks(seen_blocks: Iterable[SeenBlock]
                   ) -> Dict[str, Optional[int]]:
    blocks: Dict[str, Optional[int]] = {}
    for block_id, ipu_id in seen_blocks:
        record_block(blocks, block_id, ipu_id)
    return blocks


class Stage:
    """A pipeline stage: a group of block ids that run on one IPU.

    Example::

        >>> poptorch.Stage("encoder", "pooling").ipu(1).blocks
        ['encoder', 'pooling']
    """

    def __init__(self, *block_ids: str):
        if not all(isinstance(b, str) for b in block_ids):
            raise AssertionError(
                f"Block ids are expected to be strings, got {list(block_ids)}")
        self._blocks = list(block_ids)
        self._ipu: Optional[int] = None

    @property
    def blocks(self) -> List[str]:
        """The ids of the blocks in this stage."""
        return self._blocks

    def ipu(self, ipu: int) -> "Stage":
        """Runs this stage on ``ipu`` (overrides the blocks' ``ipu_id``)."""
        check_ipu_id(ipu, "ipu")
        self._ipu = ipu
        return self

    def __repr__(self) -> str:
        ipu = "" if self._ipu is None else f".ipu({self._ipu})"
        return f"Stage({', '.join(map(repr, self._blocks))}){ipu}"


class Phase:
    """An execution phase: several :class:`Stage` objects, or block ids that
    form a single stage.

    Example::

        >>> poptorch.Phase(poptorch.Stage("a"), poptorch.Stage("b")).ipus(0, 1)
        Phase(Stage('a').ipu(0), Stage('b').ipu(1))
    """

    def __init__(self, *stages_or_block_ids: Union[Stage, str]):
        if all(isinstance(a, Stage) for a in stages_or_block_ids):
            self.stages: List[Stage] = list(stages_or_block_ids)
        else:
            if not all(isinstance(a, str) for a in stages_or_block_ids):
                raise AssertionError(
                    "All arguments must either be block ids (strings) or "
                    f"poptorch.Stage objects, not a mix: {stages_or_block_ids}")
            self.stages = [Stage(*stages_or_block_ids)]

    def stage(self, idx: int) -> Stage:
        """The ``idx``-th stage of this phase."""
        return self.stages[idx]

    def ipus(self, *ipus: int) -> "Phase":
        """Sets one IPU per stage."""
        if len(ipus) != len(self.stages):
            raise AssertionError(
                f"Phase has {len(self.stages)} stages but {len(ipus)} IPUs were "
                "given: give exactly one IPU per stage")
        for stage, ipu in zip(self.stages, ipus):
            stage.ipu(ipu)
        return self

    def __repr__(self) -> str:
        return f"Phase({', '.join(map(repr, self.stages))})"


class _StageEntry(NamedTuple):
    stage: Stage
    stage_id: int
    phase_id: int


def _as_stage(item: Any) -> Stage:
    if isinstance(item, Stage):
        return item
    if isinstance(item, str):
        return Stage(item)
    if isinstance(item, (list, tuple)):
        return Stage(*item)
    raise TypeError(f"Invalid stage {item!r}: expected a poptorch.Stage, a "
                    "block id (str) or a list of block ids")


class _IExecutionStrategy:
    """Base of the execution strategies: maps block ids to stages.

    Subclasses fill ``_block_map`` (block id -> stage entry) in their
    constructor; an empty map means automatic staging (``_auto_stage``).
    """
    _execution_mode = 0

    def __init__(self):
        self._block_map: Dict[str, _StageEntry] = {}
        self._auto_stage: Optional[enums.AutoStage] = None

    def _addStage(self, stage: Stage, stage_id: int, phase_id: int) -> None:
        for block in stage.blocks:
            if block in self._block_map:
                raise AssertionError(
                    f"{block} associated with more than one stage")
            self._block_map[block] = _StageEntry(stage, stage_id, phase_id)

    def stage(self, block_id: str) -> Stage:
        """The stage holding ``block_id``."""
        if block_id not in self._block_map:
            raise AssertionError(f"Unknown block {block_id}")
        return self._block_map[block_id].stage

    def backendOptions(self) -> Dict[str, Any]:
        """The options this strategy adds to ``Options.toDict()``."""
        return {"execution_mode": self._execution_mode}

    def _resolve(self,
                 seen_blocks: Sequence[SeenBlock]) -> Dict[str, Placement]:
        """Places each block seen while tracing: ``{id: (stage, ipu)}``.

        ``seen_blocks`` lists ``(block_id, ipu_id)`` in the order the
        blocks started (repeats allowed). A stage's ``.ipu()`` overrides the
        block's ``ipu_id``; with neither, the IPU is the stage id.
        """
        blocks = _unique_blocks(seen_blocks)
        if self._auto_stage is not None:
            placements = self._placeAutomatically(blocks)
        else:
            placements = self._placeExplicitly(blocks)
        self._validatePlacements(placements)
        return placements

    def _placeAutomatically(self, blocks: Dict[str, Optional[int]]
                            ) -> Dict[str, Placement]:
        placements = {}
        # Stage 0 holds the ops that run before the first block, so
        # automatically numbered stages start at 1.
        next_stage = 1
        for block_id, ipu_id in blocks.items():
            if self._auto_stage == enums.AutoStage.SameAsIpu:
                if ipu_id is None:
                    raise AssertionError(
                        "poptorch.AutoStage.SameAsIpu was selected but no IPU "
                        f"was specified for block {block_id}")
                stage_id = ipu_id
            else:
                stage_id, next_stage = next_stage, next_stage + 1
            placements[block_id] = (stage_id,
                                    stage_id if ipu_id is None else ipu_id)
        return placements

    def _placeExplicitly(self, blocks: Dict[str, Optional[int]]
                         ) -> Dict[str, Placement]:
        placements = {}
        for block_id, ipu_id in blocks.items():
            if block_id not in self._block_map:
                raise AssertionError(
                    f"Unknown Block '{block_id}' list of expected Blocks: "
                    f"{list(self._block_map)}")
            entry = self._block_map[block_id]
            if entry.stage._ipu is not None:
                ipu_id = entry.stage._ipu
            elif ipu_id is None:
                ipu_id = entry.stage_id
            placements[block_id] = (entry.stage_id, ipu_id)
        unused = [b for b in self._block_map if b not in blocks]
        if unused:
            raise AssertionError(
                f"Blocks {unused} of the execution strategy were not used by "
                "the model: every block id given in a strategy must be "
                "started while the model runs")
        return placements

    def _validatePlacements(self, placements: Dict[str, Placement]) -> None:
        """Hook for strategy-specific placement rules."""

    def _argsRepr(self) -> str:
        stages: Dict[int, Stage] = {}
        for entry in self._block_map.values():
            stages.setdefault(entry.stage_id, entry.stage)
        return ", ".join(repr(stages[k]) for k in sorted(stages))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._argsRepr()})"


class PipelinedExecution(_IExecutionStrategy):
    """Pipelined execution: stages on different IPUs overlap.

    Arguments: a single :class:`poptorch.AutoStage` (default ``SameAsIpu``:
    the stage id is the block's IPU), or stages given as :class:`Stage`
    objects, block ids or lists of block ids; the position is the stage id.

    Example::

        >>> opts = poptorch.Options().setExecutionStrategy(
        ...     poptorch.PipelinedExecution("encoder", ["decoder", "head"]))
        >>> opts.execution_strategy
        PipelinedExecution(Stage('encoder'), Stage('decoder', 'head'))
    """

    def __init__(self, *args: Union[enums.AutoStage, Stage, str,
                                    Sequence[str]]):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], enums.AutoStage):
            self._auto_stage = args[0]
            return
        if any(isinstance(a, enums.AutoStage) for a in args):
            raise AssertionError(
                "poptorch.AutoStage must be the only argument of "
                f"{type(self).__name__}")
        for stage_id, arg in enumerate(args):
            self._addStage(_as_stage(arg), stage_id, 0)
        if not args:
            self._auto_stage = enums.AutoStage.SameAsIpu

    def _argsRepr(self) -> str:
        if self._auto_stage is not None:
            return f"AutoStage.{self._auto_stage.name}"
        return super()._argsRepr()


class ShardedExecution(PipelinedExecution):
    """Sharded execution: stages run one after the other on their IPUs,
    without pipelining. Takes the same arguments as
    :class:`PipelinedExecution`.

    Example::

        >>> opts = poptorch.Options()
        >>> opts.setExecutionStrategy(poptorch.ShardedExecution())
        Options(...)
    """
    _execution_mode = 1


def _as_phase(item: Any) -> Phase:
    if isinstance(item, Phase):
        return item
    if isinstance(item, (Stage, str)):
        return Phase(item)
    if isinstance(item, (list, tuple)):
        return Phase(*item)
    raise TypeError(f"Invalid phase {item!r}: expected a poptorch.Phase, a "
                    "Stage, a block id, or a list of Stages or block ids")


class _IPhasedExecution(_IExecutionStrategy):
    """Base of the phased strategies: each argument is one phase."""
    _execution_mode = 2
    _serial = True

    def __init__(self, *phases: Any):
        super().__init__()
        if not phases:
            raise AssertionError(
                "There is currently no AutoStage for "
                "PhasedExecution, please explicitly specify the "
                "phases")
        self._tensors_liveness = enums.Liveness.AlwaysLive
        self._separate_backward_phase = False
        self._phases = [_as_phase(p) for p in phases]
        for phase_id, phase in enumerate(self._phases):
            for stage_id, stage in enumerate(phase.stages):
                self._addStage(stage, stage_id, phase_id)

    def phase(self, phase: int) -> Phase:
        """The ``phase``-th phase."""
        if not (isinstance(phase, int) and phase >= 0):
            raise AssertionError(
                "Phases are identified by non-negative integers")
        return self._phases[phase]

    def useSeparateBackwardPhase(self,
                                 use: bool = True) -> "_IPhasedExecution":
        """Runs the backward pass in phases of its own."""
        if not isinstance(use, bool):
            raise AssertionError("use must be a bool")
        self._separate_backward_phase = use
        return self

    def _phaseOf(self, block_id: str) -> int:
        """The phase id of ``block_id``."""
        if block_id not in self._block_map:
            raise AssertionError(f"Unknown block {block_id}")
        return self._block_map[block_id].phase_id

    def backendOptions(self) -> Dict[str, Any]:
        """The options this strategy adds to ``Options.toDict()``: the
        execution mode and the phase settings."""
        return {
            **super().backendOptions(),
            "separate_backward_phase": self._separate_backward_phase,
            "tensors_liveness": self._tensors_liveness.value,
            "serial_phases_execution": self._serial,
        }

    def _argsRepr(self) -> str:
        return ", ".join(map(repr, self._phases))


class SerialPhasedExecution(_IPhasedExecution):
    """Phases run one after the other.

    Example::

        >>> strategy = poptorch.SerialPhasedExecution(
        ...     poptorch.Phase("0"), poptorch.Phase("1"))
        >>> strategy.setTensorsLiveness(poptorch.Liveness.OffChipAfterFwd)
        SerialPhasedExecution(Phase(Stage('0')), Phase(Stage('1')))
    """

    def setTensorsLiveness(
            self, liveness: enums.Liveness) -> "SerialPhasedExecution":
        """When tensors are moved off chip between phases."""
        if not isinstance(liveness, enums.Liveness):
            raise AssertionError(
                f"liveness must be a poptorch.Liveness (got {liveness!r})")
        self._tensors_liveness = liveness
        return self


class ParallelPhasedExecution(_IPhasedExecution):
    """Two phases run at once: even phases on even IPUs, odd phases on odd
    IPUs.

    Example::

        >>> strategy = poptorch.ParallelPhasedExecution(
        ...     poptorch.Phase("0").ipus(0), poptorch.Phase("1").ipus(1))
    """
    _serial = False

    def sendTensorsOffChipAfterFwd(self, off_chip: bool = True
                                   ) -> "ParallelPhasedExecution":
        """Moves tensors off chip after the forward pass."""
        if not isinstance(off_chip, bool):
            raise AssertionError("off_chip must be a bool")
        self._tensors_liveness = (enums.Liveness.OffChipAfterFwd
                                  if off_chip else enums.Liveness.AlwaysLive)
        return self

    def _validatePlacements(self, placements: Dict[str, Placement]) -> None:
        if self._tensors_liveness in (enums.Liveness.OffChipAfterFwdNoOverlap,
                                      enums.Liveness.OffChipAfterEachPhase):
            raise cpp_error("This is only supported for serial phase "
                             "execution")
        for block_id, (_, ipu_id) in placements.items():
            if self._phaseOf(block_id) % 2 != ipu_id % 2:
                raise cpp_error(
                    "When phases are executed in parallel: even phases must "
                    "run on even IPUs and odd phases on odd IPUs")
