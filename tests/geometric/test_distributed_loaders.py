"""Each process's share of the PopTorch Geometric loaders in a distributed
run (``options.Distributed``), simulated in one process with
``configureProcessId``: shares are disjoint, together they are the dataset
minus what is dropped, and every process makes the same number of steps.

Graphs carry their dataset index as ``y``, so the real graphs of a batch
(``graphs_mask``) say exactly which samples a process read.
"""
import pytest
import torch

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric.stream_packing_sampler import StreamPackingSampler
from ._graphs import graph

NUM_GRAPHS = 61
SEED = 7


@pytest.fixture(scope="module")
def dataset():
    gen = torch.Generator().manual_seed(0)
    sizes = torch.randint(2, 12, (NUM_GRAPHS,), generator=gen).tolist()
    return [graph(n, 2 * n, y=torch.tensor([float(i)]), seed=i)
            for i, n in enumerate(sizes)]


@pytest.fixture(scope="module")
def same_size_dataset():
    """Graphs of one size: PopTorch Geometric's plain DataLoader combines
    mini-batches by concatenation, which needs equal shapes."""
    return [graph(5, 10, y=torch.tensor([float(i)]), seed=i)
            for i in range(NUM_GRAPHS)]


@pytest.fixture
def data_for(dataset, same_size_dataset):
    return lambda kind: same_size_dataset if kind == "DataLoader" \
        else dataset


def _options(process_id, num_processes, D=2):
    opts = poptorch.Options().deviceIterations(D).randomSeed(SEED)
    opts.Distributed.configureProcessId(process_id, num_processes)
    return opts


def _loaders(kind, dataset, num_processes, shuffle, **kwargs):
    sizes = pyg_ipu.FixedSizeOptions.from_dataset(dataset, 5)
    loaders = []
    for rank in range(num_processes):
        opts = _options(rank, num_processes)
        if kind == "DataLoader":
            loaders.append(pyg_ipu.DataLoader(
                dataset, batch_size=4, shuffle=shuffle, options=opts,
                **kwargs))
        else:
            loaders.append(pyg_ipu.FixedSizeDataLoader(
                dataset, batch_size=5, shuffle=shuffle,
                fixed_size_options=sizes, options=opts,
                fixed_size_strategy=getattr(pyg_ipu.FixedSizeStrategy, kind),
                **kwargs))
    return loaders


def _epoch(loader):
    """The dataset indices of the real graphs of each step."""
    steps = []
    for batch in loader:
        labels = batch.y.view(-1)
        if "graphs_mask" in batch:  # fixed-size batches: drop the padding
            labels = labels[batch.graphs_mask]
        steps.append(labels.long().tolist())
    return steps


def _check_epoch(loaders):
    """Disjoint shares, the same number of steps everywhere; returns the
    union."""
    epochs = [_epoch(loader) for loader in loaders]
    assert len({len(steps) for steps in epochs}) == 1, \
        [len(steps) for steps in epochs]
    shares = [[i for step in steps for i in step] for steps in epochs]
    union = [i for share in shares for i in share]
    assert len(union) == len(set(union)), "a sample is read twice"
    assert set(union) <= set(range(NUM_GRAPHS))
    return shares


@pytest.mark.parametrize("num_processes", [2, 3])
@pytest.mark.parametrize("kind", ["DataLoader", "PadToMax"])
def test_sample_split_loaders(data_for, kind, num_processes):
    """Without shuffling, process p reads the p-th contiguous block of
    whole steps; the remainder (less than one step per process) is
    dropped."""
    per_step = 4 * 2  # samples per mini-batch x deviceIterations
    per_process = per_step * (NUM_GRAPHS // (per_step * num_processes))
    shares = _check_epoch(_loaders(kind, data_for(kind), num_processes,
                                   False))
    assert shares == [list(range(p * per_process, (p + 1) * per_process))
                      for p in range(num_processes)]


@pytest.mark.parametrize("num_processes", [2, 3])
@pytest.mark.parametrize("kind", ["DataLoader", "PadToMax", "StreamPack"])
def test_shuffled_shares_change_every_epoch_and_use_everything(
        data_for, kind, num_processes):
    loaders = _loaders(kind, data_for(kind), num_processes, True)
    epochs = [_check_epoch(loaders) for _ in range(4)]
    assert epochs[0] != epochs[1]
    seen = {i for shares in epochs for share in shares for i in share}
    assert seen == set(range(NUM_GRAPHS))


@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("num_processes", [2, 3])
def test_stream_packing_splits_the_packed_batches(dataset, num_processes,
                                                  drop_last):
    """Every process packs the whole dataset and takes a contiguous block
    of the packs, the same number each (whole steps with drop_last)."""
    sizes = pyg_ipu.FixedSizeOptions.from_dataset(dataset, 5)
    packs = list(StreamPackingSampler(
        dataset, sizes.num_graphs - 1,
        max_num_nodes=sizes.total_num_nodes - 1,
        max_num_edges=sizes.total_num_edges - 1))
    per_process = len(packs) // num_processes
    if drop_last:
        per_process -= per_process % 2  # deviceIterations(2)
    loaders = _loaders("StreamPack", dataset, num_processes, False,
                       drop_last=drop_last)
    assert [len(loader) for loader in loaders] == \
        [-(-per_process // 2)] * num_processes
    shares = _check_epoch(loaders)
    assert shares == [[i for pack in packs[p * per_process:
                                           (p + 1) * per_process]
                       for i in pack] for p in range(num_processes)]


def test_shuffled_stream_packing_needs_a_seed(dataset):
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(0, 2)
    with pytest.raises(AssertionError, match="randomSeed"):
        pyg_ipu.FixedSizeDataLoader(
            dataset, batch_size=5, shuffle=True, options=opts,
            fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack)


def test_partitioning_can_be_turned_off(dataset):
    """With auto_distributed_partitioning=False every process reads
    everything (the user splits the data)."""
    loaders = _loaders("StreamPack", dataset, 2, False,
                       auto_distributed_partitioning=False)
    shares = [[i for step in _epoch(loader) for i in step]
              for loader in loaders]
    assert shares[0] == shares[1]
    assert sorted(shares[0]) == list(range(NUM_GRAPHS))
