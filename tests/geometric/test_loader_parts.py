"""The fixed-size loaders are built by composition: their parts (dataset,
batch sampler, collater) come from one builder, and no hook is called back
while the base ``DataLoader`` initialises."""
import pytest
import torch
from torch_geometric.datasets import FakeDataset

import poptorch_core as poptorch
from poptorch_geometric import (ClusterData, FixedSizeOptions, cluster_loader,
                                dataloader, neighbor_loader, pyg_cluster_loader,
                                pyg_dataloader)
from poptorch_geometric._loader_parts import (Combine, FixedSizeRequest,
                                              PackedShare, fixed_size_parts)
from poptorch_geometric._loader_strategies import OverSizeStrategy, trims
from poptorch_geometric.datasets import power_law_graph


def _no_hook(*args, **kwargs):
    raise AssertionError("a loader's __init__ called back a hook")


@pytest.fixture
def no_hooks(monkeypatch):
    for cls in (pyg_dataloader.FixedSizeDataLoader,
                dataloader.FixedSizeDataLoader,
                pyg_cluster_loader.FixedSizeClusterLoader,
                cluster_loader.FixedSizeClusterLoader,
                neighbor_loader.PyGFixedSizeNeighborLoader,
                neighbor_loader.FixedSizeNeighborLoader):
        for hook in ("_create_collater", "_create_packing_sampler"):
            monkeypatch.setattr(cls, hook, _no_hook, raising=False)


@pytest.mark.parametrize("strategy", list(pyg_dataloader.FixedSizeStrategy))
def test_fixed_size_loaders_call_no_hook(no_hooks, strategy):
    ds = FakeDataset(num_graphs=12, avg_num_nodes=8)
    torch_side = pyg_dataloader.FixedSizeDataLoader(
        ds, batch_size=3, fixed_size_strategy=strategy)
    poptorch_side = dataloader.FixedSizeDataLoader(
        ds, batch_size=3, fixed_size_strategy=strategy,
        options=poptorch.Options().deviceIterations(2))
    # Every graph once, as plain Python counts them.
    assert sum(int(b.graphs_mask.sum()) for b in torch_side) == 12
    assert sum(int(b.graphs_mask.sum()) for b in poptorch_side) == 12


def test_cluster_and_neighbour_loaders_call_no_hook(no_hooks):
    data = power_law_graph(200, 800)
    opts = FixedSizeOptions(num_nodes=120, num_edges=600)
    clusters = ClusterData(data, num_parts=8, log=False)
    loader = cluster_loader.FixedSizeClusterLoader(
        clusters, opts, batch_size=2,
        options=poptorch.Options().deviceIterations(2))
    assert len(loader) == 8 // (2 * 2)
    assert next(iter(loader)).graphs_mask.tolist() == [True, False] * 2
    neighbours = neighbor_loader.FixedSizeNeighborLoader(
        data, num_neighbors=[3], batch_size=4, fixed_size_options=opts,
        options=poptorch.Options().deviceIterations(2))
    batch = next(iter(neighbours))
    # The seeds of each mini-batch come first: positions 0..3, then 4..7.
    assert batch.n_id[:4].tolist() == [0, 1, 2, 3]
    assert batch.n_id[120:124].tolist() == [4, 5, 6, 7]


def test_trims_follow_the_strategy_names():
    expected = {"Error": (False, False), "Skip": (False, False),
                "TrimNodes": (True, False), "TrimEdges": (False, True),
                "TrimNodesAndEdges": (True, True)}
    assert {s.name: trims(s) for s in OverSizeStrategy} == expected


def test_combined_parts_pad_to_max():
    request = FixedSizeRequest.bind(pyg_dataloader.FixedSizeDataLoader,
                                    FakeDataset(num_graphs=9), batch_size=4)
    parts = fixed_size_parts(request, Combine(num_mini_batches=3))
    assert parts.batch_sampler is None
    assert parts.base_arguments()["batch_size"] == 3
    assert (parts.collater.mini_batch_size,
            parts.collater.num_mini_batches) == (3, 3)
    assert parts.collater.collater is parts.fixed_size_collater


def test_a_shuffled_packed_share_needs_a_seed():
    request = FixedSizeRequest.bind(
        pyg_dataloader.FixedSizeDataLoader, FakeDataset(num_graphs=9),
        batch_size=4, shuffle=True,
        fixed_size_strategy=pyg_dataloader.FixedSizeStrategy.StreamPack)
    share = PackedShare(num_processes=2, process_id=1, drop_last=False,
                        seed=None)
    with pytest.raises(AssertionError, match="randomSeed"):
        fixed_size_parts(request, Combine(1, share))
    # Every process packs the same order: the packing of another process
    # (a build of its own) gives process 1 its block, the second half.
    batches = list(fixed_size_parts(
        request, Combine(1, PackedShare(2, 0, False, 5))
    ).batch_sampler.batch_sampler)
    seeded = fixed_size_parts(request, Combine(1, PackedShare(2, 1, False, 5)))
    half = len(batches) // 2
    assert list(seeded.batch_sampler) == batches[half:2 * half]
    assert torch.equal(torch.tensor(sorted(i for b in batches for i in b)),
                       torch.arange(9))
