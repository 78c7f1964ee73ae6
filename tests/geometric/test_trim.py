"""Trimming over-size batches: never empties a graph, hits the budget
exactly, is counted and logged."""
import logging

import pytest
import torch
from torch_geometric.data import HeteroData

from poptorch_geometric import FixedSizeCollater, FixedSizeOptions
from poptorch_geometric._padding.trim import create_slices_and_preserve_mask

from ._graphs import graph


def test_preserve_mask_keeps_one_element_per_non_empty_graph():
    for seed in range(20):
        torch.manual_seed(seed)
        counts = [3, 0, 5, 1, 4]
        slices, keep = create_slices_and_preserve_mask(4, counts)
        assert [s.stop - s.start for s in slices] == counts
        assert int(keep.sum()) == 4
        assert all(bool(keep[s].any()) for s, c in zip(slices, counts) if c)


def test_preserve_mask_nothing_to_remove():
    assert create_slices_and_preserve_mask(10, [3, 4]) == (None, None)


def test_prune_nodes_to_the_budget():
    molecule = graph(29, 60)
    collater = FixedSizeCollater(FixedSizeOptions(num_nodes=80, num_graphs=5))
    trimmed = collater._prune_nodes([molecule] * 4)
    assert sum(g.num_nodes for g in trimmed) == 80
    assert all(g.num_nodes > 0 for g in trimmed)
    for g in trimmed:  # edges follow their nodes
        assert g.edge_index.max() < g.num_nodes
        assert g.edge_attr.shape[0] == g.edge_index.shape[1]


def test_prune_nodes_keeps_one_node_per_graph():
    collater = FixedSizeCollater(FixedSizeOptions(num_nodes=3, num_graphs=4))
    assert [g.num_nodes for g in collater._prune_nodes([graph(4, 2)] * 3)] \
        == [1, 1, 1]
    collater = FixedSizeCollater(FixedSizeOptions(num_nodes=2, num_graphs=4))
    with pytest.raises(RuntimeError, match="at least one node"):
        collater._prune_nodes([graph(4, 2)] * 3)


def test_prune_edges_keeps_nodes():
    collater = FixedSizeCollater(FixedSizeOptions(10, 5, 3))
    trimmed = collater._prune_edges([graph(4, 6), graph(3, 6)])
    assert sum(g.num_edges for g in trimmed) == 5
    assert [g.num_nodes for g in trimmed] == [4, 3]
    assert all(g.num_edges > 0 for g in trimmed)


@pytest.mark.parametrize("fast_path", [True, False])
def test_trimming_collater_keeps_shapes_and_padding_inert(fast_path,
                                                          poptorch_log):
    opts = FixedSizeOptions(num_nodes=4, num_edges=6, num_graphs=3)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 trim_nodes=True, trim_edges=True,
                                 fast_path=fast_path)
    batch = collater([graph(3, 5), graph(3, 5)])
    assert batch.x.shape == (4, 2) and batch.edge_index.shape == (2, 6)
    assert batch.ptr.shape == (4,)
    # Unlike upstream, one node is left for padding, so padding edges never
    # point past the last node.
    assert batch.edge_index.max() < 4
    assert int(batch.nodes_mask.sum()) == 3
    assert collater.trimmed.nodes == 3 and collater.trimmed.graphs >= 2
    assert collater.trimmed.edges == 10 - int(batch.edges_mask.sum())
    assert "trimmed 3 node(s)" in poptorch_log.text


def test_trimming_edges_only(poptorch_log):
    opts = FixedSizeOptions(num_nodes=20, num_edges=6, num_graphs=3)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 trim_edges=True)
    batch = collater([graph(3, 5), graph(3, 5)])
    assert int(batch.edges_mask.sum()) == 6
    assert batch.edge_index.shape == (2, 6)
    assert collater.trimmed.edges == 4 and collater.trimmed.nodes == 0
    assert "trimmed 0 node(s) and 4 edge(s)" in poptorch_log.text


def test_trimming_nodes_does_not_fix_edges():
    opts = FixedSizeOptions(num_nodes=4, num_edges=2, num_graphs=3)
    collater = FixedSizeCollater(opts, trim_nodes=True)
    with pytest.raises(RuntimeError, match="number of edges"):
        collater([graph(3, 5, seed=1), graph(3, 5, seed=2)])


def test_hetero_trimming():
    data = HeteroData()
    data["a"].x = torch.arange(5.0).view(-1, 1)
    data["b"].x = torch.ones(2, 1)
    data["a", "r", "b"].edge_index = torch.tensor([[0, 1, 2, 3, 4],
                                                   [0, 1, 0, 1, 0]])
    opts = FixedSizeOptions({"a": 6, "b": 6}, {("a", "r", "b"): 4}, 3)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 trim_nodes=True, trim_edges=True)
    batch = collater([data, data])
    assert batch["a"].x.shape == (6, 1)
    assert int(batch["a"].nodes_mask.sum()) == 5  # one left for padding
    assert batch["a", "r", "b"].edge_index.shape == (2, 4)
    assert int(batch["a", "r", "b"].edges_mask.sum()) <= 4
    assert batch["a", "r", "b"].edge_index[0].max() < 6


def test_trimming_nodes_frees_a_node_for_padding_edges():
    """Real nodes that fill the node budget exactly while edges need
    padding: with trim_nodes one node goes (padding edges need a home);
    without, the collater says why it cannot pad."""
    molecule = graph(10, 12)
    opts = FixedSizeOptions(num_nodes=10, num_edges=20, num_graphs=2)
    with pytest.raises(RuntimeError, match="no padding node is left"):
        FixedSizeCollater(opts)([molecule])
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 trim_nodes=True)
    batch = collater([molecule])
    assert int(batch.nodes_mask.sum()) == 9
    assert batch.x.shape[0] == 10 and batch.edge_index.shape[1] == 20
    real_edges = int(batch.edges_mask.sum())
    assert bool((batch.edge_index[:, :real_edges] < 9).all())
    assert bool((batch.edge_index[:, real_edges:] == 9).all())
    assert collater.trimmed.nodes == 1
    # Exact fill of both budgets needs no padding: nothing is trimmed.
    exact = FixedSizeCollater(FixedSizeOptions(10, 12, 2), trim_nodes=True)
    assert exact([molecule]).x.shape[0] == 10
    assert exact.trimmed.nodes == 0


def test_trimming_warns_once_then_logs_at_debug_level(poptorch_log):
    opts = FixedSizeOptions(num_nodes=20, num_edges=6, num_graphs=3)
    collater = FixedSizeCollater(opts, trim_edges=True)
    poptorch_log.set_level(logging.DEBUG, logger="poptorch::python")
    collater([graph(3, 5), graph(3, 5)])
    collater([graph(3, 5), graph(3, 5)])
    trims = [r for r in poptorch_log.records
             if "FixedSizeCollater trimmed" in r.getMessage()]
    assert [r.levelno for r in trims] == [logging.WARNING, logging.DEBUG]
    assert trims[0].getMessage() == (
        "FixedSizeCollater trimmed 0 node(s) and 4 edge(s) to fit the fixed "
        "size (further trims are logged at debug level; "
        "FixedSizeCollater.trimmed keeps the totals).")


def test_trimmed_graphs_counts_only_the_graphs_cut_down():
    """The first graph has one edge, which trimming must keep: only the
    second is cut down."""
    collater = FixedSizeCollater(FixedSizeOptions(20, 4, 3), trim_edges=True)
    collater([graph(3, 1), graph(3, 6)])
    assert (collater.trimmed.graphs, collater.trimmed.nodes,
            collater.trimmed.edges) == (1, 0, 3)


def test_node_trimming_leaves_a_padding_node_only_with_a_node_per_graph():
    """Two real graphs and three node slots: one node each and one for
    padding. With two slots no padding node can be left, and the edges
    that need padding have nowhere to go."""
    edgeless = [graph(3, 0), graph(3, 0)]
    collater = FixedSizeCollater(FixedSizeOptions(3, 4, 3),
                                 add_masks_to_batch=True, trim_nodes=True)
    batch = collater(edgeless)
    assert batch.nodes_mask.tolist() == [True, True, False]
    assert batch.edge_index.tolist() == [[2] * 4, [2] * 4]
    with pytest.raises(RuntimeError, match="Cannot pad 4 edges: the real "
                       "graphs fill every node slot"):
        FixedSizeCollater(FixedSizeOptions(2, 4, 3),
                          trim_nodes=True)(edgeless)


def test_prune_edges_defaults_to_the_edge_budget():
    collater = FixedSizeCollater(FixedSizeOptions(20, 5, 3))
    trimmed = collater._prune_edges([graph(3, 4), graph(3, 4)])
    assert [g.num_edges > 0 for g in trimmed] == [True, True]
    assert sum(g.num_edges for g in trimmed) == 5
    assert [g.num_nodes for g in trimmed] == [3, 3]
    limited = collater._prune_edges([graph(3, 4), graph(3, 4)], {None: 3})
    assert sum(g.num_edges for g in limited) == 3
    nodes = collater._prune_nodes([graph(4, 0), graph(4, 0)], {None: 5})
    assert sum(g.num_nodes for g in nodes) == 5
