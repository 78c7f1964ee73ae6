"""Budgets for stream packing chosen from the size distribution, checked on
the NCI dataset and against the sampler itself."""
import pytest
import torch
from torch_geometric.data import HeteroData

from poptorch_geometric import (FixedSizeOptions, FixedSizeStrategy,
                                batching_efficiency)
from poptorch_geometric.datasets import SyntheticMolecules
from poptorch_geometric.pyg_dataloader import FixedSizeDataLoader


def _stream_pack(dataset, opts, **kwargs):
    return FixedSizeDataLoader(
        dataset, batch_size=opts.num_graphs, fixed_size_options=opts,
        fixed_size_strategy=FixedSizeStrategy.StreamPack, **kwargs)


@pytest.mark.parametrize("shuffle", [False, True])
def test_nci_packing_efficiency(nci, shuffle):
    """At least 97% of node and edge slots hold real nodes and edges,
    nothing dropped, at 128 graphs per batch, with budgets for the order
    the loader uses (the benchmark measures the exact figures)."""
    opts = FixedSizeOptions.for_packing(nci, graphs_per_batch=128,
                                        shuffle=shuffle)
    report = batching_efficiency(_stream_pack(
        nci, opts, shuffle=shuffle,
        generator=torch.Generator().manual_seed(7)))
    assert report.skipped_graphs == 0
    assert report.real_graphs == len(nci)
    assert report.real_nodes == sum(g.num_nodes for g in nci)
    assert report.node_efficiency >= 0.97
    assert report.edge_efficiency >= 0.97
    # PadToMax sized for the worst case wastes most of its slots.
    worst = FixedSizeOptions.from_dataset(nci, 128)
    assert worst.num_nodes > 5 * opts.num_nodes


def test_budgets_hold_the_largest_graph_with_padding_room():
    ds = SyntheticMolecules(300, seed=1)
    opts = FixedSizeOptions.for_packing(ds, graphs_per_batch=16)
    largest_nodes = max(g.num_nodes for g in ds)
    largest_edges = max(g.num_edges for g in ds)
    assert opts.num_graphs == 16
    assert opts.num_nodes >= largest_nodes + 15
    assert opts.num_edges >= largest_edges + 15
    ratio = sum(g.num_edges for g in ds) / sum(g.num_nodes for g in ds)
    assert opts.num_edges == pytest.approx(ratio * opts.num_nodes, abs=16)
    shuffled = batching_efficiency(_stream_pack(ds, opts, shuffle=True))
    assert shuffled.skipped_graphs == 0 and shuffled.real_graphs == 300


@pytest.mark.parametrize("make_options", [FixedSizeOptions.for_packing,
                                          FixedSizeOptions.for_batch_size])
def test_packing_budgets_reject_hetero_and_empty(make_options):
    data = HeteroData()
    data["a"].x = torch.ones(2, 1)
    with pytest.raises(ValueError, match="homogeneous"):
        make_options([data], 4)
    with pytest.raises(ValueError, match=r"^Cannot derive packing budgets "
                       r"from an empty dataset\.$"):
        make_options([], 4)


def test_for_packing_needs_two_graph_slots():
    with pytest.raises(ValueError, match="at least 2"):
        FixedSizeOptions.for_packing(SyntheticMolecules(3), 1)


def _pyg_steps(dataset, batch_size):
    from torch_geometric.loader import DataLoader
    return sum(1 for _ in DataLoader(dataset, batch_size=batch_size))


def test_for_batch_size_takes_no_more_steps_than_pyg_on_nci(nci):
    # In the dataset's order, which these budgets are checked against.
    opts = FixedSizeOptions.for_batch_size(nci, batch_size=128,
                                           shuffle=False)
    assert opts.num_graphs > 128
    report = batching_efficiency(_stream_pack(nci, opts))
    assert report.skipped_graphs == 0
    assert report.real_graphs == len(nci)
    assert report.num_batches <= _pyg_steps(nci, 128)
    # Matching PyG's step count costs little padding.
    assert report.node_efficiency >= 0.95
    assert report.edge_efficiency >= 0.95


@pytest.mark.parametrize("batch_size", [1, 3, 16, 299, 400])
def test_for_batch_size_on_small_datasets(batch_size):
    ds = SyntheticMolecules(300, seed=2)
    opts = FixedSizeOptions.for_batch_size(ds, batch_size=batch_size,
                                           shuffle=False)
    batches = list(_stream_pack(ds, opts))
    assert len(batches) <= _pyg_steps(ds, batch_size)
    assert sum(int(b.graphs_mask.sum()) for b in batches) == len(ds)
    for batch in batches:
        assert batch.num_graphs == opts.num_graphs
        assert batch.num_nodes == opts.num_nodes


def test_for_batch_size_rejects_bad_batch_sizes():
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            FixedSizeOptions.for_batch_size(SyntheticMolecules(3), bad)
