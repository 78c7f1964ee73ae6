"""Joining a compiled training model to the distributed run.

After a training model compiles in a run of several processes, every
process checks that the others compiled the same thing, takes process 0's
weights and buffers, and from then on sums each optimizer step's gradients
over all processes before the step: ``Mean`` divides by the number of real
micro-batches over all processes (``G x R x processes`` when none holds
padding only), ``Sum`` by nothing, exactly as for the replicas of one
process; a step without a real micro-batch anywhere is skipped by every
process. Every process then applies the same update to the same weights, so
``copyWeightsToHost`` gives all of them the same model.

Inference models take no part: nothing needs to be exchanged, and a
process may run inference alone (for instance on rank 0 only).
"""
from typing import Any, List, Sequence

import torch
import torch.distributed as dist

from ..errors import createPoptorchError
from .._executor.program import Program
from .._executor.scale_out import GradientReducer
from .._executor.state import ExecutorState
from ._buckets import all_reduce_sum, broadcast_from_first
from ._consistency import check_same, describe
from ._group import ProcessGroup, process_group
from ._launch import Launch


class AllReduceGradients(GradientReducer):
    """Sums gradients and real micro-batch counts over the processes of
    the run."""

    def __init__(self, group: ProcessGroup):
        self._group = group
        self.num_processes = group.launch.world_size
        self._steps = 0

    def all_reduce(self, params: Sequence[torch.Tensor], real: int) -> int:
        self._steps += 1
        # A process whose micro-batches all held padding has no gradients:
        # the processes first agree on the count and on which parameters
        # have a gradient anywhere, so that every process sums the same
        # tensors (zeros standing in for the missing ones).
        # On the parameters' device: NCCL reduces CUDA tensors only.
        counts = torch.tensor([real] + [p.grad is not None for p in params],
                              dtype=torch.float64,
                              device=params[0].device if params else None)
        with self._group.guard("the count of real micro-batches of "
                               f"optimizer step {self._steps}"):
            all_reduce_sum([counts])
        total, *present = (int(c) for c in counts.tolist())
        if total == 0:
            return 0
        for param, anywhere in zip(params, present):
            if anywhere and param.grad is None:
                param.grad = torch.zeros_like(param)
        grads = [p.grad for p in params if p.grad is not None]
        with self._group.guard("the gradient all-reduce of optimizer step "
                               f"{self._steps}"):
            all_reduce_sum(grads)
        return total


#: Distributed training models this process compiled so far.
_compiled = 0


def join(state: ExecutorState, program: Program) -> None:
    """The executor's scale-out hook: joins a freshly compiled ``program``
    of ``state`` to the run."""
    global _compiled
    if not state.training:
        return
    if program.state.grouped:
        raise createPoptorchError(
            "Replica-grouped weights (replicaGrouping) are not supported in "
            "a run of several processes yet: their groups would have to "
            "span the replicas of every process. Remove replicaGrouping() "
            "or run a single process.")
    group = process_group(Launch.of(state.options))
    mine = describe(state, program, _compiled)
    _compiled += 1
    everyone: List[Any] = [None] * group.launch.world_size
    with group.guard("the compile-time check that all processes compiled "
                     "the same model"):
        dist.all_gather_object(everyone, mine)
    check_same(everyone)
    device = program.state
    with group.guard("the broadcast of the weights from rank 0"):
        broadcast_from_first(device.params + [
            b for buffers in device.replica_buffers for b in buffers])
    program.gradient_reducer = AllReduceGradients(group)
    # The device now holds rank 0's weights: the host copy follows on use.
    state.host_weights_stale = True
