"""PopTorch-side loaders: combined batches of device iterations x replicas x
gradient accumulation mini-batches."""
import pytest
import torch
from torch_geometric import seed_everything
from torch_geometric.datasets import FakeDataset, FakeHeteroDataset
from torch_geometric.loader import DataLoader as PyGDataLoader
from torch_geometric.transforms import Pad

import poptorch_core as poptorch
from poptorch_geometric import (FixedSizeOptions, FixedSizeStrategy,
                                batching_efficiency, dataloader,
                                pyg_dataloader)


@pytest.fixture(scope="module")
def fake_dataset():
    seed_everything(42)
    return FakeDataset(num_graphs=60, avg_num_nodes=10)


def _opts(device_iterations=1, replicas=1, accumulation=1):
    opts = poptorch.Options().deviceIterations(device_iterations)
    opts.replicationFactor(replicas)
    opts.Training.gradientAccumulation(accumulation)
    return opts


def test_mro():
    mro = dataloader.FixedSizeDataLoader.__mro__
    assert mro[:4] == (dataloader.FixedSizeDataLoader,
                       pyg_dataloader.FixedSizeDataLoader,
                       poptorch.DataLoader, torch.utils.data.DataLoader)
    assert dataloader.DataLoader.__mro__[:3] == (
        dataloader.DataLoader, pyg_dataloader.DataLoader, poptorch.DataLoader)


@pytest.mark.parametrize("di, replicas, accumulation",
                         [(3, 1, 1), (1, 2, 2)])
def test_fixed_size_combined_batches(fake_dataset, di, replicas,
                                     accumulation):
    k = di * replicas * accumulation
    fixed = FixedSizeOptions.from_dataset(fake_dataset, 5)
    loader = dataloader.FixedSizeDataLoader(
        fake_dataset, batch_size=5, fixed_size_options=fixed,
        options=_opts(di, replicas, accumulation))
    torch_side = list(pyg_dataloader.FixedSizeDataLoader(
        fake_dataset, batch_size=5, fixed_size_options=fixed))
    batches = list(loader)
    assert len(batches) == len(fake_dataset) // (4 * k)  # drop_last
    n, e = fixed.num_nodes, fixed.num_edges
    for step, batch in enumerate(batches):
        assert batch.batch.shape == (k * n,)
        assert batch.ptr.shape == (k * 6,)
        assert batch.x.shape[0] == k * n
        assert batch.edge_index.shape == (2 * k, e)
        assert batch.y.shape[0] == k * 5 and batch.graphs_mask.shape == \
            (k * 5,)
        assert batch.num_nodes == fixed.total_num_nodes
        # Mini-batch b of the step is the torch-side loader's batch.
        for b in range(k):
            ref = torch_side[step * k + b]
            assert torch.equal(batch.x[b * n:(b + 1) * n], ref.x)
            assert torch.equal(batch.edge_index[2 * b:2 * b + 2],
                               ref.edge_index)
            assert torch.equal(batch.y[b * 5:(b + 1) * 5], ref.y)


def test_efficiency_of_combined_batches(fake_dataset):
    fixed = FixedSizeOptions.from_dataset(fake_dataset, 5)
    loader = dataloader.FixedSizeDataLoader(
        fake_dataset, batch_size=5, fixed_size_options=fixed,
        options=_opts(3))
    report = batching_efficiency(loader)
    assert report.num_batches == 5  # 60 graphs, 4 per mini-batch, 3 each
    assert report.real_graphs == 60 and report.graph_slots == 75
    assert report.real_nodes == sum(g.num_nodes for g in fake_dataset)
    assert report.node_slots == 15 * fixed.num_nodes


def test_stream_pack_combines_sampler_batches(fake_dataset):
    fixed = FixedSizeOptions.from_dataset(fake_dataset, 5)
    loader = dataloader.FixedSizeDataLoader(
        fake_dataset, batch_size=5, fixed_size_options=fixed,
        fixed_size_strategy=FixedSizeStrategy.StreamPack, options=_opts(2))
    torch_side = list(pyg_dataloader.FixedSizeDataLoader(
        fake_dataset, batch_size=5, fixed_size_options=fixed,
        fixed_size_strategy=FixedSizeStrategy.StreamPack))
    batches = list(loader)
    assert len(batches) == len(torch_side) // 2
    for step, batch in enumerate(batches):
        assert batch.x.shape[0] == 2 * fixed.num_nodes
        assert torch.equal(batch.graphs_mask, torch.cat(
            [torch_side[2 * step].graphs_mask,
             torch_side[2 * step + 1].graphs_mask]))


def test_data_loader_mini_batches_are_pyg_batches():
    seed_everything(1)
    pad = Pad(max_num_nodes=20, max_num_edges=400)
    ds = FakeDataset(num_graphs=24, avg_num_nodes=10, transform=pad)
    loader = dataloader.DataLoader(ds, batch_size=4, options=_opts(3))
    reference = list(PyGDataLoader(ds, batch_size=4))
    batches = list(loader)
    assert len(batches) == 2
    for step, batch in enumerate(batches):
        assert batch.num_graphs == 4
        first = reference[3 * step]
        assert batch.num_nodes == first.num_nodes
        assert batch.num_edges == first.num_edges
        for b in range(3):
            ref = reference[3 * step + b]
            for key in ("x", "y", "batch"):
                rows = ref[key].shape[0]
                assert torch.equal(batch[key][b * rows:(b + 1) * rows],
                                   ref[key])
            assert torch.equal(batch.edge_index[2 * b:2 * b + 2],
                               ref.edge_index)


def test_hetero_combined_batches():
    seed_everything(0)
    ds = FakeHeteroDataset(num_graphs=12, avg_num_nodes=8)
    fixed = FixedSizeOptions.from_dataset(ds, 3)
    loader = dataloader.FixedSizeDataLoader(
        ds, batch_size=3, fixed_size_options=fixed, options=_opts(2))
    batch = next(iter(loader))
    for t in batch.node_types:
        n = fixed.num_nodes[t]
        assert batch[t].x.shape[0] == 2 * n
        assert batch[t].batch.shape == (2 * n,)
        assert batch[t].nodes_mask.shape == (2 * n,)
    for t in batch.edge_types:
        assert batch[t].edge_index.shape == (4, fixed.num_edges[t])
    assert "num_nodes" not in batch.node_types
    assert batch.num_nodes == fixed.total_num_nodes


def test_default_options_and_drop_last(fake_dataset):
    loader = dataloader.FixedSizeDataLoader(fake_dataset, batch_size=7)
    assert isinstance(loader.options, poptorch.Options)
    assert len(list(loader)) == len(fake_dataset) // 6
