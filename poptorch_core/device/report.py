"""``SimulationReport``: what the simulated IPU says about a compiled model.

``poptorch_model.simulationReport()`` returns one. It holds the chip model,
the memory of each IPU by category with its largest consumers, the time of
each pipeline stage, the step's schedule (a Gantt chart), the pipeline
bubble and the estimated throughput. ``str(report)`` is a readable table,
``report.to_dict()`` is plain JSON-ready data and ``report.plot(path)``
writes a PNG (it needs matplotlib: ``pip install poptorch-sim[examples]``).

Example::

    >>> model = poptorch.inferenceModel(torch.nn.Linear(16, 4))
    >>> _ = model(torch.randn(8, 16))
    >>> report = model.simulationReport()
    >>> report.fits, report.schedule, report.memory[0].breakdown["parameters"]
    (True, 'sharded', 272)
    >>> print(report.summary())  # doctest: +ELLIPSIS
    Mk2 GC200 x 1 per replica: ... samples/s
"""
import dataclasses
from typing import Any, Dict, List, Optional

from ._schedules import Bar
from .chips import ChipModel
from .memory import CATEGORIES, IpuMemory, format_bytes
from .timing import StageTime

__all__ = ["SimulationReport"]


def format_seconds(seconds: float) -> str:
    """``"12.3 us"``, ``"4.56 ms"`` or ``"1.23 s"``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


@dataclasses.dataclass
class SimulationReport:
    """The device model's estimate for one compiled model.

    Attributes:
        chip: the simulated IPU (``opts.Simulator.ipuVersion``).
        training: a training model (backward and optimizer included).
        memory: one :class:`~.memory.IpuMemory` per IPU of a replica.
        stages: seconds per micro-batch of each forward stage.
        schedule: ``"sharded"``, ``"pipelined"``, ``"serial phased"`` or
            ``"parallel phased"``.
        gantt: the bars of one step's schedule.
        step_seconds: one step: an optimizer update in training (all its
            micro-batches), one call in inference.
        bubble_fraction: share of IPU time idle in the pipeline's fill and
            drain (0 when not pipelined).
        micro_batches: micro-batches per step and replica.
        micro_batch_size: dim 0 of the first input of one micro-batch.
        replicas: model replicas (each on its own IPUs).
        optimizer_seconds, allreduce_seconds: their share of the step.
        grouped_weights: replica-grouped weights: groups and bytes.
        exact_liveness: False when activations were estimated
            conservatively (see ``device._liveness``).
    """
    chip: ChipModel
    training: bool
    memory: List[IpuMemory]
    stages: List[StageTime]
    schedule: str
    gantt: List[Bar]
    step_seconds: float
    bubble_fraction: float
    micro_batches: int
    micro_batch_size: int
    replicas: int = 1
    optimizer_seconds: float = 0.0
    allreduce_seconds: float = 0.0
    grouped_weights: Dict[str, Dict[str, int]] = dataclasses.field(
        default_factory=dict)
    exact_liveness: bool = True

    # --- Derived figures ----------------------------------------------------
    @property
    def fits(self) -> bool:
        """Whether every IPU's estimate is within its memory."""
        return all(m.fits for m in self.memory)

    @property
    def ipus_per_replica(self) -> int:
        """How many IPUs one replica of the model spans."""
        return len(self.memory)

    @property
    def num_ipus(self) -> int:
        """IPUs of all replicas together."""
        return self.ipus_per_replica * self.replicas

    def throughput(self, samples_per_micro_batch: Optional[float] = None
                   ) -> float:
        """Estimated samples per second over all replicas.

        Args:
            samples_per_micro_batch: what one micro-batch holds (default
                :attr:`micro_batch_size`; give e.g. the graphs of a packed
                batch).
        """
        size = self.micro_batch_size if samples_per_micro_batch is None \
            else samples_per_micro_batch
        if self.step_seconds <= 0:
            return float("inf")
        return size * self.micro_batches * self.replicas / self.step_seconds

    @property
    def samples_per_second(self) -> float:
        """The estimated throughput (see :meth:`throughput`)."""
        return self.throughput()

    def fullest(self) -> IpuMemory:
        """The IPU with the largest share of its memory in use."""
        return max(self.memory, key=lambda m: m.utilisation)

    # --- Output -------------------------------------------------------------
    def summary(self) -> str:
        """One line: chip, fullest IPU, step time and throughput."""
        full = self.fullest()
        return (f"{self.chip.name} x {self.ipus_per_replica} per replica: "
                f"IPU{full.ipu} {format_bytes(full.total)} of "
                f"{format_bytes(full.capacity)} ({full.utilisation:.0%}), "
                f"step {format_seconds(self.step_seconds)}, "
                f"{self.samples_per_second:,.0f} samples/s")

    def to_dict(self) -> Dict[str, Any]:
        """Everything as plain values (JSON-serialisable)."""
        return {
            "chip": self.chip.to_dict(), "training": self.training,
            "fits": self.fits, "ipus_per_replica": self.ipus_per_replica,
            "replicas": self.replicas, "schedule": self.schedule,
            "memory": [m.to_dict() for m in self.memory],
            "stages": [s.to_dict() for s in self.stages],
            "step_seconds": self.step_seconds,
            "bubble_fraction": self.bubble_fraction,
            "micro_batches": self.micro_batches,
            "micro_batch_size": self.micro_batch_size,
            "samples_per_second": self.samples_per_second,
            "optimizer_seconds": self.optimizer_seconds,
            "allreduce_seconds": self.allreduce_seconds,
            "grouped_weights": self.grouped_weights,
            "exact_liveness": self.exact_liveness,
            "gantt": [b.to_dict() for b in self.gantt]}

    def plot(self, path: str) -> str:
        """Writes a PNG: memory per IPU as stacked bars against capacity,
        and the Gantt chart of one step. Returns ``path``.

        Raises:
            ImportError: matplotlib is not installed.
        """
        from ._plot import plot_report
        plot_report(self, path)
        return path

    def __str__(self) -> str:
        return "\n".join(self._header() + [""] + self._memory_table() +
                         [""] + self._time_lines())

    def _header(self) -> List[str]:
        kind = "training" if self.training else "inference"
        return [f"Simulated IPU: {self.chip.describe()} (ipuVersion "
                f"{self.chip.version})",
                f"{kind.capitalize()}: {self.ipus_per_replica} IPU(s) per "
                f"replica x {self.replicas} replica(s), {self.schedule} "
                f"schedule, {self.micro_batches} micro-batch(es) of "
                f"{self.micro_batch_size} per step"]

    def _memory_table(self) -> List[str]:
        ipus = self.memory
        row = "  {:<17}" + "{:>12}" * len(ipus)
        lines = ["Memory per IPU" + " " * 6 + "".join(
            f"{'IPU' + str(m.ipu):>12}" for m in ipus)]
        for category in CATEGORIES:
            values = [m.breakdown.get(category, 0) for m in ipus]
            if any(values):
                lines.append(row.format(category, *map(format_bytes,
                                                       values)))
        lines.append(row.format("total", *[format_bytes(m.total)
                                           for m in ipus]))
        lines.append(row.format("capacity", *[format_bytes(m.capacity)
                                              for m in ipus]))
        lines.append(row.format("used", *[f"{m.utilisation:.1%}"
                                          for m in ipus]))
        for memory in ipus:
            status = "fits" if memory.fits else "OUT OF MEMORY"
            lines.append(f"IPU{memory.ipu} ({status}), largest consumers:")
            lines += [f"  {c.describe()}" for c in memory.consumers[:3]]
        if not self.exact_liveness:
            lines.append("(activations: conservative estimate, every value "
                         "assumed kept for the backward)")
        return lines

    def _time_lines(self) -> List[str]:
        lines = ["Time per micro-batch and stage"]
        for s in self.stages:
            lines.append(
                f"  stage {s.index} on IPU{s.ipu}: forward "
                f"{format_seconds(s.forward)}, backward "
                f"{format_seconds(s.backward)}, IPU-Link "
                f"{format_seconds(s.exchange)}, host "
                f"{format_seconds(s.host)}")
        lines.append(
            f"Step: {format_seconds(self.step_seconds)} (pipeline bubble "
            f"{self.bubble_fraction:.1%}, optimizer "
            f"{format_seconds(self.optimizer_seconds)}, all-reduce "
            f"{format_seconds(self.allreduce_seconds)})")
        lines.append(f"Estimated throughput: {self.samples_per_second:,.0f} "
                     "samples/s (a roofline: an upper bound)")
        for name, info in self.grouped_weights.items():
            lines.append(f"Replica-grouped weight {name}: {info['groups']} "
                         f"values over {self.replicas} replicas, "
                         f"{format_bytes(info['bytes_all_replicas'])} in all")
        return lines
