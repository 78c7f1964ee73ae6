"""Per-process partitioning of a map-style dataset for distributed runs.

Each process reads one contiguous block of the (optionally shuffled) dataset:
all of process 0's samples, then all of process 1's, and so on. With
shuffling, every epoch draws one global permutation from a generator seeded
with ``Options.randomSeed()``; all processes draw the same permutation, so
their blocks stay disjoint, and the generator state carries over, so each
epoch differs.

This is a sampler rather than PopTorch's dataset wrapper (``_SubDataset``):
a sampler lives in the loading process, so the per-epoch permutation also
reaches persistent DataLoader workers, which hold a copy of the dataset
taken once.

Example::

    >>> sampler = DistributedPartitionSampler(10, combined_batch_size=2,
    ...     num_processes=2, process_id=1, drop_last=True)
    >>> list(sampler)
    [4, 5, 6, 7]
"""
from typing import Iterator, Optional, Sized

import torch

__all__ = ["DistributedPartitionSampler"]


class DistributedPartitionSampler(torch.utils.data.Sampler):
    """Yields the dataset indices of one process's block.

    Args:
        num_samples: length of the whole dataset.
        combined_batch_size: samples per step (blocks are multiples of it
            with ``drop_last``).
        num_processes, process_id: this process's place in the run.
        drop_last: with True every process gets the same number of whole
            steps, ``combined_batch_size * (n // (combined_batch_size * P))``
            samples; the leftovers are used on alternate epochs when
            shuffling. With False the samples are spread evenly, the first
            ``n % P`` processes getting one more.
        seed: shuffle with this seed; None reads the blocks in order.
        base_sampler: a user sampler over the block's local indices
            ``0 .. len(self) - 1``; default: in order.
    """

    def __init__(self, num_samples: int, combined_batch_size: int,
                 num_processes: int, process_id: int, drop_last: bool,
                 seed: Optional[int] = None,
                 base_sampler: Optional[Sized] = None):
        super().__init__()
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id {process_id} is not in "
                             f"[0, num_processes={num_processes})")
        if drop_last:
            per_process = combined_batch_size * (
                num_samples // (combined_batch_size * num_processes))
            self._offset = process_id * per_process
            self._length = per_process
            # PopTorch used num_samples % per_process, which is not the
            # number of unused samples when per_process is small (and
            # divides by zero when it is 0).
            self._leftovers = num_samples - per_process * num_processes
        else:
            per_process, remainder = divmod(num_samples, num_processes)
            self._offset = process_id * per_process + min(process_id,
                                                          remainder)
            self._length = per_process + (1 if process_id < remainder else 0)
            self._leftovers = 0
        self._num_samples = num_samples
        self._seed = seed
        self._generator_state: Optional[torch.Tensor] = None
        self._epoch = 0
        self._base_sampler = base_sampler

    def __len__(self) -> int:
        return self._length

    def _next_permutation(self) -> torch.Tensor:
        generator = torch.Generator()
        if self._generator_state is None:
            generator.manual_seed(self._seed)
        else:
            generator.set_state(self._generator_state)
        permutation = torch.randperm(self._num_samples, generator=generator)
        self._generator_state = generator.get_state()
        return permutation

    def __iter__(self) -> Iterator[int]:
        offset, order = self._offset, None
        if self._seed is not None:
            order = self._next_permutation()
            if self._epoch % 2 == 1:
                offset += self._leftovers
            self._epoch += 1
        local = (range(self._length) if self._base_sampler is None
                 else self._base_sampler)
        for index in local:
            if not 0 <= index < self._length:
                raise IndexError(
                    f"The sampler yielded index {index}, outside this "
                    f"process's partition of {self._length} samples: with "
                    "auto_distributed_partitioning the sampler indexes the "
                    "process's own part of the dataset.")
            position = offset + index
            yield position if order is None else int(order[position])
