"""Fixed-size neighbour loaders: every batch has the same shapes, its real
part is exactly the sampled subgraph (same seed, PyG's NeighborLoader over
the same sampler), masks mark exactly the real entries, padding is inert,
and the PopTorch side concatenates mini-batches."""
import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import NeighborLoader

import poptorch
from poptorch_geometric import (FixedSizeNeighborLoader, FixedSizeOptions,
                                OverSizeStrategy, PyGFixedSizeNeighborLoader,
                                TorchNeighborSampler)

from ._sampling_graphs import paper_author_graph, random_graph

NODE_PAD, EDGE_PAD = -1.0, -2.0


def node_task_graph(num_nodes=15, num_edges=75, seed=42):
    return random_graph(num_nodes, num_edges, seed)


def options(num_nodes, num_edges):
    return FixedSizeOptions(num_nodes=num_nodes, num_edges=num_edges,
                            node_pad_value=NODE_PAD, edge_pad_value=EDGE_PAD)


def unpadded_epoch(data, fanouts, batch_size, seed, **kwargs):
    torch.manual_seed(seed)
    loader = NeighborLoader(data, fanouts, batch_size=batch_size,
                            neighbor_sampler=TorchNeighborSampler(
                                data, fanouts), **kwargs)
    return list(loader)


def assert_real_prefix_is(batch, sample, opts):
    """The padded batch holds ``sample`` first, then inert padding."""
    nodes, edges = sample.num_nodes, sample.num_edges
    assert batch.x.shape[0] == opts.num_nodes
    assert batch.edge_index.shape == (2, opts.num_edges)
    assert batch.nodes_mask.tolist() == [True] * nodes + [False] * (
        opts.num_nodes - nodes)
    assert batch.edges_mask.tolist() == [True] * edges + [False] * (
        opts.num_edges - edges)
    assert batch.graphs_mask.tolist() == [True, False]
    for key in ("x", "y", "n_id"):
        assert torch.equal(batch[key][:nodes], sample[key]), key
    for key in ("edge_attr", "e_id"):
        assert torch.equal(batch[key][:edges], sample[key]), key
    assert torch.equal(batch.edge_index[:, :edges], sample.edge_index)
    assert torch.equal(batch.input_id, sample.input_id)
    assert batch.batch_size == sample.batch_size
    assert batch.num_sampled_nodes == sample.num_sampled_nodes
    # Padding: pad values (n_id and e_id too), edges inside the padding
    # graph.
    assert bool((batch.x[nodes:] == NODE_PAD).all())
    assert bool((batch.edge_attr[edges:] == EDGE_PAD).all())
    assert bool((batch.n_id[nodes:] == NODE_PAD).all())
    assert bool((batch.e_id[edges:] == EDGE_PAD).all())
    assert bool((batch.edge_index[:, edges:] >= nodes).all())
    assert bool((batch.edge_index < opts.num_nodes).all())
    assert bool((batch.batch[nodes:] == 1).all())


def test_padded_batches_hold_exactly_the_sampled_subgraphs():
    data = node_task_graph(200, 1200)
    opts = options(160, 400)
    expected = unpadded_epoch(data, [4, 3], 10, seed=5, shuffle=True)
    torch.manual_seed(5)
    loader = PyGFixedSizeNeighborLoader(
        data, [4, 3], batch_size=10, fixed_size_options=opts,
        add_pad_masks=True, shuffle=True)
    batches = list(loader)
    assert len(batches) == len(expected) == 20
    for batch, sample in zip(batches, expected):
        assert isinstance(batch, Data)
        assert_real_prefix_is(batch, sample, opts)
    assert loader.fixed_size_collater.trimmed.graphs == 0


def test_upstream_invariants_small_graph():
    """The upstream test case: 15 nodes, 75 edges, [5, 5], batches of 5."""
    data = node_task_graph()
    torch.manual_seed(42)
    loader = FixedSizeNeighborLoader(data, [5, 5], batch_size=5)
    opts = loader.fixed_size_options
    assert len(loader) == 3
    for i, batch in enumerate(loader):
        assert batch.n_id[0] == i * 5
        assert torch.equal(batch.x[:5], data.x[i * 5:(i + 1) * 5])
        assert bool((batch.edge_index < batch.num_nodes).all())
        assert batch.edge_index.shape[1] == opts.num_edges
        padding_edges = batch.edge_index[:, ~batch.edges_mask]
        assert bool((batch.n_id[padding_edges] == 0).all())
        assert bool((batch.x[~batch.nodes_mask] == 0).all())


def test_default_sizes_come_from_the_unpadded_loader():
    data = node_task_graph(120, 600)
    torch.manual_seed(0)
    loader = PyGFixedSizeNeighborLoader(data, [3, 3], batch_size=8)
    opts = loader.fixed_size_options
    torch.manual_seed(0)
    samples = [s for _ in range(1000 // 15 + 1)
               for s in loader.neighbour_loader][:1000]
    assert opts.num_nodes == max(s.num_nodes for s in samples) + 1
    assert opts.num_edges == max(s.num_edges for s in samples) + 1
    assert opts.num_graphs == 2
    # The fixed-size loader itself is measured before padding.
    torch.manual_seed(0)
    again = FixedSizeOptions.from_loader(loader)
    assert (again.num_nodes, again.num_edges) == (opts.num_nodes,
                                                  opts.num_edges)


def test_same_seed_same_padded_batches():
    data = node_task_graph(150, 900)

    def epoch(seed):
        torch.manual_seed(seed)
        loader = PyGFixedSizeNeighborLoader(
            data, [3, 2], batch_size=7, shuffle=True,
            fixed_size_options=options(100, 200))
        return [b.n_id.tolist() + b.edge_index.view(-1).tolist()
                for b in loader]

    assert epoch(3) == epoch(3)
    assert epoch(3) != epoch(4)


def test_trimming_never_drops_a_seed():
    data = node_task_graph(300, 3000)
    torch.manual_seed(1)
    opts = options(40, 60)
    loader = PyGFixedSizeNeighborLoader(
        data, [10, 10], batch_size=12, fixed_size_options=opts,
        add_pad_masks=True)
    for i, batch in enumerate(loader):
        seeds = list(range(i * 12, min((i + 1) * 12, 300)))
        assert batch.n_id[:len(seeds)].tolist() == seeds
        assert batch.batch_size == len(seeds)
        real = int(batch.nodes_mask.sum())
        assert real == opts.num_nodes - 1
        n_id = batch.n_id[:real]
        assert n_id.unique().numel() == real
        # The real edges are still original edges between kept nodes.
        edges = int(batch.edges_mask.sum())
        row, col = batch.edge_index[:, :edges]
        assert torch.equal(n_id[row], data.edge_index[0, batch.e_id[:edges]])
        assert torch.equal(n_id[col], data.edge_index[1, batch.e_id[:edges]])
        assert "num_sampled_nodes" not in batch
    assert loader.fixed_size_collater.trimmed.graphs > 0


def test_error_strategy_raises_on_an_over_size_subgraph():
    data = node_task_graph(300, 3000)
    loader = PyGFixedSizeNeighborLoader(
        data, [10, 10], batch_size=12, fixed_size_options=options(40, 60),
        over_size_strategy=OverSizeStrategy.Error)
    with pytest.raises(RuntimeError):
        next(iter(loader))


def test_too_many_seeds_for_the_node_budget_is_a_clear_error():
    loader = PyGFixedSizeNeighborLoader(
        node_task_graph(100, 300), [2], batch_size=20,
        fixed_size_options=options(10, 60))
    with pytest.raises(ValueError, match="seed nodes of a batch do not fit"):
        next(iter(loader))


def test_options_belong_to_the_poptorch_side():
    with pytest.raises(ValueError, match="FixedSizeNeighborLoader"):
        PyGFixedSizeNeighborLoader(node_task_graph(), [2], batch_size=5,
                                   fixed_size_options=options(30, 60),
                                   options=poptorch.Options())


def test_poptorch_side_concatenates_device_iterations():
    data = node_task_graph(90, 500)
    opts = options(60, 150)
    expected = unpadded_epoch(data, [3, 2], 6, seed=9)
    torch.manual_seed(9)
    loader = FixedSizeNeighborLoader(
        data, [3, 2], batch_size=6, fixed_size_options=opts,
        options=poptorch.Options().deviceIterations(3))
    assert len(loader) == 90 // 18
    assert issubclass(FixedSizeNeighborLoader, poptorch.DataLoader)
    for call, batch in enumerate(loader):
        assert batch.x.shape[0] == 3 * opts.num_nodes
        assert batch.edge_index.shape == (6, opts.num_edges)
        assert batch.graphs_mask.shape == (6,)
        for k in range(3):
            sample = expected[call * 3 + k]
            nodes = slice(k * opts.num_nodes, (k + 1) * opts.num_nodes)
            assert torch.equal(batch.n_id[nodes][:sample.num_nodes],
                               sample.n_id)
            assert int(batch.nodes_mask[nodes].sum()) == sample.num_nodes
            assert torch.equal(
                batch.edge_index[2 * k:2 * k + 2, :sample.num_edges],
                sample.edge_index)


def test_hetero_padded_batches_keep_seeds_and_masks():
    data = paper_author_graph(seed=2, papers=60, authors=30)
    fanouts = {("paper", "cites", "paper"): [3, 2],
               ("author", "writes", "paper"): [2, 2],
               ("paper", "rev_writes", "author"): [0, 3]}
    torch.manual_seed(4)
    expected = list(NeighborLoader(
        data, fanouts, input_nodes="paper", batch_size=8,
        neighbor_sampler=TorchNeighborSampler(data, fanouts)))
    torch.manual_seed(4)
    loader = PyGFixedSizeNeighborLoader(
        data, fanouts, input_nodes="paper", batch_size=8,
        add_pad_masks=True, fixed_size_options=FixedSizeOptions(
            num_nodes={"paper": 70, "author": 40},
            num_edges={e: 80 for e in data.edge_types}))
    for batch, sample in zip(loader, expected):
        assert isinstance(batch, HeteroData)
        assert batch["paper"].batch_size == sample["paper"].batch_size
        for t in ("paper", "author"):
            real = sample[t].num_nodes
            assert batch[t].x.shape[0] == {"paper": 70, "author": 40}[t]
            assert int(batch[t].nodes_mask.sum()) == real
            assert torch.equal(batch[t].n_id[:real], sample[t].n_id)
        for e in data.edge_types:
            real = sample[e].num_edges
            assert batch[e].edge_index.shape == (2, 80)
            assert int(batch[e].edges_mask.sum()) == real
            assert torch.equal(batch[e].edge_index[:, :real],
                               sample[e].edge_index)


def test_loader_workers_give_valid_padded_batches():
    data = node_task_graph(120, 700)
    opts = options(100, 200)
    loader = PyGFixedSizeNeighborLoader(
        data, [3, 2], batch_size=10, fixed_size_options=opts,
        add_pad_masks=True, num_workers=2)
    seen = []
    for batch in loader:
        real = int(batch.nodes_mask.sum())
        edges = int(batch.edges_mask.sum())
        n_id, e_id = batch.n_id[:real], batch.e_id[:edges]
        row, col = batch.edge_index[:, :edges]
        assert torch.equal(n_id[row], data.edge_index[0, e_id])
        assert torch.equal(n_id[col], data.edge_index[1, e_id])
        assert torch.equal(batch.x[:real], data.x[n_id])
        seen += batch.n_id[:batch.batch_size].tolist()
    assert seen == list(range(120))


def test_hetero_sizes_from_the_unpadded_loader_per_type():
    data = paper_author_graph(seed=3)
    fanouts = {e: [2, 2] for e in data.edge_types}
    loader = NeighborLoader(data, fanouts, input_nodes="paper", batch_size=6,
                            neighbor_sampler=TorchNeighborSampler(data,
                                                                  fanouts))
    torch.manual_seed(0)
    opts = FixedSizeOptions.from_loader(loader, sample_limit=20)
    torch.manual_seed(0)
    samples = [s for _ in range(4) for s in loader][:20]
    assert opts.num_nodes == {t: max(s[t].num_nodes for s in samples) + 1
                              for t in data.node_types}
    assert opts.num_edges == {e: max(s[e].num_edges for s in samples) + 1
                              for e in data.edge_types}
    padded = PyGFixedSizeNeighborLoader(data, fanouts, input_nodes="paper",
                                        batch_size=6, fixed_size_options=opts)
    for batch in padded:
        assert {t: batch[t].num_nodes for t in data.node_types} == \
            opts.num_nodes
