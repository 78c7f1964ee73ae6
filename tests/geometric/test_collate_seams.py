"""Seams of ``poptorch_geometric.collate`` that the other collater tests leave
open: ``make_exclude_keys``, the label level decided by label detection when
the attribute sizes alone would mislead, node trimming of a batch without a
padding graph, the trim log of a batch that cannot be padded, the keys of a
padding-only batch, and CombinedBatchingCollater with a full mini-batch count
or a single mini-batch."""
import logging
import re

import pytest
import torch
from torch_geometric.data import Batch, Data

from poptorch_geometric import (CombinedBatchingCollater, FixedSizeCollater,
                                FixedSizeOptions)
from poptorch_geometric.collate import make_exclude_keys
from poptorch_geometric.pyg_collate import Collater

from ._graphs import graph

# -- make_exclude_keys ------------------------------------------------------


def test_make_exclude_keys_lists_every_key_not_included():
    data = graph(3, 2, y=torch.tensor([1.0]), name="a")
    # graph() builds x, edge_index and edge_attr; y and name come on top.
    excluded = make_exclude_keys(["x", "edge_index", "pos"], data)
    assert isinstance(excluded, tuple)
    assert sorted(excluded) == ["edge_attr", "name", "y"]
    assert make_exclude_keys(("x", "edge_index", "edge_attr", "y", "name"),
                             data) == ()


@pytest.mark.parametrize("fast_path", [True, False])
def test_make_exclude_keys_keeps_only_the_included_keys_in_a_batch(
        fast_path):
    graphs = [graph(n, 2, seed=n, y=torch.tensor([float(n)]), name=f"g{n}")
              for n in (2, 3)]
    exclude = list(make_exclude_keys(["x", "edge_index"], graphs[0]))
    batch = FixedSizeCollater(FixedSizeOptions(8, 6, 3), exclude_keys=exclude,
                              fast_path=fast_path)(graphs)
    reference = Batch.from_data_list(graphs, exclude_keys=exclude)
    assert sorted(batch.keys()) == sorted(reference.keys()) == \
        ["batch", "edge_index", "ptr", "x"]
    assert torch.equal(batch.x[:5], reference.x)
    assert torch.equal(batch.edge_index[:, :4], reference.edge_index)


# -- label level ------------------------------------------------------------


@pytest.mark.parametrize("fast_path", [True, False])
def test_graph_labels_stay_graph_level_when_every_graph_has_one_edge(
        fast_path):
    """Every y has one row and every graph one edge (and two nodes): by
    size alone y looks edge-level, and PyG's own rule on the first graph
    says edge-level too. Label detection (one row per graph) decides:
    y gets one entry per graph slot."""
    graphs = [graph(2, 1, seed=i, y=torch.tensor([float(i + 1)]))
              for i in range(2)]
    opts = FixedSizeOptions(num_nodes=6, num_edges=5, num_graphs=3,
                            edge_pad_value=-2.0, graph_pad_value=-3.0)
    batch = FixedSizeCollater(opts, fast_path=fast_path)(graphs)
    reference = Batch.from_data_list(graphs)
    num_pad_graphs = opts.num_graphs - len(graphs)
    assert torch.equal(batch.y, torch.cat(
        [reference.y, torch.full((num_pad_graphs,), -3.0)]))
    # edge_attr, which does match the edge counts, is edge-level.
    assert torch.equal(batch.edge_attr[:2], reference.edge_attr)
    assert (batch.edge_attr[2:] == -2.0).all()


# -- trimming ---------------------------------------------------------------


def _self_loop_graph(num_nodes: int, first_value: float) -> Data:
    """A graph whose every node has one self-loop: trimming nodes removes
    exactly as many edges. Node values are distinct per graph."""
    loops = torch.arange(num_nodes)
    return Data(x=first_value + torch.arange(num_nodes,
                                             dtype=torch.float).view(-1, 1),
                edge_index=torch.stack([loops, loops]))


def test_node_trimming_fills_a_batch_without_padding_graph_exactly():
    """Two real graphs in two graph slots: there is no padding graph, so
    no padding node needs to be left and trimming cuts to the budget
    itself (nodes and, with them, edges fill both budgets exactly)."""
    torch.manual_seed(0)
    graphs = [_self_loop_graph(3, 0.0), _self_loop_graph(3, 10.0)]
    opts = FixedSizeOptions(num_nodes=4, num_edges=4, num_graphs=2)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 trim_nodes=True)
    batch = collater(graphs)
    assert batch.num_graphs == 2
    assert batch.x.shape == (4, 1) and batch.edge_index.shape == (2, 4)
    assert batch.graphs_mask.all() and batch.nodes_mask.all()
    assert batch.edges_mask.all()
    for i, source in enumerate(graphs):
        kept = batch.x[batch.batch == i].view(-1).tolist()
        assert kept, "trimming must not empty a graph"
        assert set(kept) <= set(source.x.view(-1).tolist())
    # Only self-loops survive, each within its own graph.
    src, dst = batch.edge_index
    assert torch.equal(src, dst)
    assert torch.equal(batch.batch[src].bincount(minlength=2),
                       batch.batch.bincount(minlength=2))
    assert (collater.trimmed.nodes, collater.trimmed.edges) == (2, 2)


def test_unpaddable_batch_raises_without_reporting_a_trim(poptorch_log):
    """All graph slots hold real graphs and the real nodes fill the node
    budget while edges need padding: no trimming can help (there is no
    padding graph to hold padding), so nothing is trimmed or logged. The
    first real trim afterwards is the one reported at warning level."""
    poptorch_log.set_level(logging.DEBUG, logger="poptorch::python")
    opts = FixedSizeOptions(num_nodes=4, num_edges=5, num_graphs=2)
    collater = FixedSizeCollater(opts, trim_nodes=True)
    graphs = [graph(2, 1, seed=0), graph(2, 1, seed=1)]
    with pytest.raises(RuntimeError, match="^" + re.escape(
            "Requested to pad a batch to 2 graphs but collater got a list "
            "of 2 graphs and cannot create additional graphs to pad nodes "
            "and edges.") + "$"):
        collater(graphs)
    assert (collater.trimmed.graphs, collater.trimmed.nodes,
            collater.trimmed.edges) == (0, 0, 0)
    assert not [r for r in poptorch_log.records
                if "FixedSizeCollater trimmed" in r.getMessage()]

    collater([graph(5, 2, seed=2)])  # 5 nodes for 4 slots: a real trim
    trims = [r for r in poptorch_log.records
             if "FixedSizeCollater trimmed" in r.getMessage()]
    assert [r.levelno for r in trims] == [logging.WARNING]


# -- padding_batch ----------------------------------------------------------


@pytest.mark.parametrize("fast_path", [True, False])
def test_padding_batch_honours_an_excluded_num_nodes(fast_path):
    """Padding graphs always carry num_nodes; the user's exclusion of it
    must reach the padding-only batch too, or its keys differ from a real
    batch's."""
    template = Data(x=torch.ones(3, 2), num_nodes=3,
                    edge_index=torch.tensor([[0, 1], [1, 2]]))
    collater = FixedSizeCollater(FixedSizeOptions(10, 12, 3),
                                 exclude_keys=["num_nodes"],
                                 fast_path=fast_path)
    real = collater([template])
    pad = collater.padding_batch(template)
    assert "num_nodes" not in real.keys()
    assert sorted(pad.keys()) == sorted(real.keys())
    for key, value in real.items():
        assert pad[key].shape == value.shape, key


# -- CombinedBatchingCollater -----------------------------------------------


def test_full_mini_batch_count_needs_no_padding_collater():
    """With exactly ``num_mini_batches`` mini-batches nothing is missing, so
    a plain collater (which cannot make padding mini-batches) works."""
    graphs = [graph(2 + i % 2, 3, seed=i) for i in range(4)]
    batch = CombinedBatchingCollater(Collater(), mini_batch_size=2,
                                     num_mini_batches=2)(graphs)
    parts = [Batch.from_data_list(graphs[:2]),
             Batch.from_data_list(graphs[2:])]
    for key in ("x", "edge_index", "edge_attr", "batch", "ptr"):
        assert torch.equal(batch[key],
                           torch.cat([part[key] for part in parts])), key


class _Recording:
    """A collater that keeps what it returns."""

    def __init__(self, collater):
        self.collater = collater
        self.batches = []

    def __call__(self, graphs):
        self.batches.append(self.collater(graphs))
        return self.batches[-1]


def test_a_single_mini_batch_is_passed_through_without_copies():
    """One mini-batch is its own concatenation: the combined batch holds
    the mini-batch's tensors themselves, not copies."""
    graphs = [graph(3, 4, seed=i, y=torch.tensor([float(i)]))
              for i in range(3)]
    recording = _Recording(Collater())
    batch = CombinedBatchingCollater(recording)(graphs)
    (mini,) = recording.batches
    reference = Batch.from_data_list(graphs)
    for key in ("x", "edge_index", "edge_attr", "y", "batch", "ptr"):
        assert torch.equal(batch[key], reference[key]), key
        assert batch[key].data_ptr() == mini[key].data_ptr(), key
