"""Which attributes FixedSizeCollater pads as node-, edge- or graph-level
(``_padding/classify``), on small hand-made graphs:

* the sizes of a batch decide; when they cannot (every graph has one node,
  or one edge, or as many nodes as edges) the answer of an earlier batch is
  kept, and the label level found for ``y`` wins;
* sparse tensors are refused with the advice to exclude them, and excluding
  them works, in ``Data`` and in every ``HeteroData`` store;
* ``HeteroData`` stores: non-tensors, 0-dim, 1-dim and graph-level tensors,
  and padding values given per node / edge type;
* ``Data`` subclasses whose ``__cat_dim__`` reads the value.

Every real part is compared with PyG's ``Batch.from_data_list`` of the real
graphs; padding is checked against the options' padding values."""
import re

import pytest
import torch
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.transforms.pad import EdgeTypePadding, NodeTypePadding

from poptorch_geometric import FixedSizeCollater, FixedSizeOptions

GRAPH_PAD = -7.0


def _graph(num_nodes: int, edges, **attrs) -> Data:
    """``num_nodes`` nodes, ``edges`` a list of (src, dst) pairs."""
    edge_index = torch.tensor(edges, dtype=torch.long).view(-1, 2).t()
    return Data(x=torch.arange(num_nodes, dtype=torch.float).view(-1, 1),
                edge_index=edge_index.contiguous(), **attrs)


def _path(n: int):
    return [(i, i + 1) for i in range(n - 1)]


def _cycle(n: int):
    return [(i, (i + 1) % n) for i in range(n)]


def _opts(**kw) -> FixedSizeOptions:
    kw.setdefault("num_nodes", 12)
    kw.setdefault("num_edges", 15)
    kw.setdefault("num_graphs", 4)
    return FixedSizeOptions(graph_pad_value=GRAPH_PAD, **kw)


def _assert_graph_level(batch, real_graphs, key, opts):
    """``key`` is padded graph-level: one row block per graph slot, the
    real ones as PyG batches them, the rest ``graph_pad_value``."""
    ref = getattr(Batch.from_data_list(real_graphs), key)
    rows = ref.shape[0] // len(real_graphs)
    assert getattr(batch, key).shape == (rows * opts.num_graphs,
                                         *ref.shape[1:])
    assert torch.equal(getattr(batch, key)[:ref.shape[0]], ref)
    assert getattr(batch, key)[ref.shape[0]:].eq(GRAPH_PAD).all()


def _assert_padded_to(batch, real_graphs, key, budget):
    """``key`` is padded to ``budget`` rows (node or edge level), the real
    rows as PyG batches them."""
    ref = getattr(Batch.from_data_list(real_graphs), key)
    assert getattr(batch, key).shape == (budget, *ref.shape[1:])
    assert torch.equal(getattr(batch, key)[:ref.shape[0]], ref)


# -- sizes that cannot tell: the earlier batch's answer --------------------

def _graph_level_w(graphs):
    """Give every graph a graph-level ``w`` of one row."""
    for i, g in enumerate(graphs):
        g.w = torch.full((1, 3), float(i))
    return graphs


def _unambiguous_first_batch():
    """Graphs of 3 and 4 nodes, 2 and 3 edges: a one-row ``w`` is
    graph-level."""
    return _graph_level_w([_graph(3, _path(3)), _graph(4, _path(4))])


@pytest.mark.parametrize("fast_path", [True, False])
def test_graph_level_attribute_stays_graph_level_on_one_node_graphs(
        fast_path):
    """One-node graphs (two self-loops each): a one-row ``w`` matches the
    node counts, so the sizes cannot tell node- from graph-level; the
    collater keeps the graph level of the batch before (a fresh collater
    falls back to PyG's rule, node-level)."""
    ambiguous = _graph_level_w([_graph(1, [(0, 0)] * 2)] * 2)
    opts = _opts()
    fresh = FixedSizeCollater(opts, fast_path=fast_path)(ambiguous)
    _assert_padded_to(fresh, ambiguous, "w", opts.num_nodes)

    collater = FixedSizeCollater(opts, fast_path=fast_path)
    _assert_graph_level(collater(_unambiguous_first_batch()),
                        _unambiguous_first_batch(), "w", opts)
    _assert_graph_level(collater(ambiguous), ambiguous, "w", opts)


@pytest.mark.parametrize("fast_path", [True, False])
def test_graph_level_attribute_stays_graph_level_on_one_edge_graphs(
        fast_path):
    """Graphs of one edge each: a one-row ``w`` matches the edge counts
    (a fresh collater pads it edge-level, PyG's rule); after a batch that
    showed it graph-level it stays graph-level."""
    ambiguous = _graph_level_w([_graph(2, [(0, 1)]), _graph(3, [(1, 2)])])
    opts = _opts()
    fresh = FixedSizeCollater(opts, fast_path=fast_path)(ambiguous)
    _assert_padded_to(fresh, ambiguous, "w", opts.num_edges)

    collater = FixedSizeCollater(opts, fast_path=fast_path)
    collater(_unambiguous_first_batch())
    _assert_graph_level(collater(ambiguous), ambiguous, "w", opts)


@pytest.mark.parametrize("fast_path", [True, False])
def test_edge_attribute_stays_edge_level_on_cycles(fast_path):
    """Cycles have as many edges as nodes, so an edge weight matches both
    counts; PyG's rule calls a key without "edge" node-level, but after a
    batch of paths, where the weight is clearly per edge, it stays
    per edge."""
    def weighted(graphs):
        for g in graphs:
            g.weight = torch.arange(g.num_edges, dtype=torch.float) + 10
        return graphs

    cycles = weighted([_graph(3, _cycle(3)), _graph(4, _cycle(4))])
    opts = _opts()
    fresh = FixedSizeCollater(opts, fast_path=fast_path)(cycles)
    _assert_padded_to(fresh, cycles, "weight", opts.num_nodes)

    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 fast_path=fast_path)
    paths = weighted([_graph(3, _path(3)), _graph(4, _path(4))])
    _assert_padded_to(collater(paths), paths, "weight", opts.num_edges)
    batch = collater(cycles)
    _assert_padded_to(batch, cycles, "weight", opts.num_edges)
    assert batch.weight[batch.edges_mask.logical_not()].eq(0).all()


@pytest.mark.parametrize("fast_path", [True, False])
def test_graph_level_labels_win_over_sizes(fast_path):
    """Every graph has one edge and the first one node: the sizes alone
    are ambiguous, but labels of one row per graph on graphs of different
    node counts are graph-level."""
    graphs = [_graph(1, [(0, 0)], y=torch.tensor([5.0])),
              _graph(3, [(0, 1)], y=torch.tensor([6.0]))]
    opts = _opts()
    batch = FixedSizeCollater(opts, fast_path=fast_path)(graphs)
    _assert_graph_level(batch, graphs, "y", opts)


@pytest.mark.parametrize("fast_path", [True, False])
def test_ambiguous_attribute_never_gets_a_level_its_sizes_rule_out(
        fast_path):
    """Same graphs as above with a one-row attribute other than ``y``:
    edge- or graph-level would both fit the sizes, node-level cannot
    (the second graph has 3 nodes)."""
    graphs = _graph_level_w([_graph(1, [(0, 0)]), _graph(3, [(0, 1)])])
    opts = _opts()
    batch = FixedSizeCollater(opts, fast_path=fast_path)(graphs)
    assert batch.w.shape[0] in (opts.num_graphs, opts.num_edges)
    assert torch.equal(batch.w[:2], Batch.from_data_list(graphs).w)


@pytest.mark.parametrize("fast_path", [True, False])
def test_one_row_edge_named_attribute_on_one_node_graphs_is_graph_level(
        fast_path):
    """One node per graph, one and two edges: a one-row ``edge_w`` fits
    node- or graph-level, not edge-level, though its name and the first
    graph (one node, one edge) make PyG's rule say edge-level. Of the two
    that fit, PyG's rule does not say node-level: graph-level."""
    graphs = [_graph(1, [(0, 0)]), _graph(1, [(0, 0), (0, 0)])]
    for i, g in enumerate(graphs):
        g.edge_w = torch.full((1, 2), float(i))
    opts = _opts()
    batch = FixedSizeCollater(opts, fast_path=fast_path)(graphs)
    _assert_graph_level(batch, graphs, "edge_w", opts)


# -- sparse tensors --------------------------------------------------------

def _sparse_message(key: str) -> str:
    return re.escape(
        f"Attribute '{key}' is a sparse tensor; fixed-size batching pads "
        "dense tensors only. Convert it to a dense tensor or exclude it "
        "(exclude_keys).")


def _with_sparse_feat():
    # A key PyG concatenates along dim 0 like any feature.
    return [_graph(n, _path(n), feat=torch.eye(n).to_sparse())
            for n in (2, 3)]


def _hetero(num_a: int, num_b: int, sparse: bool = False) -> HeteroData:
    """Node types ``a`` and ``b``, ``a -> b`` edges with a 1-d
    ``edge_attr``, a graph label ``y``; with ``sparse``, a sparse global
    ``mask`` and a sparse ``a`` feature, set before the dense ones."""
    data = HeteroData()
    if sparse:
        data.mask = torch.tensor([1.0, 0.0, 1.0]).to_sparse()
        data["a"].feat = torch.eye(num_a).to_sparse()
    data.y = torch.tensor([float(num_a)])
    data["a"].x = torch.arange(num_a, dtype=torch.float).view(-1, 1) + 1
    data["b"].x = torch.ones(num_b, 2)
    src = torch.arange(num_a)
    data["a", "to", "b"].edge_index = torch.stack([src, src % num_b])
    data["a", "to", "b"].edge_attr = src.float() + 1
    return data


def _hetero_opts(**kw) -> FixedSizeOptions:
    return FixedSizeOptions({"a": 9, "b": 6}, {("a", "to", "b"): 8}, 3,
                            graph_pad_value=GRAPH_PAD, **kw)


def test_sparse_attribute_is_refused_with_advice():
    with pytest.raises(ValueError, match=_sparse_message("feat")):
        FixedSizeCollater(_opts())(_with_sparse_feat())


def test_sparse_hetero_global_attribute_is_refused_with_advice():
    data = _hetero(2, 1, sparse=True)
    del data["a"].feat
    with pytest.raises(ValueError, match=_sparse_message("mask")):
        FixedSizeCollater(_hetero_opts())([data, data])


def test_sparse_hetero_node_attribute_is_refused_with_advice():
    data = _hetero(2, 1, sparse=True)
    del data.mask
    with pytest.raises(ValueError, match=_sparse_message("feat")):
        FixedSizeCollater(_hetero_opts())([data, data])


@pytest.mark.parametrize("fast_path", [True, False])
def test_excluded_sparse_attribute_is_left_out(fast_path):
    graphs = _with_sparse_feat()
    opts = _opts()
    batch = FixedSizeCollater(opts, exclude_keys=["feat"],
                              fast_path=fast_path)(graphs)
    assert "feat" not in batch.keys()
    _assert_padded_to(batch, graphs, "x", opts.num_nodes)


def test_excluded_sparse_hetero_attributes_are_left_out():
    """The excluded sparse keys come first in their stores: the keys after
    them are still padded."""
    graphs = [_hetero(2, 1, sparse=True), _hetero(3, 2, sparse=True)]
    opts = _hetero_opts()
    batch = FixedSizeCollater(opts, exclude_keys=["mask", "feat"])(graphs)
    ref = Batch.from_data_list(graphs, exclude_keys=["mask", "feat"])
    assert "mask" not in batch.keys() and "feat" not in batch["a"].keys()
    assert batch.y.tolist() == ref.y.tolist() + [GRAPH_PAD]
    assert batch["a"].x.shape == (9, 1)
    assert torch.equal(batch["a"].x[:5], ref["a"].x)
    assert batch["b"].x.shape == (6, 2)


# -- HeteroData stores -----------------------------------------------------

def test_hetero_non_tensor_attributes():
    """A non-tensor of the global store is a graph attribute: padding
    graphs take ``pad_graph_defaults``. A non-tensor of a node store is
    copied from the first graph, even when ``pad_graph_defaults`` has its
    key."""
    graphs = []
    for num_a, name in ((2, "first"), (3, "second")):
        data = HeteroData()
        data.name = name
        data["a"].kind = f"atoms of {name}"  # before the tensors of "a"
        data["a"].x = torch.ones(num_a, 1)
        data["b"].x = torch.ones(1, 2)
        data["a", "to", "b"].edge_index = torch.zeros(2, num_a,
                                                      dtype=torch.long)
        graphs.append(data)
    defaults = {"name": "padding", "kind": "padding"}
    opts = FixedSizeOptions({"a": 9, "b": 6}, {("a", "to", "b"): 8}, 4,
                            pad_graph_defaults=defaults)
    batch = FixedSizeCollater(opts)(graphs)
    assert batch.name == ["first", "second"] + ["padding"] * 2
    assert batch["a"].kind == ["atoms of first", "atoms of second"] + \
        ["atoms of first"] * 2
    assert batch["a"].x.shape == (9, 1)


def test_hetero_store_tensor_levels():
    """In a node store: a 1-dim tensor of one entry per node is node-level,
    a 0-dim tensor and a tensor sized like neither count are graph-level
    (one copy per graph slot); likewise per edge in an edge store."""
    graphs = []
    for num_a in (2, 3):
        data = _hetero(num_a, 1)
        data["a"].label = torch.arange(num_a) + 1  # per node
        data["a"].scale = torch.tensor(float(num_a))  # 0-dim
        data["a"].table = torch.full((4, 2), float(num_a))  # per graph
        data["a", "to", "b"].stat = torch.tensor([float(num_a)] * 5)
        graphs.append(data)
    opts = _hetero_opts(node_pad_value=-1.0, edge_pad_value=-2.0)
    batch = FixedSizeCollater(opts)(graphs)
    ref = Batch.from_data_list(graphs)
    a, rel = batch["a"], batch["a", "to", "b"]
    assert a.label.tolist() == ref["a"].label.tolist() + [-1] * 4
    assert a.scale.tolist() == ref["a"].scale.tolist() + [GRAPH_PAD]
    assert a.table.shape == (4 * 3, 2)
    assert torch.equal(a.table[:8], ref["a"].table)
    assert a.table[8:].eq(GRAPH_PAD).all()
    assert rel.edge_attr.tolist() == \
        ref["a", "to", "b"].edge_attr.tolist() + [-2.0] * 3
    assert rel.stat.tolist() == \
        ref["a", "to", "b"].stat.tolist() + [GRAPH_PAD] * 5


def test_hetero_padding_values_per_type():
    """PyG ``Padding`` objects give each node / edge type its own value."""
    graphs = [_hetero(2, 1), _hetero(3, 2)]
    node_pad = NodeTypePadding({"a": -1.0, "b": -2.0})
    edge_pad = EdgeTypePadding({("a", "to", "b"): -3.0}, default=-4.0)
    opts = _hetero_opts(node_pad_value=node_pad, edge_pad_value=edge_pad)
    batch = FixedSizeCollater(opts)(graphs)
    ref = Batch.from_data_list(graphs)
    for node_type, budget in (("a", 9), ("b", 6)):
        real = ref[node_type].num_nodes
        x = batch[node_type].x
        assert torch.equal(x[:real], ref[node_type].x)
        assert x[real:budget].eq(node_pad.get_value(node_type, "x")).all()
    rel = ("a", "to", "b")
    real = ref[rel].num_edges
    assert torch.equal(batch[rel].edge_attr[:real], ref[rel].edge_attr)
    assert batch[rel].edge_attr[real:].eq(
        edge_pad.get_value(rel, "edge_attr")).all()


# -- Data subclasses -------------------------------------------------------

class FeatureMajor(Data):
    """Keeps ``pair`` features as ``[F, num_nodes]``: concatenated along
    their last dim, whatever their rank; ``tag`` is stacked."""

    def __cat_dim__(self, key, value, *args, **kwargs):
        if key == "pair":
            return value.dim() - 1
        if key == "tag":
            return None
        return super().__cat_dim__(key, value, *args, **kwargs)


def test_subclass_cat_dim_that_reads_the_value():
    graphs = [FeatureMajor(x=torch.ones(n, 1), edge_index=torch.tensor(
        _path(n)).t().contiguous(), tag=torch.tensor(float(n)),
        pair=torch.arange(3.0 * n).view(3, n)) for n in (3, 4)]
    opts = _opts(node_pad_value=-1.0)
    batch = FixedSizeCollater(opts)(graphs)
    ref = Batch.from_data_list(graphs)
    assert batch.pair.shape == (3, opts.num_nodes)
    assert torch.equal(batch.pair[:, :7], ref.pair)
    assert batch.pair[:, 7:].eq(-1).all()
    assert batch.tag.tolist() == ref.tag.tolist() + [GRAPH_PAD] * 2
