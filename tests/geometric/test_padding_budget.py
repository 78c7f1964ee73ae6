"""The room accounting of a fixed-size batch (``_padding/budget.py``) seen
through FixedSizeCollater: the over-size, no-padding-node, no-padding-graph
and budget errors in full, which end types of an edge type decide whether
padding edges have a node to sit on (for the error, for trimming and for
sharing the padding edges), and that trimming only runs when it is needed.
"""
import re

import pytest
import torch
from torch_geometric.data import Batch, Data, HeteroData

from poptorch_geometric import FixedSizeCollater, FixedSizeOptions
from poptorch_geometric._padding.trim import TrimCounts

from ._graphs import assert_batches_identical, graph

AB = ("a", "to", "b")
BA = ("b", "to", "a")


def _hetero(num_a, num_b, edges, seed=0):
    """A HeteroData graph with node types ``a`` and ``b`` (features of
    width 2) and ``a -> b`` edges given as (src, dst) pairs, with no edge
    attribute besides ``edge_index``."""
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["a"].x = torch.randn(num_a, 2, generator=gen)
    data["b"].x = torch.randn(num_b, 2, generator=gen)
    data[AB].edge_index = torch.tensor(edges, dtype=torch.long).reshape(
        -1, 2).t().contiguous()
    return data


def _raises(error, message):
    return pytest.raises(error, match=f"^{re.escape(message)}$")


# -- over-size ------------------------------------------------------------

def _oversize(label, kind, samples, slots, held, allowed):
    """The whole over-size message: ``label`` names what overflows (e.g.
    "'a' nodes"), ``kind`` is "nodes" or "edges"."""
    return (f"The fixed sizes given don't allocate enough space for the "
            f"number of {label} required to fit {samples} sample(s) into a "
            f"batch ({slots} including extra padded graph(s)): the samples "
            f"hold {held} {kind} but the fixed size allows {allowed} {kind}. "
            f"Increase num_{kind} in FixedSizeOptions, or set trim_{kind} "
            "(OverSizeStrategy.Trim*) to trim the samples to fit.")


@pytest.mark.parametrize("fast_path", [True, False])
def test_too_many_nodes_message_in_full(fast_path):
    graphs = [graph(3, 2), graph(2, 2)]  # 5 nodes, 4 edges
    opts = FixedSizeOptions(num_nodes=4, num_edges=10, num_graphs=3)
    with _raises(RuntimeError, _oversize("nodes", "nodes", 2, 3, 5, 4)):
        FixedSizeCollater(opts, fast_path=fast_path)(graphs)


def test_too_many_edges_message_in_full():
    graphs = [graph(3, 4), graph(2, 3)]  # 5 nodes, 7 edges
    opts = FixedSizeOptions(num_nodes=10, num_edges=6, num_graphs=4)
    with _raises(RuntimeError, _oversize("edges", "edges", 2, 4, 7, 6)):
        FixedSizeCollater(opts)(graphs)


def test_too_many_nodes_of_a_hetero_type_names_the_type():
    graphs = [_hetero(3, 1, [(0, 0)]), _hetero(2, 1, [(1, 0)])]
    opts = FixedSizeOptions(num_nodes={"a": 4, "b": 5},
                            num_edges={AB: 5}, num_graphs=3)
    with _raises(RuntimeError, _oversize("'a' nodes", "nodes", 2, 3, 5, 4)):
        FixedSizeCollater(opts)(graphs)


def test_full_graph_slots_with_one_node_to_pad_raise():
    """Every graph slot holds a real graph: even one missing node cannot be
    padded."""
    graphs = [graph(3, 2), graph(2, 2)]
    opts = FixedSizeOptions(num_nodes=6, num_edges=4, num_graphs=2)
    with _raises(RuntimeError,
                 "Requested to pad a batch to 2 graphs but collater got a "
                 "list of 2 graphs and cannot create additional graphs to "
                 "pad nodes and edges."):
        FixedSizeCollater(opts)(graphs)


# -- budgets that do not match the data -----------------------------------

def test_per_type_node_sizes_for_homogeneous_data_raise():
    """A dict for num_nodes alone is enough to be wrong for ``Data``."""
    opts = FixedSizeOptions(num_nodes={"a": 8}, num_edges=8, num_graphs=2)
    with _raises(ValueError,
                 "FixedSizeOptions give sizes per node/edge type but the "
                 "data is homogeneous (Data): give int sizes."):
        FixedSizeCollater(opts)([graph(3, 2)])


def test_missing_edge_type_budget_names_the_type_and_the_known_ones():
    data = _hetero(2, 2, [(0, 1)])
    data[BA].edge_index = torch.tensor([[1], [0]])
    opts = FixedSizeOptions(num_nodes={"a": 4, "b": 4},
                            num_edges={AB: 4}, num_graphs=2)
    with _raises(AssertionError,
                 "FixedSizeOptions has no edge budget for type ('b', 'to', "
                 "'a') of the data; give num_edges for every type (it has "
                 "[('a', 'to', 'b')])."):
        FixedSizeCollater(opts)([data])


# -- padding edges need a padding node ------------------------------------

@pytest.mark.parametrize("fast_path", [True, False])
def test_no_padding_node_for_padding_edges_message_in_full(fast_path):
    """Graphs whose only padded attribute is ``edge_index`` raise too."""
    graphs = [Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3)]
    opts = FixedSizeOptions(num_nodes=3, num_edges=4, num_graphs=2)
    with _raises(RuntimeError,
                 "Cannot pad 2 edges: the real graphs fill every node slot "
                 "of nodes (3/3), so no padding node is left to hold padding "
                 "edges (they would point past the last node). Reserve at "
                 "least one node for padding: increase num_nodes in "
                 "FixedSizeOptions by one, or trim nodes "
                 "(OverSizeStrategy.TrimNodes)."):
        FixedSizeCollater(opts, fast_path=fast_path)(graphs)


@pytest.mark.parametrize("full, nodes", [
    # The source type is full; 'b' has one free slot, which must not be
    # listed as full.
    ("'a' nodes (3/3)", {"a": 3, "b": 3}),
    # The destination type is full.
    ("'b' nodes (2/2)", {"a": 4, "b": 2}),
    # Both are: the message lists them all.
    ("'a' nodes (3/3), 'b' nodes (2/2)", {"a": 3, "b": 2}),
])
def test_hetero_padding_edges_need_a_node_of_both_end_types(full, nodes):
    graphs = [_hetero(3, 2, [(0, 1), (2, 0)])]
    opts = FixedSizeOptions(num_nodes=nodes, num_edges={AB: 4},
                            num_graphs=2)
    with _raises(RuntimeError,
                 f"Cannot pad 2 ('a', 'to', 'b') edges: the real graphs "
                 f"fill every node slot of {full}, so no padding node is "
                 "left to hold padding edges (they would point past the "
                 "last node). Reserve at least one node for padding: "
                 "increase num_nodes in FixedSizeOptions by one, or trim "
                 "nodes (OverSizeStrategy.TrimNodes)."):
        FixedSizeCollater(opts)(graphs)


def test_trimming_frees_a_node_for_a_single_padding_edge():
    """Real nodes fill their budget and one edge slot is free: trimming
    nodes removes one node, so the padding edge has a home."""
    torch.manual_seed(0)
    opts = FixedSizeOptions(num_nodes=3, num_edges=4, num_graphs=2)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 trim_nodes=True)
    batch = collater([graph(3, 3)])
    assert int(batch.nodes_mask.sum()) == 2
    assert batch.ptr.tolist() == [0, 2, 3]
    pad_edges = batch.edge_index[:, ~batch.edges_mask]
    assert pad_edges.shape[1] >= 1 and pad_edges.eq(2).all()


@pytest.mark.parametrize("nodes, trimmed_type", [
    ({"a": 3, "b": 3}, "a"),  # the source type is full
    ({"a": 4, "b": 2}, "b"),  # the destination type is full
])
def test_hetero_trimming_frees_a_node_of_the_full_end_type(nodes,
                                                           trimmed_type):
    torch.manual_seed(0)
    opts = FixedSizeOptions(num_nodes=nodes, num_edges={AB: 4},
                            num_graphs=2)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 trim_nodes=True)
    batch = collater([_hetero(3, 2, [(0, 1), (2, 0)])])
    real = {"a": 3, "b": 2}
    real[trimmed_type] -= 1
    for t in ("a", "b"):
        assert int(batch[t].nodes_mask.sum()) == real[t]
        assert batch[t].x.shape[0] == nodes[t]
    # Padding edges are self-loops on the first padding node of each type.
    pad_edges = batch[AB].edge_index[:, ~batch[AB].edges_mask]
    assert pad_edges.shape[1] >= 1
    assert pad_edges[0].eq(real["a"]).all()
    assert pad_edges[1].eq(real["b"]).all()


def test_trimming_only_runs_when_needed(poptorch_log):
    """Room for padding nodes and edges: a trimming collater keeps the
    graphs, counts and logs nothing, and batches as a plain one."""
    graphs = [graph(3, 2), graph(2, 2)]
    opts = FixedSizeOptions(num_nodes=8, num_edges=6, num_graphs=3)
    collater = FixedSizeCollater(opts, trim_nodes=True, trim_edges=True)
    batch = collater(graphs)
    assert collater.trimmed == TrimCounts()
    assert "trimmed" not in poptorch_log.text
    assert_batches_identical(batch, FixedSizeCollater(opts)(graphs))


# -- sharing padding edges ------------------------------------------------

def _pad_graph(num_a, num_b, num_edges):
    """A padding graph built by hand: zero features, ``num_edges``
    self-loops between the first 'a' and the first 'b' node."""
    data = HeteroData()
    data["a"].x = torch.zeros(num_a, 2)
    data["a"].num_nodes = num_a
    data["b"].x = torch.zeros(num_b, 2)
    data["b"].num_nodes = num_b
    data[AB].edge_index = torch.zeros(2, num_edges, dtype=torch.long)
    return data


@pytest.mark.parametrize("a_pad, b_pad", [(1, 3), (3, 1)])
def test_padding_edges_go_to_padding_graphs_with_both_end_types(a_pad,
                                                                b_pad):
    """One padding node of one end type for three padding graphs: the
    three padding edges all go to the one padding graph holding it (the
    padding nodes of the other type are one per padding graph)."""
    real = _hetero(2, 1, [(0, 0), (1, 0)])
    opts = FixedSizeOptions(num_nodes={"a": 2 + a_pad, "b": 1 + b_pad},
                            num_edges={AB: 5}, num_graphs=4)
    batch = FixedSizeCollater(opts)([real])
    # 3 padding graphs; the type with 3 padding nodes gives each one.
    shares = {1: [1, 0, 0], 3: [1, 1, 1]}
    pads = [_pad_graph(shares[a_pad][j], shares[b_pad][j],
                       3 if j == 0 else 0) for j in range(3)]
    expected = Batch.from_data_list([real] + pads)
    assert_batches_identical(batch, expected)
