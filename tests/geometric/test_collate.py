"""FixedSizeCollater: the padding layout, labels, masks and every
validation error, on small hand-made graphs."""
import re
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.transforms.pad import AttrNamePadding

from poptorch_geometric import FixedSizeCollater, FixedSizeOptions
from poptorch_geometric import collate as collate_module

from ._graphs import assert_batches_identical, fast_path_only, graph


def _two_graphs(**extra):
    """Two graphs of 3 and 2 nodes, 4 and 2 edges, graph label 7."""
    g1 = Data(x=torch.ones(3, 2),
              edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
              edge_attr=torch.ones(4, 1), y=torch.tensor([7.0]))
    g2 = Data(x=torch.ones(2, 2), edge_index=torch.tensor([[0, 1], [1, 0]]),
              edge_attr=torch.ones(2, 1), y=torch.tensor([7.0]))
    for key, (v1, v2) in extra.items():
        g1[key], g2[key] = v1, v2
    return [g1, g2]


@pytest.mark.parametrize("fast_path", [True, False])
def test_worked_example(fast_path):
    """The spec's worked example, value by value."""
    graphs = _two_graphs(name=("g3", "g2"), count=(5, 5))
    opts = FixedSizeOptions(num_nodes=9, num_edges=11, num_graphs=5,
                            node_pad_value=-1, edge_pad_value=-2,
                            graph_pad_value=-3)
    batch = FixedSizeCollater(opts, fast_path=fast_path)(graphs)
    assert batch.batch.tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 4]
    assert batch.ptr.tolist() == [0, 3, 5, 7, 8, 9]
    assert batch.edge_index[:, 6:].tolist() == [[5, 5, 7, 7, 8],
                                                [5, 5, 7, 7, 8]]
    assert batch.y.tolist() == [7, 7, -3, -3, -3]
    assert batch.x[5:].eq(-1).all() and batch.x[:5].eq(1).all()
    assert batch.edge_attr[6:].eq(-2).all()
    assert batch.name == ["g3", "g2", "g3", "g3", "g3"]
    assert batch.count.tolist() == [5, 5, 5, 5, 5]
    assert batch.num_nodes == 9 and batch.num_edges == 11
    assert batch.num_graphs == 5


def test_pad_graph_defaults():
    graphs = _two_graphs(name=("gdb_57518", "x"), scalar_key=(2, 2))
    plain = FixedSizeCollater(FixedSizeOptions(12, 12, 2))(graphs[:1])
    assert plain.name == ["gdb_57518", "gdb_57518"]
    assert plain.scalar_key.tolist() == [2, 2]
    opts = FixedSizeOptions(12, 12, 2, pad_graph_defaults={
        "name": "pad_graph", "scalar_key": 3})
    batch = FixedSizeCollater(opts)(graphs[:1])
    assert batch.name == ["gdb_57518", "pad_graph"]
    assert batch.scalar_key.tolist() == [2, 3]


def test_padding_split_evenly_larger_shares_first():
    opts = FixedSizeOptions(num_nodes=10, num_edges=12, num_graphs=4)
    batch = FixedSizeCollater(opts)([graph(3, 4)])
    # 7 padding nodes over 3 padding graphs: 3, 2, 2; 8 edges: 3, 3, 2.
    assert batch.ptr.tolist() == [0, 3, 6, 8, 10]
    assert batch.edge_index[0, 4:].tolist() == [3, 3, 3, 6, 6, 6, 8, 8]


def test_padding_edges_only_on_padding_graphs_with_a_node():
    # 1 padding node for 3 padding graphs: every padding edge must sit on
    # it, never on an index past the last node.
    opts = FixedSizeOptions(num_nodes=4, num_edges=7, num_graphs=4)
    batch = FixedSizeCollater(opts, add_masks_to_batch=True)([graph(3, 4)])
    assert batch.ptr.tolist() == [0, 3, 4, 4, 4]
    assert batch.edge_index[:, 4:].tolist() == [[3, 3, 3], [3, 3, 3]]
    assert batch.edge_index.max() < batch.num_nodes


def test_exact_fill_adds_empty_padding_graphs():
    graphs = _two_graphs()
    opts = FixedSizeOptions(num_nodes=5, num_edges=6, num_graphs=4,
                            graph_pad_value=-3)
    batch = FixedSizeCollater(opts, add_masks_to_batch=True)(graphs)
    real = Batch.from_data_list(graphs)
    assert torch.equal(batch.x, real.x)
    assert torch.equal(batch.edge_index, real.edge_index)
    assert batch.y.tolist() == [7, 7, -3, -3]
    assert batch.ptr.tolist() == [0, 3, 5, 5, 5]
    assert batch.graphs_mask.tolist() == [True, True, False, False]
    assert batch.nodes_mask.all() and batch.edges_mask.all()


def test_full_graph_budget_without_padding():
    graphs = _two_graphs()
    batch = FixedSizeCollater(FixedSizeOptions(5, 6, 2),
                              add_masks_to_batch=True)(graphs)
    assert batch.num_graphs == 2
    assert batch.graphs_mask.tolist() == [True, True]


def test_node_level_labels_padded_with_node_pad_value():
    graphs = [graph(3, 2, y=torch.tensor([1, 2, 3])),
              graph(2, 2, y=torch.tensor([4, 5]))]
    collater = FixedSizeCollater(FixedSizeOptions(8, 6, 3, node_pad_value=9))
    batch = collater(graphs)
    assert collater.labels_type is FixedSizeCollater.LabelsType.NODE_LVL
    assert batch.y.tolist() == [1, 2, 3, 4, 5, 9, 9, 9]


def test_labels_type_is_kept_for_batches_that_cannot_tell():
    collater = FixedSizeCollater(FixedSizeOptions(8, 6, 3))
    collater([graph(3, 2, y=torch.ones(1, 1)), graph(2, 1, y=torch.ones(1, 1))])
    assert collater.labels_type is FixedSizeCollater.LabelsType.GRAPH_LVL
    # Every graph has one node: y could be per node or per graph.
    batch = collater([graph(1, 1, y=torch.ones(1, 1))] * 2)
    assert batch.y.shape == (3, 1)


def test_labels_that_cannot_be_told_apart_raise_on_first_batch():
    with pytest.raises(AssertionError, match="Incorrect input data"):
        FixedSizeCollater(FixedSizeOptions(8, 6, 3))(
            [graph(1, 1, y=torch.ones(1))] * 2)


def test_mixed_labels_raise():
    with pytest.raises(AssertionError, match="Incorrect input data"):
        FixedSizeCollater(FixedSizeOptions(8, 6, 3))(
            [graph(3, 1, y=torch.ones(3)), graph(2, 1, y=torch.ones(1))])


class _SubclassedData(Data):
    """A ``Data`` subclass: the collater reads its labels graph by graph
    instead of by columns."""


@pytest.mark.parametrize("data_class", [Data, _SubclassedData])
def test_label_levels_of_plain_and_subclassed_graphs(data_class):
    def make(num_nodes, y):
        return data_class(x=torch.ones(num_nodes, 1), y=y,
                          edge_index=torch.zeros(2, 1, dtype=torch.long))

    opts = FixedSizeOptions(8, 6, 3, node_pad_value=9, graph_pad_value=-1)
    graph_level = FixedSizeCollater(opts)
    batch = graph_level([make(3, torch.tensor(5.0)),
                         make(2, torch.tensor(6.0))])
    assert graph_level.labels_type is FixedSizeCollater.LabelsType.GRAPH_LVL
    assert batch.y.tolist() == [5.0, 6.0, -1.0]
    node_level = FixedSizeCollater(opts)
    batch = node_level([make(3, torch.tensor([1, 2, 3])),
                        make(2, torch.tensor([4, 5]))])
    assert node_level.labels_type is FixedSizeCollater.LabelsType.NODE_LVL
    assert batch.y.tolist() == [1, 2, 3, 4, 5, 9, 9, 9]
    # One-node graphs cannot tell: the level of the batch before holds.
    batch = node_level([make(1, torch.tensor([7])),
                        make(1, torch.tensor([8]))])
    assert batch.y.tolist() == [7, 8, 9, 9, 9, 9, 9, 9]


def test_excluded_labels_are_not_checked():
    graphs = [graph(3, 1, y=torch.ones(2))] * 2
    batch = FixedSizeCollater(FixedSizeOptions(8, 6, 3),
                              exclude_keys=["y"])(graphs)
    assert "y" not in batch


def test_labels_error_names_the_first_eight_graphs():
    graphs = [graph(3, 1, y=torch.ones(2)) for _ in range(9)]
    with pytest.raises(AssertionError, match=re.escape(
            "Incorrect input data: the labels y must be graph-level "
            "(y.shape[0] == 1 for every graph) or node-level (y.shape[0] == "
            "num_nodes for every graph); got rows [2, 2, 2, 2, 2, 2, 2, 2] "
            "for graphs of [3, 3, 3, 3, 3, 3, 3, 3] nodes.")):
        FixedSizeCollater(FixedSizeOptions(40, 20, 10))(graphs)


def test_attributes_that_differ_raise_unless_excluded():
    graphs = [graph(3, 1, extra=torch.ones(1)), graph(2, 1)]
    with pytest.raises(ValueError, match="Graph 1 of the batch has no "
                       "'extra', which graph 0 has"):
        FixedSizeCollater(FixedSizeOptions(8, 6, 3))(graphs)
    batch = FixedSizeCollater(FixedSizeOptions(8, 6, 3),
                              exclude_keys=["extra"])(graphs)
    assert "extra" not in batch


def test_graph_level_attribute_levels_persist_across_batches():
    """A graph-level fingerprint stays graph-level in a batch of one-node
    graphs, where its size alone would make it look node-level."""
    collater = FixedSizeCollater(FixedSizeOptions(8, 6, 3))
    collater([graph(3, 2, fp=torch.ones(1, 4)), graph(2, 1, fp=torch.ones(1, 4))])
    batch = collater([graph(1, 1, fp=torch.ones(1, 4))] * 2)
    assert batch.fp.shape == (3, 4)
    fresh = FixedSizeCollater(FixedSizeOptions(8, 6, 3))
    assert fresh([graph(1, 1, fp=torch.ones(1, 4))] * 2).fp.shape == (8, 4)


def test_train_masks_padded_with_false_and_pad_value_classes():
    graphs = [graph(3, 2, train_mask=torch.ones(3, dtype=torch.bool),
                    pos=torch.ones(3, 2))]
    padding = AttrNamePadding({"pos": 5.0}, default=-1.0)
    opts = FixedSizeOptions(6, 4, 2, node_pad_value=padding)
    batch = FixedSizeCollater(opts)(graphs)
    assert batch.train_mask.tolist() == [True] * 3 + [False] * 3
    assert batch.pos[3:].eq(5).all() and batch.x[3:].eq(-1).all()


def test_follow_batch_and_exclude_keys():
    graphs = _two_graphs(name=("a", "b"))
    collater = FixedSizeCollater(FixedSizeOptions(9, 11, 4),
                                 follow_batch=["edge_attr"],
                                 exclude_keys=["name"])
    batch = collater(graphs)
    assert "name" not in batch
    # 5 padding edges over 2 padding graphs: 3 then 2.
    assert batch.edge_attr_batch.tolist() == \
        [0] * 4 + [1] * 2 + [2] * 3 + [3] * 2
    assert batch.edge_attr_ptr.tolist() == [0, 4, 6, 9, 11]


def test_graphs_without_node_features():
    graphs = [Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=3),
              Data(edge_index=torch.tensor([[0], [0]]), num_nodes=1)]
    opts = FixedSizeOptions(6, 5, 3)
    with fast_path_only():
        batch = FixedSizeCollater(opts)(graphs)
    assert_batches_identical(batch,
                             FixedSizeCollater(opts, fast_path=False)(graphs))
    assert batch.num_nodes == 6 and batch.batch.tolist() == \
        [0, 0, 0, 1, 2, 2]
    assert batch.edge_index[:, 3:].tolist() == [[4, 4], [4, 4]]


class _Subclass(Data):
    def __inc__(self, key, value, *args, **kwargs):
        if key == "ref":
            return 100
        return super().__inc__(key, value, *args, **kwargs)


def test_data_subclasses_take_the_reference_path():
    graphs = [_Subclass(x=torch.ones(2, 1), ref=torch.tensor([1]))] * 2
    batch = FixedSizeCollater(FixedSizeOptions(5, 1, 3))(graphs)
    assert batch.ref.tolist() == [1, 101, 200]


def test_hetero_options_follow_the_data_and_masks_are_per_store():
    data = HeteroData()
    data["a"].x = torch.ones(2, 1)
    data["b"].x = torch.ones(3, 1)
    data["a", "r", "b"].edge_index = torch.tensor([[0, 1], [2, 2]])
    opts = FixedSizeOptions(num_nodes=6, num_edges=4, num_graphs=2)
    batch = FixedSizeCollater(opts, add_masks_to_batch=True)([data])
    assert opts.num_nodes == {"a": 6, "b": 6}  # mutated in place
    assert batch["a"].nodes_mask.tolist() == [True] * 2 + [False] * 4
    assert batch["b"].nodes_mask.tolist() == [True] * 3 + [False] * 3
    assert batch["a", "r", "b"].edges_mask.tolist() == \
        [True] * 2 + [False] * 2
    assert batch["a", "r", "b"].edge_index[:, 2:].tolist() == \
        [[2, 2], [3, 3]]
    assert batch.graphs_mask.tolist() == [True, False]


def test_hetero_nodes_without_features():
    data = HeteroData()
    data["a"].num_nodes = 2
    data["b"].x = torch.ones(3, 1)
    data["a", "r", "b"].edge_index = torch.tensor([[0, 1], [2, 2]])
    batch = FixedSizeCollater(FixedSizeOptions(8, 6, 3))([data, data])
    assert batch["a"].num_nodes == 8 and batch["b"].x.shape == (8, 1)


# -- validation errors -----------------------------------------------------

def test_error_not_a_list():
    with pytest.raises(TypeError, match="Expected list, got tuple."):
        FixedSizeCollater(FixedSizeOptions(5))(tuple(_two_graphs()))


def test_error_empty_list():
    with pytest.raises(ValueError, match=re.escape(
            "FixedSizeCollater got an empty list: a batch needs at least one "
            "real graph.")):
        FixedSizeCollater(FixedSizeOptions(5))([])


def test_error_mixed_types():
    with pytest.raises(AssertionError, match=re.escape(
            "All graphs of a batch must have the same type, got ['Data', "
            "'HeteroData'].")):
        FixedSizeCollater(FixedSizeOptions(5))([graph(1, 1), HeteroData()])


def test_error_too_many_graphs():
    with pytest.raises(RuntimeError, match=re.escape(
            "The fixed size of 2 graph(s) cannot hold the 3 graph(s) "
            "received: a batch holds at most num_graphs - 1 real graphs plus "
            "one padding graph. Increase num_graphs in FixedSizeOptions or "
            "pass fewer graphs.")):
        FixedSizeCollater(FixedSizeOptions(100, 100, 2))(
            [graph(1, 1)] * 3)


@pytest.mark.parametrize("sizes", [(4, 20), (20, 5)])
def test_error_over_size(sizes):
    pattern = ("The fixed sizes given don't allocate enough space for the "
               "number of .* nodes|edges")
    with pytest.raises(RuntimeError, match=pattern):
        FixedSizeCollater(FixedSizeOptions(*sizes, num_graphs=3))(
            _two_graphs())


def test_error_over_size_names_the_hetero_type():
    data = HeteroData()
    data["a"].x = torch.ones(2, 1)
    data["a", "r", "a"].edge_index = torch.zeros(2, 5, dtype=torch.long)
    opts = FixedSizeOptions({"a": 10}, {("a", "r", "a"): 3}, 2)
    with pytest.raises(RuntimeError, match=r"\('a', 'r', 'a'\) edges"):
        FixedSizeCollater(opts)([data])


def test_error_no_padding_graph_left():
    with pytest.raises(RuntimeError, match=(
            "Requested to pad a batch to 2 graphs but collater got a list "
            "of 2 graphs and cannot create additional graphs to pad nodes "
            "and edges.")):
        FixedSizeCollater(FixedSizeOptions(10, 10, 2))(_two_graphs())


def test_error_no_padding_node_for_padding_edges():
    with pytest.raises(RuntimeError, match="no padding node is left"):
        FixedSizeCollater(FixedSizeOptions(5, 10, 3))(_two_graphs())


def test_error_hetero_type_missing_from_options():
    data = HeteroData()
    data["a"].x = torch.ones(2, 1)
    data["a", "r", "a"].edge_index = torch.zeros(2, 1, dtype=torch.long)
    opts = FixedSizeOptions({"b": 10}, {("a", "r", "a"): 3}, 2)
    with pytest.raises(AssertionError, match="no node budget for type 'a'"):
        FixedSizeCollater(opts)([data])


def test_error_hetero_options_for_homogeneous_data():
    opts = FixedSizeOptions({"a": 10}, {("a", "r", "a"): 3}, 2)
    with pytest.raises(ValueError, match="per node/edge type"):
        FixedSizeCollater(opts)([graph(2, 1)])


def test_error_sparse_attribute():
    sparse = torch.eye(3).to_sparse()
    with pytest.raises(ValueError, match="sparse"):
        FixedSizeCollater(FixedSizeOptions(10, 10, 2))(
            [graph(3, 1, adj=sparse)])


def test_masks_are_only_added_on_request():
    batch = FixedSizeCollater(FixedSizeOptions(8, 6, 3))(_two_graphs())
    assert not {"graphs_mask", "nodes_mask", "edges_mask"} & set(batch.keys())


def test_physical_memory_is_this_machines():
    meminfo = Path("/proc/meminfo")
    if not meminfo.exists():
        pytest.skip("needs /proc/meminfo")
    total_kib = int(meminfo.read_text().split("MemTotal:")[1].split()[0])
    assert collate_module._physical_memory() == \
        pytest.approx(total_kib * 1024, rel=0.05)


def _options_of_edges(num_edges):
    return FixedSizeOptions(num_nodes=2, num_edges=num_edges, num_graphs=2)


def test_edge_budget_up_to_the_machines_memory_is_accepted(monkeypatch):
    """Two int64 per edge slot: 2**30 edge slots need exactly 16 GiB."""
    monkeypatch.setattr(collate_module, "_physical_memory", lambda: 2**34)
    FixedSizeCollater(_options_of_edges(2**30))
    monkeypatch.setattr(collate_module, "_physical_memory", lambda: None)
    FixedSizeCollater(_options_of_edges(2**40))  # memory unknown: no check


def test_edge_budget_past_the_machines_memory_raises(monkeypatch):
    monkeypatch.setattr(collate_module, "_physical_memory", lambda: 2**34)
    with pytest.raises(ValueError, match=re.escape(
            f"The edge budget of {2**31} edge slots per batch needs 32 GiB "
            "for edge_index alone, more than this machine's 16 GiB (without "
            "num_edges, FixedSizeOptions assumes fully connected graphs: "
            "num_nodes x (num_nodes - 1) edges). Set num_edges, or derive "
            "the sizes from the data with FixedSizeOptions.from_dataset, "
            "for_packing or for_batch_size.")):
        FixedSizeCollater(_options_of_edges(2**31))
    with pytest.raises(ValueError, match="edge_index alone"):
        FixedSizeCollater(_options_of_edges(2**30 + 1))
