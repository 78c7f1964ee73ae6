"""Splitting inputs into micro-batches and building outputs.

Per call the executor consumes ``D x G x (R/g)`` micro-batches. A host
tensor is laid out ``[D][G][R/g][micro, ...]`` along dim 0: device iteration
outermost, then accumulation step, then input group. Outputs are rebuilt per
output mode in the same ``[D][G][R]`` order.
"""
import dataclasses
from typing import List, Optional, Sequence

import torch

from ..enums import CommGroupType, OutputMode


@dataclasses.dataclass(frozen=True)
class BatchLayout:
    """How one call's inputs are split and its outputs combined."""
    device_iterations: int
    gradient_accumulation: int
    replicas: int
    input_group_size: int
    input_cgt: CommGroupType = CommGroupType.Consecutive

    @property
    def input_groups(self) -> int:
        return self.replicas // self.input_group_size

    @property
    def num_micro_batches(self) -> int:
        """Distinct micro-batches per call: D x G x (R/g)."""
        return (self.device_iterations * self.gradient_accumulation *
                self.input_groups)

    @property
    def num_steps(self) -> int:
        """Micro-batch executions per call: D x G x R."""
        return (self.device_iterations * self.gradient_accumulation *
                self.replicas)

    def input_group_of(self, replica: int) -> int:
        """The input group replica ``replica`` reads."""
        if self.input_cgt == CommGroupType.Orthogonal:
            return replica % self.input_groups
        return replica // self.input_group_size

    def is_last_reader(self, replica: int) -> bool:
        """Whether no replica after ``replica`` (in execution order) reads
        its input group."""
        if self.input_cgt == CommGroupType.Orthogonal:
            return replica >= self.replicas - self.input_groups
        return replica % self.input_group_size == self.input_group_size - 1

    def check_divisible(self, tensor: torch.Tensor) -> None:
        product = self.num_micro_batches
        batch = tensor.shape[0] if tensor.dim() > 0 else 1
        if batch % product != 0:
            raise AssertionError(
                f"Invalid batch dimension: In the input {tensor.shape}, the batch "
                f"dimension ({batch}) must be a multiple of "
                f"Options.deviceIterations({self.device_iterations}) * "
                f"(Options.replicationFactor({self.replicas}) / "
                f"Options.inputReplicaGrouping.input_group_size("
                f"{self.input_group_size})) * "
                f"Options.Training.gradientAccumulation("
                f"{self.gradient_accumulation}) = {product} because it is used to "
                "calculate the batch size which will be executed on the device "
                "in any given iteration. For a full explanation see the batching "
                "semantics page of the PopTorch documentation.")

    def micro_shape(self, tensor: torch.Tensor) -> torch.Size:
        if tensor.dim() == 0:
            return tensor.shape
        return torch.Size((tensor.shape[0] // self.num_micro_batches,) +
                          tuple(tensor.shape[1:]))

    def split(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        """Views of the micro-batches of ``tensor``, index
        ``(d * G + g) * (R/g) + group``."""
        if tensor.dim() == 0 or self.num_micro_batches == 1:
            return [tensor] * self.num_micro_batches
        return list(tensor.view(self.num_micro_batches, -1,
                                *tensor.shape[1:]).unbind(0))

    def micro_index(self, iteration: int, step: int, replica: int) -> int:
        return ((iteration * self.gradient_accumulation + step) *
                self.input_groups + self.input_group_of(replica))

    def padding_only(self, masks: Sequence[torch.Tensor]
                     ) -> Optional[List[bool]]:
        """Per micro-batch (by :meth:`micro_index`), whether it holds
        padding only: its part of every mask in ``masks`` (the inputs'
        padding masks, non-zero where an entry is real, split as the inputs
        are) has no non-zero entry. None without masks: nothing is known to
        be padding.

        Example (2 micro-batches of 2 rows; the second is padding)::

            >>> layout = BatchLayout(1, 2, 1, 1)
            >>> layout.padding_only([torch.tensor([True, False, False,
            ...                                    False])])
            [False, True]
        """
        if not masks:
            return None
        count = self.num_micro_batches
        real = [False] * count
        for mask in masks:
            self.check_divisible(mask)
            if mask.dim() == 0 or count == 1:
                found = [bool(mask.any())] * count
            else:
                found = mask.reshape(count, mask.shape[0] // count,
                                     *mask.shape[1:]).flatten(1).any(
                                         dim=1).tolist()
            real = [r or f for r, f in zip(real, found)]
        return [not r for r in real]


class OutputCollector:
    """Collects one output's micro-batch results and combines them per
    :class:`~poptorch_core.enums.OutputMode`."""

    def __init__(self, layout: BatchLayout, mode: OutputMode, period: int):
        self._layout = layout
        self._mode = OutputMode(mode)
        self._period = max(1, period)
        self._parts: List[torch.Tensor] = []
        self._sums: List[Optional[torch.Tensor]] = [None] * layout.replicas

    def wants(self, iteration: int, step: int) -> bool:
        """Whether the result of micro-step ``(iteration, step)`` is kept."""
        mode, layout = self._mode, self._layout
        if mode in (OutputMode.All, OutputMode.Sum):
            return True
        position = iteration * layout.gradient_accumulation + step
        if mode == OutputMode.Final:
            return position == (layout.device_iterations *
                                layout.gradient_accumulation - 1)
        return (position + 1) % self._period == 0  # EveryN

    def add(self, replica: int, value: torch.Tensor) -> None:
        if self._mode == OutputMode.Sum:
            current = self._sums[replica]
            self._sums[replica] = value.clone() if current is None \
                else current + value
        else:
            self._parts.append(value)

    def combine(self, may_alias: bool = False) -> torch.Tensor:
        """The host result. ``may_alias``: the graph output can share memory
        with an input or a weight, so a single kept part is copied (a
        concatenation or a sum is a new tensor anyway)."""
        parts = self._parts if self._mode != OutputMode.Sum else self._sums
        if len(parts) == 1:
            single = parts[0]
            return single.clone() if may_alias and self._parts else single
        parts = [p.reshape(1) if p.dim() == 0 else p for p in parts]
        return torch.cat(parts, dim=0)
