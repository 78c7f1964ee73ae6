"""Fixed-shape node-selection pooling (TopK, SAG, ASA, Edge, filter_adj):
a fixed number of node slots whose used ones hold eager PyG's result in
PyG's order, removed edges as empty slots, inside traced models (interpret)
and as plain functions. References are PyG's own functions on the unpadded
graphs; where PyG's unstable CPU sort decides ties (above 16 elements) the
reference runs with a stable sort, the rule the fixed-shape versions
document."""
import copy
import math
import pathlib
import warnings
from unittest import mock

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn.pool.connect.filter_edges import \
    filter_adj as pyg_filter_adj
from torch_geometric.nn.pool.select.topk import topk as pyg_topk
from torch_geometric.utils import softmax as pyg_softmax

import poptorch
from poptorch_geometric import (FixedSizeCollater, FixedSizeOptions,
                                coverage, ops)
from poptorch_geometric.ops import topk_pool
from poptorch_geometric.ops._selection import num_slots, select_top_k

_ARGSORT = torch.argsort
_SORT = torch.sort


def _stable_argsort(x, dim=-1, descending=False, **_):
    return _ARGSORT(x, dim=dim, descending=descending, stable=True)


def _stable_sort(x, dim=-1, descending=False, **_):
    return _SORT(x, dim=dim, descending=descending, stable=True)


def _stable():
    """PyG with ties broken by index (its CPU sort is stable only up to 16
    elements); call the result to restore torch's sorts."""
    patches = [mock.patch("torch.argsort", _stable_argsort),
               mock.patch("torch.sort", _stable_sort)]
    for patch in patches:
        patch.start()
    return lambda: [patch.stop() for patch in patches]


def _eager(model, *inputs):
    """``model(*inputs)``, eager PyG with ties broken by index."""
    restore = _stable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # PyG's sparse beta warnings
            return model(*inputs)
    finally:
        restore()


def _batch_vector(sizes):
    return torch.repeat_interleave(torch.arange(len(sizes)),
                                   torch.tensor(sizes))


# -- the selection ------------------------------------------------------------

@pytest.mark.parametrize("ratio", [0.5, 0.3, 0.8, 0.99, 1, 2, 3.0])
def test_selection_equals_pyg_topk(ratio):
    gen = torch.Generator().manual_seed(0)
    for trial in range(40):
        sizes = torch.randint(1, 12, (int(torch.randint(1, 6, (),
                                                        generator=gen)), ),
                              generator=gen).tolist()
        batch = _batch_vector(sizes)
        # Every third trial with many ties.
        score = torch.randint(0, 3, (batch.numel(), ), generator=gen).float() \
            if trial % 3 == 0 else torch.randn(batch.numel(), generator=gen)
        expected = _eager(pyg_topk, score, ratio, batch)
        got = select_top_k(score, ratio, batch, num_graphs=len(sizes))
        used = int(got.mask.sum())
        assert torch.equal(got.perm[:used], expected)
        assert bool(got.mask[:used].all()) and not bool(got.mask[used:].any())
        assert torch.equal(got.batch[:used], batch[expected])
        assert bool((got.perm[used:] == -1).all())
        assert bool((got.batch[used:] == -1).all())


@pytest.mark.parametrize("min_score", [0.05, 0.2, 0.6])
def test_min_score_selection_equals_pyg_topk(min_score):
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        sizes = torch.randint(1, 9, (3, ), generator=gen).tolist()
        batch = _batch_vector(sizes)
        score = pyg_softmax(torch.randn(batch.numel(), generator=gen), batch)
        expected = pyg_topk(score, None, batch, min_score)
        got = select_top_k(score, None, batch, min_score, num_graphs=3)
        assert torch.equal(got.perm[got.mask], expected)


def test_unused_slots_of_an_earlier_pooling_are_never_selected():
    batch = torch.tensor([0, 0, -1, 1, -1, 1, 1])
    score = torch.tensor([0.1, 0.2, 9.0, 0.3, 9.0, 0.5, 0.4])
    got = select_top_k(score, 0.5, batch, num_graphs=2)
    real = batch >= 0
    remap = torch.cumsum(real.long(), 0) - 1
    expected = torch.nonzero(real).view(-1)[pyg_topk(score[real], 0.5,
                                                      batch[real])]
    assert torch.equal(got.perm[got.mask], expected)
    assert remap[expected].tolist() == [1, 3, 4]


def test_slots_hold_every_selection_of_the_node_slots():
    """Brute force over ways to split N nodes into at most B graphs: PyG's
    selection never needs more than num_slots, and the bound is reached."""
    for num_nodes, num_graphs, ratio in [(10, 3, 0.5), (9, 9, 0.3),
                                         (12, 4, 0.75), (7, 2, 2)]:
        most = 0
        gen = torch.Generator().manual_seed(num_nodes)
        for _ in range(300):
            cuts = torch.randint(0, num_graphs, (num_nodes, ), generator=gen)
            batch = cuts.sort().values
            score = torch.randn(num_nodes, generator=gen)
            most = max(most, pyg_topk(score, ratio, batch).numel())
        slots = num_slots(num_nodes, ratio, None, num_graphs)
        assert most <= slots <= num_nodes
        if ratio < 1:
            assert slots <= math.ceil(ratio * num_nodes) + num_graphs


# -- filter_adj ---------------------------------------------------------------

def test_filter_adj_empties_removed_edges_and_keeps_pygs_in_order():
    gen = torch.Generator().manual_seed(2)
    for _ in range(30):
        num_nodes = int(torch.randint(2, 12, (), generator=gen))
        edge_index = torch.randint(0, num_nodes, (2, 25), generator=gen)
        attr = torch.randn(25, 3, generator=gen)
        node_index = torch.randperm(num_nodes, generator=gen)[
            :int(torch.randint(1, num_nodes + 1, (), generator=gen))]
        expected, expected_attr = pyg_filter_adj(edge_index, attr,
                                                 node_index,
                                                 num_nodes=num_nodes)
        # Unused selection slots (-1) select nothing.
        padded = torch.cat([node_index, torch.full((3, ), -1)])
        got, got_attr = ops.filter_adj(edge_index, attr, padded,
                                       num_nodes=num_nodes)
        kept = (got >= 0).all(0)
        assert torch.equal(got[:, kept], expected)
        assert torch.equal(got_attr[kept], expected_attr)
        assert bool((got[:, ~kept] == -1).all())
        assert bool((got_attr[~kept] == 0).all())
        assert ops.empty_slots.may_hold_empty_slots(got)


# -- the layers, traced on fixed-size batches ---------------------------------

def _graphs(seed, sizes=(6, 2, 8, 1, 5)):
    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for n in sizes:
        e = 3 * n
        edge_index = torch.randint(0, n, (2, e), generator=gen)
        graphs.append(Data(x=torch.randn(n, 8, generator=gen),
                           edge_index=edge_index,
                           edge_attr=torch.randn(e, 2, generator=gen),
                           edge_weight=torch.rand(e, generator=gen) + 0.5))
    return graphs


def _pair(seed=0, sizes=(6, 2, 8, 1, 5)):
    graphs = _graphs(seed, sizes)
    opts = FixedSizeOptions(num_nodes=sum(sizes) + 7,
                            num_edges=3 * sum(sizes) + 9,
                            num_graphs=len(sizes) + 2)
    padded = FixedSizeCollater(opts, add_masks_to_batch=True)(graphs)
    return Batch.from_data_list(graphs), padded


class _Net(torch.nn.Module):
    """Two poolings, a conv on the pooled graph and a readout."""

    def __init__(self, make_pool):
        super().__init__()
        self.pool1, self.pool2 = make_pool(), make_pool()
        self.conv = pyg_nn.GraphConv(8, 8)

    def forward(self, data):
        x, edge_index, edge_attr, batch = (data.x, data.edge_index,
                                           data.edge_attr, data.batch)
        x, edge_index, edge_attr, batch, perm, score = self.pool1(
            x, edge_index, edge_attr, batch)
        hidden = torch.relu(self.conv(x, edge_index))
        x2, edge_index2, _, batch2, perm2, _ = self.pool2(
            hidden, edge_index, edge_attr, batch)
        readout = torch.cat([
            pyg_nn.global_max_pool(x2, batch2, size=data.num_graphs),
            pyg_nn.global_mean_pool(x2, batch2, size=data.num_graphs)], 1)
        return (x, edge_index, edge_attr, batch, perm, score, x2,
                edge_index2, batch2, perm2, readout)


def _assert_pooled_like_pyg(got, expected, num_graphs):
    """Used node slots first in PyG's order; the rest unused."""
    nodes = expected[0].shape[0]
    torch.testing.assert_close(got[0][:nodes], expected[0])
    assert bool((got[0][nodes:] == 0).all())
    for index in (3, 4):   # batch, perm
        assert torch.equal(got[index][:nodes], expected[index])
        assert bool((got[index][nodes:] == -1).all())
    torch.testing.assert_close(got[5][:nodes], expected[5])
    kept = (got[1] >= 0).all(0)
    assert torch.equal(got[1][:, kept], expected[1])
    torch.testing.assert_close(got[2][kept], expected[2])
    nodes2 = expected[6].shape[0]
    torch.testing.assert_close(got[6][:nodes2], expected[6])
    assert torch.equal(got[8][:nodes2], expected[8])
    assert torch.equal(got[9][:nodes2], expected[9])
    kept2 = (got[7] >= 0).all(0)
    assert torch.equal(got[7][:, kept2], expected[7])
    torch.testing.assert_close(got[10][:num_graphs], expected[10])


@pytest.mark.parametrize("make_pool", [
    lambda: pyg_nn.TopKPooling(8, ratio=0.5),
    lambda: pyg_nn.TopKPooling(8, ratio=2, multiplier=2.0),
    lambda: pyg_nn.TopKPooling(8, min_score=0.1, nonlinearity="sigmoid"),
    lambda: pyg_nn.SAGPooling(8, ratio=0.6),
    lambda: pyg_nn.SAGPooling(8, ratio=0.5, GNN=pyg_nn.GCNConv,
                              add_self_loops=False),
], ids=["topk", "topk-int-ratio", "topk-min-score", "sag", "sag-gcn"])
def test_traced_pooling_equals_pyg_on_the_used_slots(make_pool):
    plain, padded = _pair()
    torch.manual_seed(0)
    model = _Net(make_pool).eval()
    expected = _eager(model, plain)
    got = poptorch.inferenceModel(copy.deepcopy(model))(padded)
    _assert_pooled_like_pyg(got, expected, plain.num_graphs)
    # A fixed number of slots, set by the shapes: ceil(r N) + B for r < 1.
    if isinstance(model.pool1.ratio, float) and model.pool1.min_score is None:
        assert got[0].shape[0] == min(
            padded.num_nodes, math.ceil(model.pool1.ratio * padded.num_nodes)
            + padded.num_graphs)


def test_traced_pooling_leaves_padding_nodes_out():
    plain, padded = _pair(seed=3)
    torch.manual_seed(1)
    model = _Net(lambda: pyg_nn.TopKPooling(8, ratio=0.9)).eval()
    got = poptorch.inferenceModel(model)(padded)
    real_nodes = int(padded.nodes_mask.sum())
    used = got[4] >= 0
    assert bool((got[4][used] < real_nodes).all())
    assert bool((got[3][used] < plain.num_graphs).all())


class _OneGraph(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = pyg_nn.TopKPooling(8, ratio=0.5)

    def forward(self, data):
        return tuple(self.pool(data.x, data.edge_index))


def test_pooling_without_a_batch_vector_pools_the_real_nodes_as_one_graph():
    """No batch vector: every node is one graph, as in PyG; in a padded
    batch the padding nodes are not part of it."""
    plain, padded = _pair(seed=9)
    torch.manual_seed(6)
    model = _OneGraph().eval()
    expected = _eager(model, plain)
    got = poptorch.inferenceModel(copy.deepcopy(model))(padded)
    nodes = expected[0].shape[0]
    assert nodes == math.ceil(0.5 * plain.num_nodes)
    assert torch.equal(got[4][:nodes], expected[4])
    assert not bool((got[4][nodes:] >= 0).any())
    torch.testing.assert_close(got[0][:nodes], expected[0])


def test_pooling_gradients_equal_pygs():
    """One SGD step (learning rate 1) through two poolings and a readout:
    every parameter changes as in eager PyG."""
    plain, padded = _pair(seed=5)
    torch.manual_seed(2)

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _Net(lambda: pyg_nn.SAGPooling(8, ratio=0.5))

        def forward(self, data):
            readout = self.net(data)[-1][:plain.num_graphs]
            return readout, poptorch.identity_loss(
                (readout * torch.arange(16.)).sum(), reduction="none")

    model = Loss()
    eager = copy.deepcopy(model)
    _eager(eager, plain)[1].backward()
    training = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0))
    before = copy.deepcopy(dict(model.named_parameters()))
    training(padded)
    training.copyWeightsToHost()
    for name, param in eager.named_parameters():
        torch.testing.assert_close(before[name].detach() - dict(
            model.named_parameters())[name].detach(), param.grad,
            rtol=1e-4, atol=1e-5)


class _Asap(torch.nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.pool = pyg_nn.ASAPooling(8, **kwargs)

    def forward(self, data):
        return tuple(self.pool(data.x, data.edge_index, data.edge_weight,
                               data.batch))


def _sorted_edges(edge_index, weight):
    kept = (edge_index >= 0).all(0)
    edge_index, weight = edge_index[:, kept], weight[kept]
    order = torch.sort(edge_index[0] * 1000 + edge_index[1],
                       stable=True).indices
    return edge_index[:, order], weight[order]


@pytest.mark.parametrize("kwargs", [
    {"ratio": 0.5}, {"ratio": 0.7, "GNN": pyg_nn.GraphConv},
    {"ratio": 0.5, "add_self_loops": True}])
def test_traced_asapooling_equals_pyg_on_the_used_slots(kwargs):
    plain, padded = _pair(seed=6)
    torch.manual_seed(3)
    model = _Asap(**kwargs).eval()
    expected = _eager(model, plain)
    got = poptorch.inferenceModel(copy.deepcopy(model))(padded)
    nodes = expected[0].shape[0]
    torch.testing.assert_close(got[0][:nodes], expected[0])
    assert torch.equal(got[3][:nodes], expected[3])
    assert torch.equal(got[4][:nodes], expected[4])
    assert bool((got[4][nodes:] == -1).all())
    # PyG's order within a row is its sparse product's: compare sorted.
    got_edges, got_weight = _sorted_edges(got[1], got[2])
    want_edges, want_weight = _sorted_edges(expected[1], expected[2])
    assert torch.equal(got_edges, want_edges)
    torch.testing.assert_close(got_weight, want_weight)
    slots = got[0].shape[0]
    assert got[1].shape[1] == slots * slots + (
        slots if kwargs.get("add_self_loops") else 0)


# -- EdgePooling -------------------------------------------------------------

def _edge_graphs(gen, loops=True):
    num_graphs = int(torch.randint(1, 4, (), generator=gen))
    xs, edges, batch, offset = [], [], [], 0
    for graph in range(num_graphs):
        n = int(torch.randint(1, 9, (), generator=gen))
        edge_index = torch.randint(0, n, (2, int(torch.randint(
            0, 3 * n, (), generator=gen))), generator=gen)
        if not loops:
            edge_index = edge_index[:, edge_index[0] != edge_index[1]]
        xs.append(torch.randn(n, 3, generator=gen))
        edges.append(edge_index + offset)
        batch.append(torch.full((n, ), graph))
        offset += n
    return torch.cat(xs), torch.cat(edges, 1), torch.cat(batch)


@pytest.mark.parametrize("score", ["softmax", "tanh"])
def test_edge_pooling_equals_pygs_greedy_matching(score):
    """Random graphs with loops and duplicate edges; ties (frequent with
    softmax scores) go to the lower edge index on both sides."""
    gen = torch.Generator().manual_seed(4)
    method = None if score == "softmax" else \
        pyg_nn.EdgePooling.compute_edge_score_tanh
    for _ in range(60):
        x, edge_index, batch = _edge_graphs(gen)
        torch.manual_seed(0)
        pool = ops.EdgePooling(3, edge_score_method=method)
        expected = _eager(pyg_nn.EdgePooling.forward, pool, x, edge_index,
                          batch)
        unpooled = pyg_nn.EdgePooling.unpool(pool, expected[0], expected[3])
        got = pool(x, edge_index, batch)
        clusters = expected[0].shape[0]
        torch.testing.assert_close(got[0][:clusters], expected[0])
        assert bool((got[0][clusters:] == 0).all())
        assert torch.equal(got[2][:clusters], expected[2])
        assert bool((got[2][clusters:] == -1).all())
        edges = expected[1].shape[1]
        assert torch.equal(got[1][:, :edges], expected[1])
        assert bool((got[1][:, edges:] == -1).all())
        assert torch.equal(got[3].cluster, expected[3].cluster)
        torch.testing.assert_close(pool.unpool(got[0], got[3])[0],
                                   unpooled[0])


def test_greedy_matching_rounds_reach_a_long_chain():
    """A path whose scores fall along it needs a round per edge pair: the
    rounds unrolled still reach its end."""
    n = 12
    edge_index = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    score = torch.linspace(1.0, 0.1, n - 1)
    chosen, _ = ops.edge_pool.greedy_matching(
        edge_index, score, torch.ones(n - 1, dtype=torch.bool), n)
    assert chosen.tolist() == [i % 2 == 0 for i in range(n - 1)]


class _EdgeNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = pyg_nn.EdgePooling(
            8, edge_score_method=pyg_nn.EdgePooling.compute_edge_score_tanh)

    def forward(self, data):
        x, edge_index, batch, info = self.pool(data.x, data.edge_index,
                                               data.batch)
        unpooled = self.pool.unpool(x, info)[0]
        return x, edge_index, batch, unpooled


def test_traced_edge_pooling_equals_pyg_on_the_used_slots():
    plain, padded = _pair(seed=7)
    torch.manual_seed(4)
    model = _EdgeNet().eval()
    expected = _eager(model, plain)
    got = poptorch.inferenceModel(copy.deepcopy(model))(padded)
    clusters = expected[0].shape[0]
    torch.testing.assert_close(got[0][:clusters], expected[0])
    assert torch.equal(got[2][:clusters], expected[2])
    assert bool((got[2][clusters:] == -1).all())
    edges = expected[1].shape[1]
    assert torch.equal(got[1][:, :edges], expected[1])
    torch.testing.assert_close(got[3][:plain.num_nodes], expected[3])


# -- what follows a pooling ---------------------------------------------------

class _PoolThenNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = pyg_nn.TopKPooling(8, ratio=0.5)
        self.norm = torch.nn.BatchNorm1d(8)

    def forward(self, data):
        x, _, _, batch, _, _ = self.pool(data.x, data.edge_index, None,
                                         data.batch)
        return self.norm(x), pyg_nn.global_add_pool(x, batch,
                                                    size=data.num_graphs)


def test_norm_after_pooling_takes_statistics_over_the_used_slots():
    plain, padded = _pair(seed=8)
    torch.manual_seed(5)
    model = _PoolThenNorm().train()
    expected = _eager(copy.deepcopy(model), plain)
    got = poptorch.inferenceModel(copy.deepcopy(model))(padded)
    nodes = expected[0].shape[0]
    torch.testing.assert_close(got[0][:nodes], expected[0])
    torch.testing.assert_close(got[1][:plain.num_graphs], expected[1])


class _EdgePoolThenNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = pyg_nn.EdgePooling(8)
        self.norm = torch.nn.BatchNorm1d(8)

    def forward(self, data):
        return self.norm(self.pool(data.x, data.edge_index, data.batch)[0])


def test_norm_after_a_pooling_with_as_many_slots_as_nodes_is_refused():
    """EdgePooling keeps a slot per node: the norm's rows match the
    batch's node slots and the pooled ones, and the error says what to
    do instead of taking either mask."""
    _, padded = _pair()
    with pytest.raises(poptorch.Error) as raised:
        poptorch.inferenceModel(_EdgePoolThenNorm().train())(padded)
    message = str(raised.value)
    assert message.startswith(
        f"BatchNorm1d `norm` takes statistics over {padded.num_nodes} rows, "
        "and a pooling layer's node slots number")
    assert "Apply the norm where the row counts differ" in message


def test_the_override_restores_pygs_poolings():
    originals = {name: getattr(pyg_nn, name).forward for name in
                 ("TopKPooling", "SAGPooling", "ASAPooling", "EdgePooling")}
    plain, padded = _pair()
    poptorch.inferenceModel(_Net(lambda: pyg_nn.TopKPooling(8)))(padded)
    for name, forward in originals.items():
        assert getattr(pyg_nn, name).forward is forward
    assert pyg_nn.EdgePooling.unpool.__module__.startswith("torch_geometric")
    assert plain.num_graphs == 5


def test_pooled_graph_unpacks_as_pygs_six_values_and_has_a_mask():
    torch.manual_seed(0)
    out = ops.TopKPooling(2, ratio=0.5)(
        torch.randn(5, 2), torch.tensor([[0, 1], [1, 2]]),
        batch=torch.tensor([0, 0, 0, 1, 1]))
    x, edge_index, edge_attr, batch, perm, score = out
    assert torch.equal(out.mask, perm >= 0) and edge_attr is None
    assert x.shape[0] == perm.shape[0] == batch.shape[0] == score.shape[0]


# -- the coverage rows -------------------------------------------------------

COVERAGE_MD = pathlib.Path(__file__).resolve().parents[2] / "COVERAGE.md"


def _cells(line):
    return [cell.strip() for cell in line.strip("|").split(" | ")]


@pytest.mark.parametrize("name", ["TopKPooling", "filter_adj"])
def test_coverage_rows_regenerate_as_committed(name):
    """Without the compile column (the coverage test compiles other
    rows): the committed row is what the probe finds now."""
    committed = next(line for line in COVERAGE_MD.read_text().splitlines()
                     if line.startswith(f"| `{name}` |"))
    row, = coverage.run([name], compile_check=False)
    cells, want = _cells(coverage.row_line(row)), _cells(committed)
    assert cells[:4] + cells[5:] == want[:4] + want[5:]
    assert want[1:5] == ["yes"] * 4


def test_the_coverage_probe_sees_a_wrong_gradient():
    """A pooling whose scores pass no gradient gives PyG's forward but not
    its gradients: the row says so."""
    original = topk_pool.gather_rows

    def detached(values, index):
        rows = original(values, index)
        return rows.detach() if values.dim() == 1 else rows

    with mock.patch.object(topk_pool, "gather_rows", detached):
        row, = coverage.run(["TopKPooling"], compile_check=False)
    assert row.traces and not row.gradients
    assert "gradient of" in row.reason and "(plain graphs)" in row.reason
