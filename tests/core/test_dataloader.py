"""poptorch.DataLoader: combined batch sizes, lengths and order (checked
against plain slicing of the dataset), leftovers, batch samplers, custom
batch types, distributed partitioning, the asynchronous modes (checked
against Sync mode) and every validation error of the spec."""
import itertools

import pytest
import torch

import poptorch_core as poptorch
from poptorch_core import CommGroupType, DataLoader, DataLoaderMode


class Indices(torch.utils.data.Dataset):
    """Element i is i, so a batch shows which samples it holds."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        return torch.tensor([i, 2 * i])


class Records(torch.utils.data.Dataset):
    """Dict samples."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return {"x": torch.full((3,), float(i)), "label": torch.tensor(i)}


class IndexStream(torch.utils.data.IterableDataset):
    """0..length-1, split between torch workers by ``worker_init``."""

    def __init__(self, length):
        self.start, self.end = 0, length

    def __iter__(self):
        for i in range(self.start, self.end):
            yield torch.tensor([i, 2 * i])


def worker_init(worker_id):
    info = torch.utils.data.get_worker_info()
    dataset = info.dataset
    per_worker = -(-(dataset.end - dataset.start) // info.num_workers)
    dataset.start, dataset.end = (
        dataset.start + worker_id * per_worker,
        min(dataset.end, dataset.start + (worker_id + 1) * per_worker))


def make_options(D=1, R=1, g=1, G=1):
    opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
    if g > 1:
        opts.inputReplicaGrouping(g, CommGroupType.Consecutive)
    opts.Training.gradientAccumulation(G)
    return opts


def expected_batches(indices, size, drop_last):
    """The reference: consecutive slices of ``indices``."""
    batches = [indices[i:i + size] for i in range(0, len(indices), size)]
    if drop_last and batches and len(batches[-1]) < size:
        batches.pop()
    return batches


def first_column(batches):
    return [batch[:, 0].tolist() for batch in batches]


# D, R, g, G: g divides R.
GRID = [(1, 1, 1, 1), (2, 1, 1, 1), (1, 4, 1, 1), (1, 4, 2, 1), (1, 4, 4, 1),
        (1, 1, 1, 3), (2, 2, 1, 2), (3, 4, 2, 2), (2, 6, 3, 1)]


@pytest.mark.parametrize("D,R,g,G", GRID)
def test_combined_batch_size_length_and_order(D, R, g, G):
    opts = make_options(D, R, g, G)
    for batch_size, length, drop_last in itertools.product(
            [1, 3], [5, 24, 61], [True, False]):
        cbs = batch_size * D * (R // g) * G
        loader = DataLoader(opts, Indices(length), batch_size=batch_size,
                            drop_last=drop_last)
        expected = expected_batches(list(range(length)), cbs, drop_last)
        assert loader.combinedBatchSize == cbs
        assert len(loader) == len(expected)
        if not expected:  # smaller than one step: said, not zero steps
            with pytest.raises(poptorch.Error, match="yields no batch"):
                first_column(loader)
            continue
        assert first_column(loader) == expected


def test_options_are_frozen_and_exposed():
    opts = make_options(D=2)
    loader = DataLoader(opts, Indices(8), batch_size=2)
    assert loader.options is opts
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        opts.deviceIterations(3)


def test_defaults_follow_the_spec():
    loader = DataLoader(make_options(), Indices(8))
    assert loader.combinedBatchSize == 1
    assert loader.drop_last is True
    assert loader.persistent_workers is False
    loader = DataLoader(make_options(), Indices(8), num_workers=1)
    assert loader.persistent_workers is True


def test_batch_size_none_yields_dataset_items():
    loader = DataLoader(make_options(D=2), Indices(3), batch_size=None)
    assert loader.combinedBatchSize is None
    assert [t.tolist() for t in loader] == [[0, 0], [1, 2], [2, 4]]


def test_dict_samples():
    loader = DataLoader(make_options(D=2), Records(), batch_size=2,
                        drop_last=False)
    batches = list(loader)
    assert [b["label"].tolist() for b in batches] == \
        expected_batches(list(range(10)), 4, drop_last=False)
    assert batches[0]["x"].shape == (4, 3)


def test_drop_last_false_warns_about_the_short_batch(log_records):
    DataLoader(make_options(D=2), Indices(7), batch_size=2, drop_last=False)
    assert any("(7) is not divisible" in r.getMessage() for r in log_records)


def test_kwargs_reach_the_torch_loader():
    collated = []

    def collate(samples):
        collated.append(len(samples))
        return torch.stack(samples)

    loader = DataLoader(make_options(D=2), Indices(8), batch_size=2,
                        collate_fn=collate)
    assert first_column(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert collated == [4, 4]


class Graphs:
    """A custom batch type. ``name`` is not a tensor: combined batches keep
    the first batch's, through the registered parser."""
    fields = ("nodes", "labels")

    def __init__(self, nodes, labels, name):
        self.nodes, self.labels, self.name = nodes, labels, name


class GraphsParser(poptorch.ICustomArgParser):

    def yieldTensors(self, struct):
        return [getattr(struct, field) for field in struct.fields]

    def reconstruct(self, original_structure, tensor_iterator):
        return Graphs(*itertools.islice(tensor_iterator, 2),
                      name=original_structure.name)


@pytest.fixture
def graphs_parser():
    poptorch.registerCustomArgParser(Graphs, GraphsParser())
    yield
    poptorch.registerCustomArgParser(Graphs, None)


@pytest.mark.parametrize("drop_last", [True, False])
def test_batch_sampler_batches_are_combined(drop_last, graphs_parser):
    dataset = Indices(23)
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(dataset), batch_size=3,
        drop_last=False)

    def collate(samples):
        stacked = torch.stack(samples)
        return Graphs(stacked, -stacked[:, :1], name=f"from {samples[0][0]}")

    opts = make_options(D=2, R=2)
    loader = DataLoader(opts, dataset, batch_sampler=sampler,
                        drop_last=drop_last, collate_fn=collate)
    # Reference: groups of 4 consecutive sampler batches, concatenated.
    groups = expected_batches(list(sampler), 4, drop_last)
    expected = [list(itertools.chain(*group)) for group in groups]
    batches = list(loader)
    assert loader.combinedBatchSize == 12
    assert len(loader) == len(expected)
    assert all(isinstance(b, Graphs) for b in batches)
    assert first_column(b.nodes for b in batches) == expected
    assert [(-b.labels[:, 0]).tolist() for b in batches] == expected
    assert [b.name for b in batches] == [f"from {g[0]}" for g in expected]


def test_batch_sampler_errors():
    sampler = torch.utils.data.BatchSampler(range(8), 2, False)
    opts = make_options()
    message = "`batch_sampler` option is mutually exclusive with batch_size, shuffle."
    with pytest.raises(poptorch.Error, match=message):
        DataLoader(opts, Indices(8), batch_size=2, batch_sampler=sampler)
    with pytest.raises(poptorch.Error, match=message):
        DataLoader(opts, Indices(8), shuffle=True, batch_sampler=sampler)
    opts = make_options()
    opts.Distributed.configureProcessId(0, 2)
    with pytest.raises(
            poptorch.Error,
            match="mutually exclusive with auto_distributed_partitioning=True"):
        DataLoader(opts, Indices(8), batch_sampler=sampler)


def test_options_type_is_checked():
    with pytest.raises(AssertionError, match="poptorch.Options"):
        DataLoader({"device_iterations": 2}, Indices(8))


def test_iterable_dataset(log_records):
    loader = DataLoader(make_options(D=2), IndexStream(11), batch_size=2,
                        drop_last=False)
    assert first_column(loader) == expected_batches(list(range(11)), 4,
                                                    drop_last=False)
    with pytest.raises(TypeError, match="'IndexStream' has no len()"):
        len(loader)
    DataLoader(make_options(), IndexStream(11), num_workers=2)
    assert any("worker_init_fn" in r.getMessage() for r in log_records)
    opts = make_options()
    opts.Distributed.configureProcessId(1, 2)
    with pytest.raises(AssertionError, match="auto_distributed_partitioning"):
        DataLoader(opts, IndexStream(11))
    DataLoader(opts, IndexStream(11), auto_distributed_partitioning=False)


def distributed_loaders(num_processes, **kwargs):
    """One loader per simulated process, on a dataset of 45 samples with a
    combined batch size of 4."""
    loaders = []
    for process_id in range(num_processes):
        opts = make_options(D=2).randomSeed(42)
        opts.Distributed.configureProcessId(process_id, num_processes)
        loaders.append(DataLoader(opts, Indices(45), batch_size=2, **kwargs))
    return loaders


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("num_processes", [2, 3])
def test_distributed_partitions_are_disjoint_and_cover(shuffle,
                                                       num_processes):
    length, cbs = 45, 4
    loaders = distributed_loaders(num_processes, shuffle=shuffle)
    per_process = cbs * (length // (cbs * num_processes))
    epochs = []
    for _ in range(3):
        parts = [[i for batch in first_column(loader) for i in batch]
                 for loader in loaders]
        for loader, part in zip(loaders, parts):
            assert len(loader) == per_process // cbs
            assert len(part) == per_process
        everything = [i for part in parts for i in part]
        assert len(set(everything)) == len(everything)  # disjoint
        assert set(everything) <= set(range(length))
        epochs.append(parts)
    if shuffle:
        assert epochs[0] != epochs[1] != epochs[2]
        # Leftovers are used on alternate epochs: together the epochs see
        # every sample.
        assert set(i for parts in epochs for p in parts for i in p) == \
            set(range(length))
    else:
        blocks = [list(range(p * per_process, (p + 1) * per_process))
                  for p in range(num_processes)]
        assert all(parts == blocks for parts in epochs)


def test_distributed_without_drop_last_covers_everything():
    loaders = distributed_loaders(2, drop_last=False, shuffle=True)
    parts = [[i for batch in first_column(loader) for i in batch]
             for loader in loaders]
    assert sorted(parts[0] + parts[1]) == list(range(45))
    assert [len(p) for p in parts] == [23, 22]


def test_distributed_errors():
    opts = make_options()
    opts.Distributed.configureProcessId(0, 2)
    with pytest.raises(AssertionError, match="randomSeed"):
        DataLoader(opts, Indices(8), shuffle=True)
    with pytest.raises(AssertionError, match="batch_size=None not allowed"):
        DataLoader(opts, Indices(8), batch_size=None)


# -- asynchronous modes: same batches, same order as Sync ------------------
ASYNC_CASES = [
    # D, R, g, G, batch_size, length, drop_last, rebatched_worker_size
    (1, 1, 1, 1, 1, 7, True, None),
    (2, 2, 1, 1, 3, 40, True, None),
    (2, 2, 1, 1, 3, 40, False, None),
    (1, 4, 2, 2, 2, 30, True, 3),
    (3, 1, 1, 1, 2, 25, False, 4),
]


def sync_reference(D, R, g, G, batch_size, length, drop_last):
    loader = DataLoader(make_options(D, R, g, G), Indices(length),
                        batch_size=batch_size, drop_last=drop_last)
    return [batch.clone() for batch in loader]


def assert_same_batches(loader, expected):
    got = [batch.clone() for batch in loader]
    assert len(got) == len(expected)
    for actual, wanted in zip(got, expected):
        assert torch.equal(actual, wanted)


@pytest.mark.parametrize("case", ASYNC_CASES)
@pytest.mark.parametrize("mode", [DataLoaderMode.Async,
                                  DataLoaderMode.AsyncRebatched])
def test_async_modes_match_sync(mode, case):
    D, R, g, G, batch_size, length, drop_last, worker_size = case
    expected = sync_reference(D, R, g, G, batch_size, length, drop_last)
    if mode != DataLoaderMode.AsyncRebatched:
        worker_size = None
    loader = DataLoader(make_options(D, R, g, G), Indices(length),
                        batch_size=batch_size, drop_last=drop_last,
                        mode=mode, rebatched_worker_size=worker_size)
    try:
        assert len(loader) == len(expected)
        assert_same_batches(loader, expected)
        assert_same_batches(loader, expected)  # second epoch
    finally:
        loader.terminate()


@pytest.mark.parametrize("drop_last", [True, False])
def test_async_with_batch_sampler_matches_sync(drop_last):
    def make_loader(mode):
        sampler = torch.utils.data.BatchSampler(range(23), 3, drop_last=False)
        return DataLoader(make_options(D=2), Indices(23),
                          batch_sampler=sampler, drop_last=drop_last,
                          mode=mode)

    expected = [batch.clone() for batch in make_loader(DataLoaderMode.Sync)]
    loader = make_loader(DataLoaderMode.Async)
    try:
        assert len(loader) == len(expected)
        assert_same_batches(loader, expected)
    finally:
        loader.terminate()


def test_async_rebatched_iterable_dataset_with_workers_loses_only_the_tail():
    # Both workers end with a partial torch batch (23 = 7 * 3 + 2 and
    # 22 = 7 * 3 + 1 samples): re-batching joins them.
    length, batch_size = 45, 4
    loader = DataLoader(make_options(), IndexStream(length),
                        batch_size=batch_size, num_workers=2,
                        worker_init_fn=worker_init,
                        mode=DataLoaderMode.AsyncRebatched,
                        rebatched_worker_size=3)
    try:
        batches = [batch.clone() for batch in loader]
    finally:
        loader.terminate()
    assert all(len(b) == batch_size for b in batches)
    seen = sorted(i for b in batches for i in b[:, 0].tolist())
    assert len(seen) == length - length % batch_size
    assert len(set(seen)) == len(seen) and set(seen) <= set(range(length))


def test_async_raising_dataset_names_the_batch():
    loader = DataLoader(make_options(D=2), FailingIndices(20), batch_size=2,
                        mode=DataLoaderMode.Async)
    try:
        with pytest.raises(AssertionError,
                           match="(?s)data fetcher.*no sample 9.*"
                           "batch 2 of the DataLoader.*test_dataloader.py.*"
                           'raise RuntimeError\\("no sample 9"\\)'):
            list(loader)
    finally:
        loader.terminate()


class FailingIndices(Indices):

    def __getitem__(self, i):
        if i == 9:
            raise RuntimeError("no sample 9")
        return super().__getitem__(i)


def test_async_errors():
    opts = make_options(D=2)
    with pytest.raises(AssertionError,
                       match=r"The rebatched_worker_size \(5\) must be <= to "
                       r"the combined batch size \(4\)"):
        DataLoader(opts, Indices(8), batch_size=2,
                   mode=DataLoaderMode.AsyncRebatched,
                   rebatched_worker_size=5)
    with pytest.raises(AssertionError, match="rebatched_size"):
        DataLoader(opts, Indices(8), batch_size=2, mode=DataLoaderMode.Async,
                   async_options={"rebatched_size": 2})
    with pytest.raises(ValueError, match="only used with"):
        DataLoader(opts, Indices(8), batch_size=2, rebatched_worker_size=2)
    with pytest.raises(ValueError, match="cannot be used with a "
                       "batch_sampler"):
        DataLoader(opts, Indices(8), mode=DataLoaderMode.AsyncRebatched,
                   rebatched_worker_size=2,
                   batch_sampler=torch.utils.data.BatchSampler(
                       range(8), 2, drop_last=False))
    loader = DataLoader(opts, Indices(8), batch_size=2,
                        mode=DataLoaderMode.Async)
    try:
        with pytest.raises(poptorch.Error,
                           match="already uses an AsynchronousDataAccessor"):
            poptorch.AsynchronousDataAccessor(loader)
    finally:
        loader.terminate()
    sync = DataLoader(opts, Indices(9), batch_size=2, drop_last=False)
    with pytest.raises(AssertionError,
                       match="The 'drop_last=False' option from the "
                       "DataLoader only works if 'rebatched_size' is "
                       "specified too."):
        poptorch.AsynchronousDataAccessor(sync)


def test_user_accessor_over_a_loader_rebatches():
    # Iterated once first: its persistent worker iterator stays behind.
    loader = DataLoader(make_options(D=2), Indices(21), batch_size=2,
                        drop_last=False, num_workers=1)
    flat = torch.cat([batch.clone() for batch in loader])
    expected = list(torch.split(flat, 3))
    with poptorch.AsynchronousDataAccessor(loader,
                                           rebatched_size=3) as accessor:
        assert len(accessor) == len(expected)
        got = [batch.clone() for batch in accessor]
    assert len(got) == len(expected)
    assert all(torch.equal(a, e) for a, e in zip(got, expected))


# -- cooperative subclassing (how PopTorch Geometric builds its loaders) ---
class KeywordLoader(torch.utils.data.DataLoader):
    """Like PyG's DataLoader: builds a collater through a hook and calls the
    next class in the MRO with keyword arguments only."""

    def __init__(self, dataset, batch_size=1, shuffle=False, **kwargs):
        self.mini_batch_size = batch_size
        super().__init__(dataset=dataset, batch_size=batch_size,
                         shuffle=shuffle, collate_fn=self._create_collater(),
                         **kwargs)

    def _create_collater(self):
        return lambda samples: torch.stack(samples).sum(dim=1)


class CombinedKeywordLoader(KeywordLoader, DataLoader):

    def __init__(self, dataset, batch_size=1, options=None, **kwargs):
        super().__init__(dataset, batch_size=batch_size,
                         options=options or poptorch.Options(), **kwargs)


def test_cooperative_multiple_inheritance():
    loader = CombinedKeywordLoader(Indices(12), batch_size=2,
                                   options=make_options(D=3))
    assert loader.combinedBatchSize == 6
    assert [b.tolist() for b in loader] == [
        [3 * i for i in range(6)], [3 * i for i in range(6, 12)]]
