"""The executor's side of replication across processes.

A training step sums the gradients of its ``G x R`` micro-batches in each
parameter's ``.grad``; :class:`GradientReducer` then says what that sum is
divided by (``G x R`` for ``ReductionType.Mean``, 1 for ``Sum``). In one
process there is nothing more to do. A run over several processes
(``options.Distributed.numProcesses > 1``) needs the gradients of the other
processes' replicas too: ``poptorch_core.distributed`` gives the program a
reducer that all-reduces, through the hook of :mod:`._scale_out_hook`.

Example::

    >>> from poptorch_core.executor._batching import BatchLayout
    >>> layout = BatchLayout(1, 2, 4, 1, poptorch.CommGroupType.Consecutive)
    >>> GradientReducer().reduce([], layout, poptorch.ReductionType.Mean)
    8.0
"""
from typing import Sequence

import torch

from ..enums import ReductionType
from ._batching import BatchLayout

__all__: list = []


class GradientReducer:
    """Reduces the gradients a device iteration accumulated over its
    replicas and accumulation steps: in one process, only the divisor."""

    #: Processes whose replicas contribute gradients.
    num_processes: int = 1

    def all_reduce(self, params: Sequence[torch.Tensor]) -> None:
        """Sums each gradient over the processes (nothing to sum here)."""

    def reduce(self, params: Sequence[torch.Tensor], layout: BatchLayout,
               reduction: ReductionType) -> float:
        """Sums the gradients over all replicas of the run and returns what
        the sum must be divided by: ``G x R x processes`` for ``Mean``, 1
        for ``Sum``."""
        self.all_reduce(params)
        if reduction == ReductionType.Mean:
            return float(layout.gradient_accumulation * layout.replicas *
                         self.num_processes)
        return 1.0
