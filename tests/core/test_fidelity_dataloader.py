"""poptorch.DataLoader with ``sampler=`` and ``batch_sampler=`` (issue 13,
item 4): custom and dynamic-size batch samplers, custom ``collate_fn``
returning custom batch classes, in every mode, with and without worker
processes and ``drop_last``.

The expected batches are built independently from the sampler's own order:
``D x R x G`` consecutive micro-batches joined along dim 0, the last
incomplete group kept only without ``drop_last``.
"""
import dataclasses
import itertools

import pytest
import torch

import poptorch
from poptorch import DataLoader, DataLoaderMode

LENGTH = 29
PERMUTATION = torch.randperm(LENGTH, generator=torch.Generator().manual_seed(3))
PAD = 3   # the dynamic sampler's largest batch


class Samples(torch.utils.data.Dataset):
    """Sample i is (i, 10 * i)."""

    def __len__(self):
        return LENGTH

    def __getitem__(self, i):
        return torch.tensor([i, 10 * i])


class SizesCycle:
    """A batch sampler with batches of 1, 2, 3, 1, 2, 3... samples taken in
    the order of PERMUTATION (no ``batch_size`` attribute)."""

    def __iter__(self):
        order, start = PERMUTATION.tolist(), 0
        for size in itertools.cycle((1, 2, 3)):
            if start >= len(order):
                return
            yield order[start:start + size]
            start += size

    def __len__(self):
        return len(list(iter(self)))


@dataclasses.dataclass
class Padded:
    """A custom batch class without a registered parser."""
    ids: torch.Tensor
    tens: torch.Tensor
    mask: torch.Tensor
    note: str = "padded"


def pad_collate(samples):
    """Pads every micro-batch to PAD samples: fixed shapes, as a model (and
    the asynchronous accessor) needs."""
    stacked = torch.stack(samples)
    real = stacked.shape[0]
    padded = torch.full((PAD, 2), -1, dtype=stacked.dtype)
    padded[:real] = stacked
    mask = torch.arange(PAD) < real
    return Padded(padded[:, 0], padded[:, 1], mask)


def _options():
    return poptorch.Options().deviceIterations(2).replicationFactor(2)


GROUP = 4  # micro-batches per call: D=2 x R=2


def _groups(batches, drop_last):
    groups = [batches[i:i + GROUP] for i in range(0, len(batches), GROUP)]
    if drop_last and groups and len(groups[-1]) < GROUP:
        groups.pop()
    return groups


def _expected_dynamic(drop_last):
    result = []
    for group in _groups(list(SizesCycle()), drop_last):
        ids, mask = [], []
        for batch in group:
            ids += batch + [-1] * (PAD - len(batch))
            mask += [True] * len(batch) + [False] * (PAD - len(batch))
        result.append((ids, mask))
    return result


def _expected_sampler(drop_last):
    order = PERMUTATION.tolist()
    micro = [order[i:i + 2] for i in range(0, len(order), 2)]
    return [list(itertools.chain(*g)) for g in _groups(micro, drop_last)]


def _collect(loader, read):
    try:
        first = [read(batch) for batch in loader]
        second = [read(batch) for batch in loader]   # a second epoch
        assert first == second
        assert len(loader) == len(first)
        return first
    finally:
        loader.terminate()


MODES = [DataLoaderMode.Sync, DataLoaderMode.Async,
         DataLoaderMode.AsyncRebatched]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("drop_last", [True, False])
def test_dynamic_batch_sampler_with_custom_batch_class(mode, num_workers,
                                                       drop_last):
    loader = DataLoader(_options(), Samples(), batch_sampler=SizesCycle(),
                        collate_fn=pad_collate, num_workers=num_workers,
                        drop_last=drop_last, mode=mode)

    def read(batch):
        assert isinstance(batch, Padded) and batch.note == "padded"
        assert torch.equal(batch.tens, torch.where(batch.mask,
                                                   batch.ids * 10, -1))
        return batch.ids.tolist(), batch.mask.tolist()

    assert _collect(loader, read) == _expected_dynamic(drop_last)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("drop_last", [True, False])
def test_sampler_gives_the_order_of_each_combined_batch(mode, num_workers,
                                                        drop_last):
    loader = DataLoader(_options(), Samples(), batch_size=2,
                        sampler=PERMUTATION.tolist(), num_workers=num_workers,
                        drop_last=drop_last, mode=mode)
    assert loader.combinedBatchSize == 2 * GROUP

    def read(batch):
        assert torch.equal(batch[:, 1], batch[:, 0] * 10)
        return batch[:, 0].tolist()

    assert _collect(loader, read) == _expected_sampler(drop_last)


class Pair:
    """A plain batch class: tensors in attributes, and a non-tensor one."""

    def __init__(self, ids, tens):
        self.ids, self.tens, self.size = ids, tens, len(ids)


def pair_collate(samples):
    stacked = torch.stack(samples)
    return Pair(stacked[:, 0], stacked[:, 1])


@pytest.mark.parametrize("drop_last", [True, False])
def test_custom_class_from_collate_keeps_every_micro_batch(drop_last):
    sampler = torch.utils.data.BatchSampler(PERMUTATION.tolist(), 2,
                                            drop_last=False)
    loader = DataLoader(_options(), Samples(), batch_sampler=sampler,
                        collate_fn=pair_collate, drop_last=drop_last)
    batches = list(loader)
    assert all(isinstance(b, Pair) for b in batches)
    assert [b.ids.tolist() for b in batches] == _expected_sampler(drop_last)
    assert all(torch.equal(b.tens, b.ids * 10) for b in batches)


def test_combined_batches_feed_a_model_per_micro_batch():
    # The loader's combined batches are what a model with D=2, R=2 takes in
    # one call: each replica and iteration sees one padded micro-batch.
    class Model(torch.nn.Module):
        def forward(self, ids, mask):
            return (ids * mask).sum(dim=0, keepdim=True)

    loader = DataLoader(_options(), Samples(), batch_sampler=SizesCycle(),
                        collate_fn=pad_collate)
    model = poptorch.inferenceModel(Model(), _options())
    for batch, (ids, mask) in zip(loader, _expected_dynamic(True)):
        out = model(batch.ids, batch.mask.int())
        sums = [sum(i for i, m in zip(ids[k:k + PAD], mask[k:k + PAD]) if m)
                for k in range(0, len(ids), PAD)]
        assert out.tolist() == sums
