"""The executor's side of replication across processes.

A training step sums the gradients of its real micro-batches (those not
known to hold padding only, see ``ICustomArgParser.paddingMask``) in each
parameter's ``.grad``; :class:`GradientReducer` then says what that sum is
divided by: the number of real micro-batches for ``ReductionType.Mean``
(``G x R`` when every micro-batch is real), 1 for ``Sum``, or None when no
micro-batch of the step was real, so that the step is not taken. In one
process there is nothing more to do. A run over several processes
(``options.Distributed.numProcesses > 1``) needs the gradients and counts of
the other processes' replicas too: ``poptorch_core.distributed`` gives the
program a reducer that all-reduces, through the hook of
:mod:`.scale_out_hook`.

Example::

    >>> from poptorch_core._executor.micro_batches import BatchLayout
    >>> layout = BatchLayout(1, 2, 4, 1, poptorch.CommGroupType.Consecutive)
    >>> GradientReducer().reduce([], layout, poptorch.ReductionType.Mean)
    8.0
    >>> GradientReducer().reduce([], layout, poptorch.ReductionType.Mean,
    ...                          real=3)   # 5 micro-batches of padding only
    3.0
    >>> GradientReducer().reduce([], layout, poptorch.ReductionType.Sum,
    ...                          real=0) is None   # no step at all
    True
"""
from typing import Optional, Sequence

import torch

from ..enums import ReductionType
from .micro_batches import BatchLayout


class GradientReducer:
    """Reduces the gradients a device iteration accumulated over its
    replicas and accumulation steps: in one process, only the divisor."""

    #: Processes whose replicas contribute gradients.
    num_processes: int = 1

    def all_reduce(self, params: Sequence[torch.Tensor], real: int) -> int:
        """Sums each gradient over the processes and returns the number of
        real micro-batches over them, ``real`` being this process's
        (nothing to sum here)."""
        return real

    def reduce(self, params: Sequence[torch.Tensor], layout: BatchLayout,
               reduction: ReductionType, real: Optional[int] = None
               ) -> Optional[float]:
        """Sums the gradients over all replicas of the run and returns what
        the sum must be divided by: the real micro-batches over all
        processes for ``Mean``, 1 for ``Sum``; None when none was real.

        Args:
            real: this process's micro-batches that added gradients
                (default: all ``G x R``).
        """
        if real is None:
            real = layout.gradient_accumulation * layout.replicas
        total = self.all_reduce(params, real)
        if total == 0:
            return None
        return float(total) if reduction == ReductionType.Mean else 1.0
