"""Step-time estimate: a roofline per op, summed by stage and schedule.

Per op, the forward takes ``max(FLOPs / peak FLOP/s, bytes / memory
bandwidth)`` (:mod:`._costs`; the FP16 peak when it computes in 16-bit
floats). A matrix product or convolution whose temporary memory does not
fit under ``availableMemoryProportion`` is split into that many serial
passes (:func:`serial_passes`). The backward of an op that needs a gradient
costs twice its forward for matrix products and convolutions (gradients of
the input and of the weight) and once for the other ops; a stage with
recomputation checkpoints runs its forward again in the backward.

Per stage and micro-batch it adds:

- values received from another IPU over IPU-Links (and their gradients
  sent back in the backward);
- inputs streamed from the host and outputs streamed back (outputs only
  for the micro-batches the output mode returns: all of them for
  ``OutputMode.All``, one in ``N`` for ``EveryN``, one per call for
  ``Final`` and ``Sum``).

Per optimizer step: the update (every weight, gradient, accumulator and
optimizer state read and written once, at memory bandwidth) and, with
replicas, a ring all-reduce of the gradients over IPU-Links
(``2 x (k - 1) / k x bytes`` for groups of ``k`` replicas). How stages
combine into a step is :mod:`._schedules`' job.

It is a roofline: no exchange latency, sync or code overhead, so real IPU
steps are slower, mostly for small ops.

Example::

    >>> StageTime(0, ipu=0, forward=2e-6, backward=4e-6).compute
    6e-06
"""
import dataclasses
import math
from typing import Dict, List, Optional, Set

import torch.fx

from . import _costs
from ._liveness import GraphValues
from ._placement import NodePlacement
from .chips import ChipModel

__all__ = ["StageTime", "HostIO"]


@dataclasses.dataclass
class StageTime:
    """Seconds one micro-batch spends in one forward pipeline stage.

    Attributes:
        index: forward stage number; ``ipu``: where it runs.
        forward, backward: compute (the backward includes recomputation).
        exchange: IPU-Link transfers in (forward) and out (backward).
        host: host transfers of its inputs and outputs.
        flops: forward FLOPs.
        phase: execution phase (phased strategies).
    """
    index: int
    ipu: int
    forward: float = 0.0
    backward: float = 0.0
    exchange: float = 0.0
    host: float = 0.0
    flops: int = 0
    phase: int = 0

    @property
    def compute(self) -> float:
        """Seconds of forward and backward compute of this stage."""
        return self.forward + self.backward

    @property
    def forward_total(self) -> float:
        """Forward with its share of transfers."""
        return self.forward + self._transfer_share(forward=True)

    @property
    def backward_total(self) -> float:
        """Seconds of this stage's backward pass, its share of the
        transfers included."""
        return self.backward + self._transfer_share(forward=False)

    def _transfer_share(self, forward: bool) -> float:
        # Host and IPU-Link transfers are booked on the forward, except
        # that the backward sends gradients back (half of the exchange
        # when there is a backward).
        if self.backward == 0:
            return (self.exchange + self.host) if forward else 0.0
        half = self.exchange / 2
        return (half + self.host) if forward else half

    def to_dict(self) -> Dict[str, float]:
        """This stage's times as plain values (JSON-serialisable)."""
        return dataclasses.asdict(self)


def serial_passes(node: torch.fx.Node, capacity: int,
                  proportion: float) -> int:
    """Passes a matrix product needs when its temporaries may use only
    ``proportion`` of the IPU's memory (1 when they fit)."""
    need = _costs.op_temporary_bytes(node)
    budget = max(proportion, 1e-6) * capacity
    return max(1, math.ceil(need / budget)) if need else 1


def op_seconds(node: torch.fx.Node, chip: ChipModel, passes: int = 1
               ) -> float:
    """Roofline forward time of one op."""
    peak = chip.fp16_flops if _costs.op_is_half(node) else chip.fp32_flops
    compute = _costs.op_flops(node) / peak
    memory = _costs.op_bytes(node) / chip.memory_bandwidth
    return max(compute, memory) * passes


def _backward_factor(node: torch.fx.Node, values: GraphValues) -> int:
    if not any(k in values.grad_keys for k in values.produced(node)):
        return 0
    return 2 if _costs.is_matmul_like(node) else 1


def _value_bytes(node: torch.fx.Node) -> int:
    return sum(t.numel() * t.element_size()
               for t in _costs.tensors_in(node.meta.get("val")))


@dataclasses.dataclass
class HostIO:
    """What one micro-batch moves over the host link: its ``inputs``
    (placeholders) and ``output_share`` of its outputs."""
    inputs: Set[torch.fx.Node]
    output_share: float = 1.0


def stage_times(values: GraphValues, place: NodePlacement, chip: ChipModel,
                passes: Dict[torch.fx.Node, int], training: bool,
                recomputed: Set[int], host: HostIO) -> List[StageTime]:
    """Per forward stage, the time of one micro-batch.

    Args:
        passes: serial passes of each matrix product (AMP).
        recomputed: stages whose forward runs again in the backward.
        host: the host transfers of a micro-batch.
    """
    stages = [StageTime(s.index, s.ipu, phase=s.phase) for s in place.stages]
    received: Set[tuple] = set()
    for node in values.nodes:
        stage = stages[place.stage_of.get(node, 0)]
        seconds = op_seconds(node, chip, passes.get(node, 1))
        stage.forward += seconds
        stage.flops += _costs.op_flops(node)
        if training:
            stage.backward += seconds * _backward_factor(node, values)
            if stage.index in recomputed:
                stage.backward += seconds
        _add_transfers(node, stage, place, chip, host,
                       training and bool(values.grad_keys), received)
    return stages


def _add_transfers(node: torch.fx.Node, stage: StageTime,
                   place: NodePlacement, chip: ChipModel,
                   host: HostIO, backward: bool, received: Set[tuple]
                   ) -> None:
    """Books ``node``'s transfers on ``stage``; ``received`` holds the
    ``(value, IPU)`` pairs already sent over IPU-Links."""
    for source in node.all_input_nodes:
        size = _value_bytes(source)
        if source in host.inputs and _first_user(source) is node:
            stage.host += size / chip.host_bandwidth
        elif source.op != "placeholder" and \
                place.ipus.get(source, 0) != stage.ipu and \
                (source, stage.ipu) not in received:
            received.add((source, stage.ipu))
            trips = 2 if backward else 1
            stage.exchange += trips * size / chip.ipu_link_bandwidth
    if any(user.op == "output" for user in node.users):
        stage.host += host.output_share * _value_bytes(node) / \
            chip.host_bandwidth


def _first_user(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    return next(iter(node.users), None)


def update_seconds(weight_bytes: Dict[str, int], chip: ChipModel) -> float:
    """One optimizer update of a weight: everything it holds read and
    written once."""
    return 2 * sum(weight_bytes.values()) / chip.memory_bandwidth


def allreduce_seconds(gradient_bytes: int, group: int,
                      chip: ChipModel) -> float:
    """Ring all-reduce of ``gradient_bytes`` over ``group`` replicas."""
    if group <= 1:
        return 0.0
    return 2 * (group - 1) / group * gradient_bytes / chip.ipu_link_bandwidth
