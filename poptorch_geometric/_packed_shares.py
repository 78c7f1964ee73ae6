"""Each process's share of packed batches in a distributed run.

Stream packing decides the batches from the graphs' sizes, so the processes
of a run cannot split the dataset first and pack their parts: their parts
would make different numbers of batches, and a process that runs out of
batches early leaves the others waiting on its gradients. Instead every
process packs the whole (identically shuffled) dataset, which is cheap
(sizes only), and takes one contiguous block of the batches. Every process
gets the same number of batches: ``len(batches) // processes``, rounded down
to whole steps (``deviceIterations x replicas x gradientAccumulation``
batches) with ``drop_last``. Up to ``processes - 1`` batches per epoch are
therefore left out even without ``drop_last``; shuffling leaves out
different graphs every epoch.

Example (10 batches of one graph each, 3 processes, 2 batches per step)::

    >>> batches = [[i] for i in range(10)]
    >>> [list(PartitionedBatchSampler(batches, 3, rank, 2, drop_last=True))
    ...  for rank in range(3)]
    [[[0], [1]], [[2], [3]], [[4], [5]]]
    >>> [len(PartitionedBatchSampler(batches, 3, rank, 2, drop_last=False))
    ...  for rank in range(3)]
    [3, 3, 3]
"""
from typing import Iterable, Iterator, List, Sized

from torch.utils.data import Sampler

__all__ = ["PartitionedBatchSampler"]


class PartitionedBatchSampler(Sampler[List[int]]):
    """Yields one process's block of the batches of ``batch_sampler``.

    Args:
        batch_sampler: yields every batch of the epoch; it must yield the
            same batches in every process (seed its shuffling identically).
        num_processes, process_id: this process's place in the run.
        batches_per_step: batches each step of the model consumes.
        drop_last: give every process a whole number of steps.
    """

    def __init__(self, batch_sampler: Iterable[List[int]], num_processes: int,
                 process_id: int, batches_per_step: int, drop_last: bool):
        super().__init__()
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id {process_id} is not in "
                             f"[0, num_processes={num_processes})")
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_id = process_id
        self.batches_per_step = batches_per_step
        self.drop_last = drop_last

    def _share(self, num_batches: int) -> range:
        per_process = num_batches // self.num_processes
        if self.drop_last:
            per_process -= per_process % self.batches_per_step
        start = self.process_id * per_process
        return range(start, start + per_process)

    def __iter__(self) -> Iterator[List[int]]:
        batches = list(self.batch_sampler)
        for index in self._share(len(batches)):
            yield batches[index]

    def __len__(self) -> int:
        if not isinstance(self.batch_sampler, Sized):
            raise TypeError("The batch sampler has no length")
        return len(self._share(len(self.batch_sampler)))

    @property
    def skipped_indices(self) -> List[int]:
        """Samples the packing skipped this epoch (in every process)."""
        return getattr(self.batch_sampler, "skipped_indices", [])
