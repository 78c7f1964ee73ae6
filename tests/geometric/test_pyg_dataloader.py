"""Torch-side loaders: PadToMax and StreamPack batching, samplers, strategy
options, validation and the efficiency report."""
import pytest
import torch
from torch.utils.data import Sampler
from torch_geometric import seed_everything
from torch_geometric.data import Batch
from torch_geometric.datasets import FakeDataset, FakeHeteroDataset
from torch_geometric.loader import DataLoader as PyGDataLoader

from poptorch_geometric import (FixedSizeOptions, FixedSizeStrategy,
                                OverSizeStrategy, StreamPackingSampler,
                                batching_efficiency)
from poptorch_geometric.pyg_dataloader import DataLoader, FixedSizeDataLoader

from ._graphs import graph


@pytest.fixture(scope="module")
def fake_dataset():
    seed_everything(42)
    return FakeDataset(num_graphs=100, avg_num_nodes=10)


def _shapes(batch):
    return {k: tuple(v.shape) for k, v in batch.items()
            if isinstance(v, torch.Tensor)}


def test_torch_side_data_loader_is_pyg_batching(fake_dataset):
    ours = list(DataLoader(fake_dataset, batch_size=7, follow_batch=["x"]))
    theirs = list(PyGDataLoader(fake_dataset, batch_size=7,
                                follow_batch=["x"]))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in b.keys())


def test_pad_to_max_batches_have_the_same_shapes():
    ds = [graph(2 + i, 3 + i, seed=i, y=torch.ones(1)) for i in range(7)]
    loader = FixedSizeDataLoader(ds, batch_size=3)
    batches = list(loader)
    assert len(batches) == 4
    assert all(_shapes(b) == _shapes(batches[0]) for b in batches)
    assert batches[-1].graphs_mask.tolist() == [True, False, False]
    real = Batch.from_data_list(ds[6:])
    assert torch.equal(batches[-1].x[:real.num_nodes], real.x)


def test_options_derived_from_the_dataset(fake_dataset):
    loader = FixedSizeDataLoader(fake_dataset, batch_size=11)
    assert len(list(loader)) == 10
    expected = FixedSizeOptions.from_dataset(fake_dataset, 11)
    assert loader.fixed_size_options.num_nodes == expected.num_nodes
    sampler = StreamPackingSampler(fake_dataset, max_num_graphs=10)
    loader = FixedSizeDataLoader(fake_dataset, batch_size=11,
                                 batch_sampler=sampler)
    assert all(b.num_nodes == sampler.max_num_nodes + 1 for b in loader)


class _DummySampler(Sampler):
    def __iter__(self):
        return iter([[0] * 4] * 5)

    def __len__(self):
        return 5


def test_user_batch_sampler(fake_dataset):
    loader = FixedSizeDataLoader(fake_dataset, batch_size=5,
                                 batch_sampler=_DummySampler())
    batches = list(loader)
    assert len(batches) == 5
    assert all(int(b.graphs_mask.sum()) == 4 for b in batches)


@pytest.mark.parametrize("extra_nodes, extra_edges, num_graphs, expected", [
    (0, None, 11, 10), (1, 1, 101, 1), (1, 1, 100, 2), (0, 1, 101, 2),
    (1, 0, 101, 2)])
def test_stream_pack_batch_counts(fake_dataset, extra_nodes, extra_edges,
                                  num_graphs, expected):
    total_nodes = sum(g.num_nodes for g in fake_dataset)
    total_edges = sum(g.num_edges for g in fake_dataset)
    opts = FixedSizeOptions(
        num_nodes=total_nodes + extra_nodes,
        num_edges=None if extra_edges is None else total_edges + extra_edges,
        num_graphs=num_graphs)
    loader = FixedSizeDataLoader(
        fake_dataset, batch_size=num_graphs, fixed_size_options=opts,
        fixed_size_strategy=FixedSizeStrategy.StreamPack)
    assert len(list(loader)) == expected == len(loader)


def test_stream_pack_without_options(fake_dataset):
    # Upstream read the None argument instead of the derived options.
    loader = FixedSizeDataLoader(
        fake_dataset, batch_size=11,
        fixed_size_strategy=FixedSizeStrategy.StreamPack)
    assert sum(int(b.graphs_mask.sum()) for b in loader) == 100


def test_stream_pack_skip_is_counted():
    ds = [graph(3, 2, seed=0), graph(30, 2, seed=1), graph(3, 2, seed=2)]
    loader = FixedSizeDataLoader(
        ds, batch_size=3, fixed_size_options=FixedSizeOptions(10, 10, 3),
        fixed_size_strategy=FixedSizeStrategy.StreamPack,
        over_size_strategy=OverSizeStrategy.Skip)
    report = batching_efficiency(loader)
    assert report.real_graphs == 2 and report.skipped_graphs == 1
    with pytest.raises(RuntimeError, match="Sample 1"):
        list(FixedSizeDataLoader(
            ds, batch_size=3, fixed_size_options=FixedSizeOptions(10, 10, 3),
            fixed_size_strategy=FixedSizeStrategy.StreamPack))


@pytest.mark.parametrize("strategy, nodes, edges", [
    (OverSizeStrategy.TrimNodes, True, False),
    (OverSizeStrategy.TrimEdges, False, True),
    (OverSizeStrategy.TrimNodesAndEdges, True, True),
    (OverSizeStrategy.Error, False, False),
    (OverSizeStrategy.Skip, False, False)])
def test_over_size_strategy_sets_trimming(strategy, nodes, edges):
    loader = FixedSizeDataLoader([graph(3, 2)] * 4, batch_size=3,
                                 over_size_strategy=strategy)
    assert loader.fixed_size_collater.trim_nodes == nodes
    assert loader.fixed_size_collater.trim_edges == edges


def test_trimmed_graphs_are_reported():
    ds = [graph(6, 8, seed=i) for i in range(6)]
    loader = FixedSizeDataLoader(
        ds, batch_size=3, fixed_size_options=FixedSizeOptions(8, 10, 3),
        over_size_strategy=OverSizeStrategy.TrimNodesAndEdges)
    report = batching_efficiency(loader)
    assert report.real_graphs == 6
    assert report.trimmed.nodes == 6 * 6 - report.real_nodes
    assert report.real_nodes == 3 * 7  # one node kept for padding
    assert "trimmed" in str(report)


def test_hetero_loader_shapes():
    seed_everything(0)
    ds = FakeHeteroDataset(num_graphs=10, avg_num_nodes=8)
    loader = FixedSizeDataLoader(ds, batch_size=4)
    opts = loader.fixed_size_options
    assert opts.is_hetero()
    for batch in loader:
        for t in batch.node_types:
            assert batch[t].x.shape[0] == opts.num_nodes[t]
            assert batch[t].nodes_mask.shape == (opts.num_nodes[t],)
        for t in batch.edge_types:
            assert batch[t].edge_index.shape == (2, opts.num_edges[t])
        assert batch.graphs_mask.shape == (4,)


def test_efficiency_report_counts(fake_dataset):
    loader = FixedSizeDataLoader(fake_dataset, batch_size=11)
    report = batching_efficiency(loader)
    opts = loader.fixed_size_options
    assert report.num_batches == 10
    assert report.real_graphs == 100 and report.graph_slots == 110
    assert report.real_nodes == sum(g.num_nodes for g in fake_dataset)
    assert report.node_slots == 10 * opts.num_nodes
    assert report.real_edges == sum(g.num_edges for g in fake_dataset)
    assert report.edge_slots == 10 * opts.num_edges
    assert report.node_efficiency == report.real_nodes / report.node_slots
    assert report.skipped_graphs == 0


def test_efficiency_needs_masks(fake_dataset):
    loader = FixedSizeDataLoader(fake_dataset, batch_size=11,
                                 add_pad_masks=False)
    with pytest.raises(ValueError, match="add_pad_masks=True"):
        batching_efficiency(loader)


def test_validation(fake_dataset):
    opts = FixedSizeOptions(500, 5000, 4)
    with pytest.raises(AssertionError, match="must equal"):
        FixedSizeDataLoader(fake_dataset, batch_size=3,
                            fixed_size_options=opts)
    with pytest.raises(ValueError, match="batch_sampler"):
        FixedSizeDataLoader(fake_dataset, batch_size=4,
                            fixed_size_options=opts,
                            fixed_size_strategy=FixedSizeStrategy.StreamPack,
                            batch_sampler=_DummySampler())
    with pytest.raises(AssertionError, match="collate_fn"):
        FixedSizeDataLoader(fake_dataset, batch_size=4,
                            fixed_size_options=opts, collate_fn=list)
    with pytest.raises(NotImplementedError,
                       match="Unsupported fixed_size_strategy Other"):
        FixedSizeDataLoader(fake_dataset, batch_size=4,
                            fixed_size_options=opts,
                            fixed_size_strategy="Other")


def test_in_memory_graphs_are_built_once_and_read_through(nci):
    from poptorch_geometric._fastpath.graph_cache import CachedGraphs
    subset = nci[:40]
    sizes = FixedSizeOptions.from_dataset(subset, 8)
    loader = FixedSizeDataLoader(subset, batch_size=8,
                                 fixed_size_options=sizes)
    assert isinstance(loader.dataset, CachedGraphs)
    assert loader.dataset.dataset is subset
    assert loader.dataset.num_node_features == subset.num_node_features
    first = [b.x.clone() for b in loader]
    second = [b.x for b in loader]
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    # The graphs themselves are never modified by collation.
    for i in range(len(subset)):
        assert torch.equal(loader.dataset[i].x, subset[i].x)
    with_transform = nci[:10]
    with_transform.transform = lambda data: data
    loader = FixedSizeDataLoader(with_transform, batch_size=8,
                                 fixed_size_options=sizes)
    assert loader.dataset is with_transform


def test_stream_pack_shuffle_follows_the_loader_generator():
    from poptorch_geometric.datasets import SyntheticMolecules
    ds = SyntheticMolecules(60)
    opts = FixedSizeOptions.for_packing(ds, graphs_per_batch=8)

    def first_epoch(seed):
        loader = FixedSizeDataLoader(
            ds, batch_size=8, fixed_size_options=opts, shuffle=True,
            fixed_size_strategy=FixedSizeStrategy.StreamPack,
            generator=torch.Generator().manual_seed(seed))
        return [b.y for b in loader]

    torch.manual_seed(0)
    a = first_epoch(7)
    torch.manual_seed(1)  # the global RNG must not matter
    b = first_epoch(7)
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
    c = first_epoch(8)
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
