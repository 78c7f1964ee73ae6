"""Empty edge slots (-1) and removed self-loops are inert: the fixed-shape
functions give PyG's results on the graph without those edges, and PyG
layers traced for the simulated IPU equal eager PyG on graphs with
self-loops and on kNN graphs with empty slots, with both backends, also
for a second batch through the same traced model.

References are PyG's own functions on edge lists with the empty slots and
loops dropped by boolean indexing, and eager PyG layers on the unpadded
batch."""
import copy

import pytest
import torch
import torch_geometric.utils as pyg_utils
from torch.nn import Linear, ReLU, Sequential
from torch_geometric.data import Batch, Data
from torch_geometric.nn import EdgeConv, GATConv, GCNConv, knn_graph

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric import ops
from poptorch_geometric.ops import empty_slots

from ._brute_force import knn_pairs

REDUCES = ["sum", "mean", "max", "min", "mul"]


def _with_empty_slots(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    index = torch.tensor([0, 2, -1, 2, 1, -1, 0, 2])
    src = torch.randn(index.numel(), 3, generator=gen) - 2.0
    return src, index


@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_ignores_empty_slots(reduce):
    src, index = _with_empty_slots()
    keep = index >= 0
    expected = pyg_utils.scatter(src[keep], index[keep], 0, 4, reduce)
    actual = empty_slots.scatter(src, index, 0, 4, reduce)
    torch.testing.assert_close(actual, expected)


def test_scatter_along_another_dim():
    src, index = _with_empty_slots()
    src = src.t().contiguous()
    keep = index >= 0
    expected = pyg_utils.scatter(src[:, keep], index[keep], 1, 3, "max")
    torch.testing.assert_close(empty_slots.scatter(src, index, -1, 3, "max"),
                               expected)


def test_softmax_and_degree_ignore_empty_slots():
    src, index = _with_empty_slots()
    keep = index >= 0
    expected = pyg_utils.softmax(src[keep], index[keep], num_nodes=4)
    actual = empty_slots.softmax(src, index, num_nodes=4)
    torch.testing.assert_close(actual[keep], expected)
    torch.testing.assert_close(empty_slots.degree(index, 4),
                               pyg_utils.degree(index[keep], 4))


def test_gradients_of_empty_slots_are_zero():
    src, index = _with_empty_slots()
    src.requires_grad_(True)
    empty_slots.scatter(src, index, 0, 3, "max").sum().backward()
    assert torch.all(src.grad[index < 0] == 0)


def _real_edges(edge_index, edge_attr=None):
    keep = edge_index[0] >= 0
    attr = None if edge_attr is None else edge_attr[keep]
    return edge_index[:, keep], attr


#: Two loops on node 0, one on node 2, a duplicate edge, an empty slot.
EDGES = torch.tensor([[0, 1, 0, 2, 1, 1, 0, -1], [1, 2, 0, 2, 2, 2, 0, -1]])


def test_remove_self_loops_leaves_pyg_edges():
    attr = torch.arange(8.).view(-1, 1)
    expected = pyg_utils.remove_self_loops(EDGES[:, :-1], attr[:-1])
    actual = _real_edges(*ops.remove_self_loops(EDGES, attr))
    torch.testing.assert_close(actual[0], expected[0])
    torch.testing.assert_close(actual[1], expected[1])


@pytest.mark.parametrize("fill_value", [None, 2.5, "mean", "add"])
def test_add_remaining_self_loops_equals_pyg(fill_value):
    attr = torch.randn(8, 2, requires_grad=True)
    expected = pyg_utils.add_remaining_self_loops(EDGES[:, :-1], attr[:-1],
                                                  fill_value, num_nodes=4)
    edge_index, new_attr = ops.add_remaining_self_loops(EDGES, attr,
                                                        fill_value, 4)
    actual = _real_edges(edge_index, new_attr)
    torch.testing.assert_close(actual[0], expected[0])
    torch.testing.assert_close(actual[1], expected[1])
    # PyG's gradient reaches every loop of a node, overwritten ones too.
    weight = torch.randn_like(expected[1])
    (expected_grad, ) = torch.autograd.grad((expected[1] * weight).sum(),
                                            attr)
    (actual_grad, ) = torch.autograd.grad((actual[1] * weight).sum(), attr)
    torch.testing.assert_close(actual_grad, expected_grad)


def _graphs(sizes, seed, loops=True):
    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for n in sizes:
        src = torch.randint(0, n, (2 * n, ), generator=gen)
        dst = torch.randint(0, n, (2 * n, ), generator=gen)
        edge_index = torch.stack([src, dst])
        if loops:   # a duplicate self-loop on node 0, whatever was drawn
            edge_index = torch.cat([edge_index, torch.zeros(2, 2).long()], 1)
        graphs.append(Data(x=torch.randn(n, 4, generator=gen),
                           pos=torch.randn(n, 3, generator=gen),
                           edge_index=edge_index))
    return graphs


SIZES = pyg_ipu.FixedSizeOptions(num_nodes=32, num_edges=80, num_graphs=4,
                                 node_pad_value=3.0)


def _traced(model, backend):
    options = poptorch.Options()
    options.Simulator.backend(backend)
    return poptorch.inferenceModel(copy.deepcopy(model).eval(), options)


class _Conv(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


@pytest.mark.parametrize("backend", ["interpret", "compile"])
def test_layers_on_graphs_with_self_loops_equal_pyg(backend):
    torch.manual_seed(0)
    # GCN normalises over its own loops; GAT removes the loops and adds
    # one per node: a kept loop would count twice in either.
    models = [_Conv(GCNConv(4, 5)), _Conv(GATConv(4, 5, heads=2))]
    collater = pyg_ipu.FixedSizeCollater(SIZES, add_masks_to_batch=True)
    batches = [_graphs((3, 7, 5), seed=1), _graphs((9, 1, 6), seed=2)]
    for model in models:
        traced = _traced(model, backend)
        for graphs in batches:
            plain, padded = Batch.from_data_list(graphs), collater(graphs)
            with torch.no_grad():
                expected = model.eval()(plain.x, plain.edge_index)
            actual = traced(padded.x, padded.edge_index)
            torch.testing.assert_close(actual[:plain.num_nodes], expected,
                                       rtol=1e-4, atol=1e-5)


class _DGCNN(torch.nn.Module):
    """The DGCNN pattern: a kNN graph built in forward, EdgeConv (max) over
    it, then an attention layer over the same graph (a softmax)."""

    def __init__(self, k):
        super().__init__()
        self.k = k
        self.edge = EdgeConv(Sequential(Linear(8, 8), ReLU(),
                                        Linear(8, 8)), aggr="max")
        self.gat = GATConv(8, 4, add_self_loops=False)

    def forward(self, x, edge_index):
        return self.gat(self.edge(x, edge_index), edge_index)


class _DGCNNTraced(_DGCNN):
    def forward(self, x, pos, batch):
        return super().forward(x, knn_graph(pos, self.k, batch))


def _knn_edges(pos, k, batch):
    rows, cols = knn_pairs(pos, pos, k, batch, batch, exclude_self=True)
    pairs = [(c, r) for r, c in zip(rows, cols) if r >= 0]
    return torch.tensor(pairs, dtype=torch.long).t()


@pytest.mark.parametrize("backend", ["interpret", "compile"])
def test_knn_graph_with_empty_slots_is_inert(backend):
    """Traced on graphs that all have more than k nodes, then called with
    a batch of the same shapes holding a graph of 3 nodes (k = 5)."""
    torch.manual_seed(0)
    eager = _DGCNN(k=5)
    model = _DGCNNTraced(k=5)
    model.load_state_dict(eager.state_dict())
    traced = _traced(model, backend)
    collater = pyg_ipu.FixedSizeCollater(SIZES, add_masks_to_batch=True)
    for sizes in ((8, 9, 7), (3, 12, 1)):
        graphs = _graphs(sizes, seed=sum(sizes), loops=False)
        plain, padded = Batch.from_data_list(graphs), collater(graphs)
        with torch.no_grad():
            expected = eager.eval()(plain.x, _knn_edges(plain.pos, 5,
                                                         plain.batch))
        actual = traced(padded.x, padded.pos, padded.batch)
        assert torch.isfinite(actual).all()
        torch.testing.assert_close(actual[:plain.num_nodes], expected,
                                   rtol=1e-4, atol=1e-5)


def _traced_ops(model, *inputs):
    graph = poptorch.traceModel(model, *inputs).main_graph.graph_module.graph
    return [str(node.target) for node in graph.nodes
            if node.op == "call_function"]


def test_a_fixed_size_batch_takes_pyg_functions_as_they_are():
    """A fixed-size batch's edges hold no empty slot: its scatters and
    gathers carry no sink (no comparison of the index with 0, no extra
    row); an edge index the model makes with empty slots does."""
    graphs = _graphs((4, 5), seed=3, loops=False)
    padded = pyg_ipu.FixedSizeCollater(SIZES)(graphs)
    plain = _traced_ops(_Conv(GCNConv(4, 5, add_self_loops=False)),
                        padded.x, padded.edge_index)
    sink = {"aten.lt.Scalar", "aten.clamp.default", "aten.clamp_min.default"}
    assert not sink & set(plain), plain
    looped = _traced_ops(_Conv(GCNConv(4, 5)), padded.x, padded.edge_index)
    assert "aten.lt.Scalar" in looped, looped


def test_a_models_own_edges_and_scatters_keep_pytorch_meaning():
    """Edges the model receives are not empty-slot edges: a plain PyTorch
    scatter over them stays PyTorch's (no sink, no clamp), also when
    poptorch_geometric is loaded."""
    class _Scatter(torch.nn.Module):
        def forward(self, x, edge_index):
            column = edge_index[1].view(-1, 1).expand(-1, x.size(1))
            return torch.zeros_like(x).scatter_add(
                0, column, x.index_select(0, edge_index[0]))

    edges = torch.tensor([[0, 1, 2], [1, 2, 0]])
    ops_seen = _traced_ops(_Scatter(), torch.randn(3, 2), edges)
    sink = {"aten.lt.Scalar", "aten.clamp.default", "aten.clamp_min.default"}
    assert not sink & set(ops_seen), ops_seen
