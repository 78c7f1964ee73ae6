"""Collectives over many tensors at once: one flat buffer per dtype and
device, so that a model's gradients cost one all-reduce rather than one per
parameter.

Example (a group of one process, so the sum is the tensor itself)::

    >>> import torch.distributed as dist
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0,
    ...                         world_size=1)
    >>> grads = [torch.ones(2, 3), torch.full((4,), 2.0)]
    >>> all_reduce_sum(grads)
    >>> grads[1]
    tensor([2., 2., 2., 2.])
    >>> dist.destroy_process_group()
"""
from typing import Callable, Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist


def _buckets(tensors: Sequence[torch.Tensor]
             ) -> List[List[torch.Tensor]]:
    groups: Dict[Tuple[torch.dtype, torch.device], List[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    return list(groups.values())


def _in_place(tensors: Sequence[torch.Tensor],
              collective: Callable[[torch.Tensor], None]) -> None:
    """Runs ``collective`` on each bucket's flat copy and writes the result
    back into the tensors."""
    with torch.no_grad():
        for bucket in _buckets(tensors):
            if len(bucket) == 1 and bucket[0].is_contiguous() and \
                    bucket[0].dtype != torch.bool:
                collective(bucket[0])
                continue
            flat = torch.cat([t.reshape(-1) for t in bucket])
            # Not every backend reduces or sends bool tensors.
            wire = flat.to(torch.uint8) if flat.dtype == torch.bool else flat
            collective(wire)
            offset = 0
            for tensor in bucket:
                count = tensor.numel()
                tensor.copy_(wire[offset:offset + count].view(tensor.shape))
                offset += count


def all_reduce_sum(tensors: Sequence[torch.Tensor]) -> None:
    """Replaces each tensor by its sum over the processes."""
    _in_place(tensors, lambda flat: dist.all_reduce(flat, dist.ReduceOp.SUM))


def broadcast_from_first(tensors: Sequence[torch.Tensor]) -> None:
    """Replaces each tensor by process 0's value."""
    _in_place(tensors, lambda flat: dist.broadcast(flat, src=0))
