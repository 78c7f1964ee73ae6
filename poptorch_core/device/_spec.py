"""What the device model is told about a compiled model (:class:`StepSpec`).

The executor fills one :class:`StepSpec` after tracing: the traced step,
its weights, the options that shape a step (device iterations, gradient
accumulation, replication, strategy, available memory, IPU version) and
the optimizer. Everything else is derived from the graph.

Example::

    >>> gm = torch.fx.symbolic_trace(torch.nn.Linear(4, 2))
    >>> spec = StepSpec(gm, training=False, params=[
    ...     ParamSpec("weight", torch.zeros(2, 4)),
    ...     ParamSpec("bias", torch.zeros(2))])
    >>> [p.name for p in spec.params], spec.ipu_version
    (['weight', 'bias'], 2)
"""
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

from ..enums import OutputMode

__all__ = ["StepSpec", "ParamSpec"]

#: PopTorch's default ``availableMemoryProportion``.
DEFAULT_AVAILABLE_MEMORY = 0.6


@dataclasses.dataclass
class ParamSpec:
    """One parameter placeholder of the traced step.

    Attributes:
        name: the parameter's (first) name in the model.
        host: the host parameter (the optimizer refers to it).
        trainable: whether it gets a gradient.
        groups: distinct values across the replicas (replica-grouped
            weights); 1 for an ordinary weight.
        group_size: replicas sharing one value (its gradients are reduced
            within the group); None for all replicas.
    """
    name: str
    host: torch.Tensor
    trainable: bool = True
    groups: int = 1
    group_size: Optional[int] = None


@dataclasses.dataclass
class StepSpec:
    """A compiled model as the device model sees it.

    Attributes:
        graph: the traced forward of one micro-batch (placeholders:
            parameters, buffers, inputs; see ``tracing.capture``).
        training: whether a backward and an optimizer step follow.
        params: one entry per parameter placeholder, in order.
        num_buffers: buffer placeholders following the parameters.
        blocks: block id -> ``(stage, ipu)`` as the strategy resolved them.
        strategy: the execution strategy (``opts._execution_strategy``).
        optimizer: the host optimizer (training).
        available_memory: IPU -> ``availableMemoryProportion``.
        output_mode: the model's ``OutputMode`` (and ``output_period`` for
            ``EveryN``).
        excludes: path fragments never shown as the user's source line.
    """
    graph: torch.fx.GraphModule
    training: bool
    params: List[ParamSpec]
    num_buffers: int = 0
    device_iterations: int = 1
    gradient_accumulation: int = 1
    replicas: int = 1
    blocks: Dict[str, Tuple[int, int]] = dataclasses.field(
        default_factory=dict)
    strategy: Any = None
    optimizer: Optional[torch.optim.Optimizer] = None
    available_memory: Dict[int, float] = dataclasses.field(
        default_factory=dict)
    ipu_version: int = 2
    output_mode: OutputMode = OutputMode.All
    output_period: int = 1
    excludes: Sequence[str] = ()

    @property
    def placeholders(self) -> List[torch.fx.Node]:
        """The graph's placeholders: parameters, buffers, then inputs."""
        return [n for n in self.graph.graph.nodes if n.op == "placeholder"]

    @property
    def micro_batches(self) -> int:
        """Micro-batches one replica runs per optimizer step (G), or per
        call for inference (D)."""
        return self.gradient_accumulation if self.training else \
            self.device_iterations

    def output_share(self) -> float:
        """Share of the micro-batches whose outputs go to the host."""
        if self.output_mode == OutputMode.All:
            return 1.0
        if self.output_mode == OutputMode.EveryN:
            return 1.0 / max(self.output_period, 1)
        # Final and Sum: once per call.
        return 1.0 / (self.device_iterations * self.gradient_accumulation)

    def amp(self, ipu: int) -> float:
        """``availableMemoryProportion`` of ``ipu``."""
        return self.available_memory.get(ipu, DEFAULT_AVAILABLE_MEMORY)

    def is_pipelined(self) -> bool:
        """Whether stages on different IPUs overlap (PipelinedExecution,
        not Sharded)."""
        from ..annotations import PipelinedExecution, ShardedExecution
        return isinstance(self.strategy, PipelinedExecution) and \
            not isinstance(self.strategy, ShardedExecution)

    def _backend_options(self) -> Dict[str, Any]:
        return self.strategy.backendOptions() if self.strategy is not None \
            else {}

    def is_phased(self) -> bool:
        """Serial or parallel phased execution."""
        return self._backend_options().get("execution_mode") == 2

    def parallel_phases(self) -> bool:
        """Whether phases run in parallel (``ParallelPhasedExecution``
        without serial phase execution)."""
        return self.is_phased() and not self._backend_options().get(
            "serial_phases_execution", True)

    def phase_of(self) -> Optional[Any]:
        """block id -> phase for phased strategies, else None."""
        # The strategy's own lookup: phases have no public per-block view.
        return self.strategy._phaseOf if self.is_phased() else None
