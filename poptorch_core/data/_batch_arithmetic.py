"""Batch arithmetic shared by the DataLoader and the accessor.

Example::

    >>> opts = poptorch.Options().deviceIterations(2).replicationFactor(4)
    >>> num_batches_to_combine(opts)
    8
    >>> [b.tolist() for b in combined_batch_generator(
    ...     [torch.tensor([0]), torch.tensor([1]), torch.tensor([2])], 2,
    ...     drop_last=False)]
    [[0, 1], [2]]
"""
from typing import Any, Iterable, Iterator, List

import torch

from ._structure import flatten, rebuild

__all__ = ["num_batches_to_combine", "combined_batch_generator",
           "count_batches", "samples_per_epoch"]


def num_batches_to_combine(options: Any) -> int:
    """Mini-batches a model consumes per call:
    ``D * (R // input_group_size) * G``."""
    return (options.device_iterations *
            (options.replication_factor // options.input_group_size) *
            options.Training.gradient_accumulation)


def count_batches(samples: int, batch_size: int, drop_last: bool) -> int:
    """``samples / batch_size`` rounded down with ``drop_last``, else up."""
    full, partial = divmod(samples, batch_size)
    return full + (1 if partial and not drop_last else 0)


def _combine(batches: List[Any]) -> Any:
    if len(batches) == 1:
        return batches[0]
    flat = [flatten(batch) for batch in batches]
    if len({len(tensors) for tensors in flat}) != 1:
        raise ValueError(
            "Cannot combine the batches of the batch_sampler: they hold "
            f"different numbers of tensors ({[len(t) for t in flat]}).")
    combined = []
    for position, tensors in enumerate(zip(*flat)):
        try:
            combined.append(torch.cat(tensors, dim=0))
        except RuntimeError as error:
            raise ValueError(
                f"Cannot concatenate tensor {position} of the batches of the "
                f"batch_sampler along dim 0 (shapes "
                f"{[tuple(t.shape) for t in tensors]}): {error}") from error
    return rebuild(batches[0], iter(combined))


def combined_batch_generator(batches: Iterable[Any], num_batches: int,
                             drop_last: bool) -> Iterator[Any]:
    """Concatenates each group of ``num_batches`` consecutive batches
    along dim 0 (tensor ``i`` with tensor ``i``), rebuilding the structure of
    the group's first batch (custom types through their registered parser,
    other objects through their tensor attributes).
    A final incomplete group is dropped if ``drop_last``, else combined."""
    group: List[Any] = []
    for batch in batches:
        group.append(batch)
        if len(group) == num_batches:
            yield _combine(group)
            group = []
    if group and not drop_last:
        yield _combine(group)


def samples_per_epoch(loader: torch.utils.data.DataLoader) -> int:
    """How many samples a torch DataLoader with a ``batch_size`` yields per
    epoch (after its own ``drop_last``)."""
    sampler = loader.sampler
    if hasattr(sampler, "__len__") and not isinstance(
            loader.dataset, torch.utils.data.IterableDataset):
        samples = len(sampler)
    else:
        samples = len(loader.dataset)
    if loader.drop_last:
        samples -= samples % loader.batch_size
    return samples
