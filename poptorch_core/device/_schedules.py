"""How stage times combine into one step: sharded, pipelined, phased.

A *step* is what one replica does per optimizer update in training (``M =
gradientAccumulation`` micro-batches) or per call in inference (``M =
deviceIterations`` micro-batches).

- **Sharded** (``ShardedExecution``, or a single stage): each micro-batch
  runs its stages one after the other, forward then backward in reverse.
- **Pipelined** (``PipelinedExecution`` over ``F`` forward stages): PopART's
  lock-step pipeline. Training has ``S = 2F - 1`` stages: the forward
  stages, the last one fused with its own backward, then the backward
  stages in reverse, each on its forward stage's IPU. In pipeline cycle
  ``c`` stage ``j`` works on micro-batch ``c - j`` (when ``0 <= c - j <
  M``); a cycle lasts as long as its busiest IPU. With stages of equal
  forward time ``f`` and backward time ``b`` the step takes
  ``(M + F - 1)(f + b)`` and the IPUs idle for the fill and drain bubble
  ``(F - 1) / (M + F - 1)`` of the time (inference: ``S = F``, same
  fraction with ``M = deviceIterations``).
- **Phased**: phases run one after the other (forward, then backward in
  reverse), each loading its weights from Streaming Memory first; with
  ``ParallelPhasedExecution`` the next phase's load overlaps the current
  phase's compute.

Then the optimizer update and the gradient all-reduce run on every IPU at
once.

Example::

    >>> stages = [StageTime(i, ipu=i, forward=1.0, backward=2.0)
    ...           for i in range(4)]
    >>> plan = pipelined(stages, micro_batches=8, training=True)
    >>> plan.makespan, round(plan.bubble_fraction, 4), 3 / (8 + 3)
    (33.0, 0.2727, 0.2727...)
"""
import dataclasses
from typing import Dict, List, Sequence, Tuple

from .timing import StageTime


@dataclasses.dataclass
class Bar:
    """One bar of the Gantt chart: ``ipu`` busy from ``start`` to ``end``
    (seconds) with ``kind`` (forward, backward, optimizer, all-reduce,
    weights) for micro-batch ``micro_batch`` of stage ``stage``."""
    ipu: int
    start: float
    end: float
    kind: str
    stage: int = -1
    micro_batch: int = -1

    def to_dict(self) -> Dict[str, object]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Plan:
    """A step's schedule: its bars and makespan."""
    schedule: str
    bars: List[Bar]
    makespan: float
    ipus: List[int]

    @property
    def bubble_fraction(self) -> float:
        """Share of IPU time spent idle within the makespan (0 for a
        single IPU)."""
        if len(self.ipus) < 2 or self.makespan <= 0:
            return 0.0
        busy = sum(b.end - b.start for b in self.bars)
        return max(0.0, 1 - busy / (len(self.ipus) * self.makespan))

    def append_everywhere(self, kind: str, seconds: Dict[int, float]
                          ) -> None:
        """Adds a phase that all IPUs run at once (optimizer, all-reduce):
        it lasts as long as the slowest IPU's share."""
        longest = max(seconds.values(), default=0.0)
        if longest <= 0:
            return
        for ipu, value in seconds.items():
            if value > 0:
                self.bars.append(Bar(ipu, self.makespan,
                                     self.makespan + value, kind))
        self.makespan += longest


def _ipus(stages: Sequence[StageTime]) -> List[int]:
    return sorted({s.ipu for s in stages})


def sharded(stages: Sequence[StageTime], micro_batches: int,
            training: bool) -> Plan:
    """Micro-batches one after the other, stages one after the other."""
    bars, clock = [], 0.0
    order: List[Tuple[StageTime, str, float]] = [
        (s, "forward", s.forward_total) for s in stages]
    if training:
        order += [(s, "backward", s.backward_total) for s in reversed(stages)]
    for micro in range(micro_batches):
        for stage, kind, seconds in order:
            if seconds > 0:
                bars.append(Bar(stage.ipu, clock, clock + seconds, kind,
                                stage.index, micro))
            clock += seconds
    return Plan("sharded", bars, clock, _ipus(stages))


def _pipeline_stages(stages: Sequence[StageTime], training: bool
                     ) -> List[Tuple[StageTime, str, float]]:
    """PopART's pipeline stages: ``2F - 1`` in training, ``F`` otherwise."""
    if not training:
        return [(s, "forward", s.forward_total) for s in stages]
    last = stages[-1]
    return ([(s, "forward", s.forward_total) for s in stages[:-1]] +
            [(last, "forward+backward",
              last.forward_total + last.backward_total)] +
            [(s, "backward", s.backward_total)
             for s in reversed(stages[:-1])])


def pipelined(stages: Sequence[StageTime], micro_batches: int,
              training: bool) -> Plan:
    """The lock-step pipeline over ``micro_batches`` micro-batches."""
    pipe = _pipeline_stages(stages, training)
    bars, clock = [], 0.0
    for cycle in range(micro_batches + len(pipe) - 1):
        busy: Dict[int, float] = {}
        for j, (stage, kind, seconds) in enumerate(pipe):
            micro = cycle - j
            if not 0 <= micro < micro_batches or seconds <= 0:
                continue
            start = clock + busy.get(stage.ipu, 0.0)
            bars.append(Bar(stage.ipu, start, start + seconds, kind,
                            stage.index, micro))
            busy[stage.ipu] = busy.get(stage.ipu, 0.0) + seconds
        clock += max(busy.values(), default=0.0)
    return Plan("pipelined", bars, clock, _ipus(stages))


def phased(stages: Sequence[StageTime], micro_batches: int, training: bool,
           load_seconds: Dict[int, float], parallel: bool) -> Plan:
    """Phases in order, each over all micro-batches, after loading its
    weights (``load_seconds``: phase -> seconds)."""
    phases = sorted({s.phase for s in stages})
    order = [(p, "forward") for p in phases]
    if training:
        order += [(p, "backward") for p in reversed(phases)]
    bars, clock = [], 0.0
    for phase, kind in order:
        members = [s for s in stages if s.phase == phase]
        load = load_seconds.get(phase, 0.0)
        work = max(micro_batches * (s.forward_total if kind == "forward"
                                    else s.backward_total)
                   for s in members)
        for stage in members:
            if load > 0 and not parallel:
                bars.append(Bar(stage.ipu, clock, clock + load, "weights",
                                stage.index))
            start = clock + (0.0 if parallel else load)
            seconds = micro_batches * (stage.forward_total if kind ==
                                       "forward" else stage.backward_total)
            bars.append(Bar(stage.ipu, start, start + seconds, kind,
                            stage.index))
        clock += max(work, load) if parallel else load + work
    return Plan("parallel phased" if parallel else "serial phased", bars,
                clock, _ipus(stages))
