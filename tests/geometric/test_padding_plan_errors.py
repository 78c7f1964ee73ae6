"""What padding graphs hold (``_padding/plan.py``) and the graph checks of a
batch (``_padding/validate.py``), through FixedSizeCollater.

Padding values are checked against ``Batch.from_data_list`` over the real
graphs and padding graphs built by hand in the test, on both collation
paths: per-type and per-attribute ``Padding`` objects, attributes PyG
offsets by node counts (``*index*`` keys and ``face``) padded with 0,
one-dimensional graph-level tensors, non-tensor attributes of hetero stores
and the device of the padding. The checks' errors are matched in full.
"""
import re

import pytest
import torch
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.transforms.pad import (AttrNamePadding,
                                            EdgeTypePadding, NodeTypePadding)

from poptorch_geometric import FixedSizeCollater, FixedSizeOptions
from poptorch_geometric._padding.validate import check_edge_index

from ._graphs import assert_batches_identical

AB = ("a", "to", "b")
AA = ("a", "near", "a")


def _raises(error, message):
    return pytest.raises(error, match=f"^{re.escape(message)}$")


def _data(num_nodes, edges, seed=0, **extra):
    """A graph with ``x`` [n, 2], the given (src, dst) edges, an
    ``edge_attr`` [e, 1] and the ``extra`` attributes."""
    gen = torch.Generator().manual_seed(seed)
    data = Data(x=torch.randn(num_nodes, 2, generator=gen),
                edge_index=torch.tensor(edges, dtype=torch.long).reshape(
                    -1, 2).t().contiguous(),
                edge_attr=torch.randn(len(edges), 1, generator=gen))
    for key, value in extra.items():
        data[key] = value
    return data


def _pad(num_nodes, num_edges, node_value=0.0, edge_value=0.0, **extra):
    """A padding graph built by hand: constant features and ``num_edges``
    self-loops on its first node."""
    data = Data(x=torch.full((num_nodes, 2), node_value),
                edge_index=torch.zeros(2, num_edges, dtype=torch.long),
                edge_attr=torch.full((num_edges, 1), edge_value))
    for key, value in extra.items():
        data[key] = value
    data.num_nodes = num_nodes
    return data


def _both_paths(opts, graphs, expected):
    for fast_path in (True, False):
        batch = FixedSizeCollater(opts, fast_path=fast_path)(graphs)
        assert_batches_identical(batch, expected)


# -- padding values -------------------------------------------------------

def test_per_attribute_edge_padding_values():
    """``AttrNamePadding`` as ``edge_pad_value`` pads every edge attribute
    with its own value."""
    pad = AttrNamePadding({"edge_attr": -3.0, "edge_weight": -4.0},
                          default=-9.0)
    opts = FixedSizeOptions(num_nodes=6, num_edges=5, num_graphs=3,
                            edge_pad_value=pad)
    graphs = [_data(3, [(0, 1), (1, 2)], edge_weight=torch.ones(2)),
              _data(2, [(1, 0)], seed=1, edge_weight=torch.ones(1))]
    # One padding graph: 1 padding node and 2 padding edges.
    expected = Batch.from_data_list(graphs + [
        _pad(1, 2, edge_value=-3.0, edge_weight=torch.full((2,), -4.0))])
    _both_paths(opts, graphs, expected)


def _hetero(num_a, num_b, seed=0):
    gen = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["a"].x = torch.randn(num_a, 2, generator=gen)
    data["b"].x = torch.randn(num_b, 2, generator=gen)
    data[AB].edge_index = torch.tensor([[0, num_a - 1], [num_b - 1, 0]])
    data[AB].edge_attr = torch.randn(2, 3, generator=gen)
    data[AA].edge_index = torch.tensor([[0], [num_a - 1]])
    data[AA].edge_attr = torch.randn(1, 3, generator=gen)
    return data


def test_per_type_node_and_edge_padding_values():
    """``NodeTypePadding`` / ``EdgeTypePadding`` give each store its own
    padding value, ``AttrNamePadding`` inside them each attribute."""
    opts = FixedSizeOptions(
        num_nodes={"a": 5, "b": 4}, num_edges={AB: 6, AA: 3}, num_graphs=2,
        node_pad_value=NodeTypePadding({"a": -1.0, "b": -2.0}),
        edge_pad_value=EdgeTypePadding({
            AB: AttrNamePadding({"edge_attr": -3.0}),
            AA: -4.0}, default=-9.0))
    batch = FixedSizeCollater(opts, add_masks_to_batch=True)(
        [_hetero(3, 2)])
    for store, key, value in (("a", "x", -1.0), ("b", "x", -2.0),
                              (AB, "edge_attr", -3.0),
                              (AA, "edge_attr", -4.0)):
        mask = batch[store].nodes_mask if key == "x" \
            else batch[store].edges_mask
        assert batch[store][key][~mask].eq(value).all(), store
        assert (~mask).any(), store


def test_node_index_attributes_point_at_their_padding_graphs_first_node():
    """A node-level attribute PyG offsets by node counts is padded with 0:
    after batching, each padding node's entry is its graph's first node."""
    opts = FixedSizeOptions(num_nodes=9, num_edges=4, num_graphs=4,
                            node_pad_value=-1.0)
    graphs = [_data(3, [(0, 1)], node_index=torch.tensor([2, 0, 1])),
              _data(2, [(1, 0)], seed=1, node_index=torch.tensor([1, 1]))]
    # 4 padding nodes over 2 padding graphs: 2 and 2; 2 padding edges: 1, 1.
    expected = Batch.from_data_list(graphs + [
        _pad(2, 1, -1.0, node_index=torch.zeros(2, dtype=torch.long)),
        _pad(2, 1, -1.0, node_index=torch.zeros(2, dtype=torch.long))])
    _both_paths(opts, graphs, expected)
    assert expected.node_index.tolist() == [2, 0, 1, 4, 4, 5, 5, 7, 7]


@pytest.mark.parametrize("key", ["root_index", "face"])
def test_graph_level_incremented_attributes_are_padded_with_zero(key):
    """Graph-level ``*index*`` / ``face`` tensors of padding graphs are 0
    (their graph's first node once offset), not ``graph_pad_value``, and
    are offset like the real graphs' on both paths."""
    opts = FixedSizeOptions(num_nodes=11, num_edges=6, num_graphs=4,
                            graph_pad_value=-3.0)
    # 3 x 2 values: neither a node nor an edge count of either graph.
    graphs = [_data(4, [(0, 1), (2, 3), (3, 0)],
                    **{key: torch.tensor([[0, 1], [1, 2], [2, 3]])}),
              _data(5, [(4, 0), (1, 2), (0, 0)], seed=1,
                    **{key: torch.tensor([[4, 0], [3, 1], [2, 2]])})]
    zeros = torch.zeros(3, 2, dtype=torch.long)
    # 2 padding nodes over 2 padding graphs: 1, 1; 0 padding edges.
    expected = Batch.from_data_list(graphs + [
        _pad(1, 0, **{key: zeros}), _pad(1, 0, **{key: zeros})])
    _both_paths(opts, graphs, expected)


@pytest.mark.parametrize("fast_path", [True, False])
def test_graph_level_indices_of_empty_padding_graphs_stay_in_range(
        fast_path):
    graphs = [_data(3, [(0, 1), (1, 2)], root_index=torch.tensor([1]))]
    # 1 padding node for 3 padding graphs: two of them have no node.
    opts = FixedSizeOptions(num_nodes=4, num_edges=3, num_graphs=4)
    collater = FixedSizeCollater(opts, fast_path=fast_path)
    batch = collater(graphs)
    assert batch.ptr.tolist() == [0, 3, 4, 4, 4]
    # The real root as PyG batches it, the padding graph with a node its
    # first node (node 3), the node-less ones the batch's last node (also 3).
    assert batch.root_index.tolist() == [1, 3, 3, 3]
    # A padding-only mini-batch: every padding graph at its first node.
    pad = collater.padding_batch(graphs[0])
    assert pad.root_index.tolist() == pad.ptr[:-1].tolist()


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("roots", [torch.tensor(1), torch.tensor([1, 2])],
                         ids=["0-dim", "two-roots"])
def test_index_attributes_of_a_node_less_padding_graph(fast_path, roots):
    """Real graphs fill every node and edge slot: the one padding graph
    has no node, and its index attribute (one or two entries, or 0-dim)
    points at the batch's last node instead of one past it."""
    graphs = [_data(3, [(0, 1), (1, 2)], root_index=roots),
              _data(1, [(0, 0)], seed=1, root_index=roots)]
    opts = FixedSizeOptions(num_nodes=4, num_edges=3, num_graphs=3)
    batch = FixedSizeCollater(opts, fast_path=fast_path)(graphs)
    assert batch.ptr.tolist() == [0, 3, 4, 4]
    real = Batch.from_data_list(graphs).root_index
    padded = batch.root_index
    assert torch.equal(padded[:real.shape[0]], real)
    assert padded[real.shape[0]:].eq(opts.num_nodes - 1).all()
    assert padded.shape[0] == real.shape[0] // 2 * 3


def test_one_dimensional_graph_level_tensors_keep_their_shape():
    opts = FixedSizeOptions(num_nodes=9, num_edges=6, num_graphs=3,
                            graph_pad_value=-3.0)
    graphs = [_data(3, [(0, 1), (1, 2), (2, 0)],
                    stats=torch.tensor([1.0, 2.0])),
              _data(4, [(0, 1), (1, 2), (3, 0)], seed=1,
                    stats=torch.tensor([3.0, 4.0]))]
    expected = Batch.from_data_list(graphs + [
        _pad(2, 0, stats=torch.full((2,), -3.0))])
    _both_paths(opts, graphs, expected)
    assert expected.stats.shape == (6,)


def test_hetero_non_tensor_attributes():
    """``pad_graph_defaults`` applies to the global store; non-tensors of a
    node store are the first graph's value."""
    graphs = []
    for name, n in (("first", 3), ("second", 2)):
        data = HeteroData()
        data["a"].x = torch.ones(n, 2)
        data["a"].name = name
        data.name = f"g_{name}"
        graphs.append(data)
    opts = FixedSizeOptions(num_nodes={"a": 8}, num_edges={},
                            num_graphs=4,
                            pad_graph_defaults={"name": "pad"})
    batch = FixedSizeCollater(opts)(graphs)
    assert batch.name == ["g_first", "g_second", "pad", "pad"]
    assert batch["a"].name == ["first", "second", "first", "first"]


@pytest.mark.parametrize("fast_path", [True, False])
def test_padding_is_made_on_the_graphs_device(fast_path):
    """The ``meta`` device stands in for an accelerator."""
    graphs = [Data(x=torch.ones(3, 2, device="meta"), num_nodes=3),
              Data(x=torch.ones(2, 2, device="meta"), num_nodes=2)]
    batch = FixedSizeCollater(FixedSizeOptions(8, 4, 4),
                              fast_path=fast_path)(graphs)
    assert batch.x.device.type == "meta"
    assert batch.x.shape == (8, 2)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA device")
def test_edge_index_check_runs_on_the_graphs_device():
    """Graphs already on the GPU: the bounds of the edge_index check are
    made there too, for good and for bad edges."""
    good = Data(x=torch.ones(3, 2), edge_index=torch.tensor([[0], [2]]))
    bad = Data(x=torch.ones(2, 2), edge_index=torch.tensor([[0], [2]]))
    opts = FixedSizeOptions(8, 4, 4)
    batch = FixedSizeCollater(opts)([good.to("cuda")])
    assert batch.edge_index.device.type == "cuda"
    with _raises(ValueError, _OUT_OF_RANGE.format(
            graph=1, what="edge_index", value=2, count=2, kind="node",
            last=1)):
        FixedSizeCollater(opts)([good.to("cuda"), bad.to("cuda")])


# -- graph checks ---------------------------------------------------------

_OUT_OF_RANGE = (
    "Graph {graph} of the batch has an {what} entry {value}, outside its "
    "{count} {kind}(s) (valid: 0 to {last}): an edge must join two nodes "
    "of its own graph, or it would join another graph of the batch. Fix "
    "the dataset's {what}.")


@pytest.mark.parametrize("fast_path", [True, False])
def test_edge_index_outside_its_graph_message_in_full(fast_path):
    graphs = [_data(3, [(0, 2)]), _data(2, [(1, 0), (0, 2)], seed=1)]
    opts = FixedSizeOptions(num_nodes=8, num_edges=5, num_graphs=3)
    with _raises(ValueError, _OUT_OF_RANGE.format(
            graph=1, what="edge_index", value=2, count=2, kind="node",
            last=1)):
        FixedSizeCollater(opts, fast_path=fast_path)(graphs)


def test_check_edge_index_reads_node_counts_from_the_graphs():
    """Without node counts, ``check_edge_index`` asks each graph."""
    good = Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0], [2]]))
    bad = Data(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [2]]))
    check_edge_index([good, good])
    with _raises(ValueError, _OUT_OF_RANGE.format(
            graph=1, what="edge_index", value=2, count=2, kind="node",
            last=1)):
        check_edge_index([good, bad])


def _hetero_edges(num_a, num_b, ab_edges, with_aa=True):
    """'a' and 'b' nodes and a->b edges; with ``with_aa``, first an 'a'-'a'
    edge type holding an edge attribute but no ``edge_index``."""
    data = HeteroData()
    data["a"].x = torch.ones(num_a, 2)
    data["b"].x = torch.ones(num_b, 2)
    if with_aa:
        data[AA].edge_attr = torch.ones(2, 1)
    data[AB].edge_index = torch.tensor(ab_edges, dtype=torch.long).reshape(
        -1, 2).t().contiguous()
    return data


@pytest.mark.parametrize("graphs, graph, value", [
    # The only a->b edge of the batch is the bad one.
    ([(3, 2, [(0, 5)], False)], 0, 5),
    # Edge types without edge_index are skipped, not the last checked.
    ([(3, 2, [(0, 1)], True), (3, 2, [(1, 0), (2, 4)], True)], 1, 4),
])
def test_hetero_edge_index_outside_its_graph_message_in_full(graphs, graph,
                                                              value):
    data_list = [_hetero_edges(*g) for g in graphs]
    opts = FixedSizeOptions(num_nodes={"a": 8, "b": 8},
                            num_edges={AA: 8, AB: 8}, num_graphs=3)
    with _raises(ValueError, _OUT_OF_RANGE.format(
            graph=graph, what=f"edge_index of {AB}", value=value, count=2,
            kind="'b' node", last=1)):
        FixedSizeCollater(opts)(data_list)


@pytest.mark.parametrize("second, problem", [
    (_data(2, [(0, 1)], seed=1, weight=torch.ones(1)),
     "has 'weight', which graph 0 has not"),
    (Data(x=torch.ones(2, 2), edge_index=torch.tensor([[0], [1]])),
     "has no 'edge_attr', which graph 0 has"),
])
@pytest.mark.parametrize("fast_path", [True, False])
def test_graphs_with_other_attributes_message_in_full(second, problem,
                                                      fast_path):
    opts = FixedSizeOptions(num_nodes=8, num_edges=5, num_graphs=3)
    with _raises(ValueError,
                 f"Graph 1 of the batch {problem}: every graph of a batch "
                 "needs the same attributes (give the graphs that lack it a "
                 "value, or leave the attribute out with exclude_keys)."):
        FixedSizeCollater(opts, fast_path=fast_path)(
            [_data(3, [(0, 1)]), second])
