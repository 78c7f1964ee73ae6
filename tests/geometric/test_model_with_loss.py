"""with_loss puts a PyG model's loss into the model for trainingModel; the
metrics count real graphs and nodes only. References are plain PyG/torch
training steps on the unpadded data."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GCNConv, global_add_pool

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric import FixedSizeCollater, FixedSizeOptions

from ._graphs import graph


class NodeModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(2, 3, add_self_loops=False)

    def forward(self, x, edge_index, edge_weight=None):
        return self.conv(x, edge_index, edge_weight)


class GraphModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 3)

    def forward(self, x, batch, batch_size):
        return self.lin(global_add_pool(x, batch, size=batch_size))


def _sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.5)


def _cora_like():
    data = graph(10, 30, edge_dim=None, y=torch.randint(0, 3, (10,)))
    data.train_mask = torch.arange(10) % 3 == 0
    return data


def test_node_classification_step_equals_plain_pyg():
    data = _cora_like()
    model = NodeModel()
    reference = copy.deepcopy(model)
    train_model = poptorch.trainingModel(
        pyg_ipu.with_loss(model, F.cross_entropy, mask="train_mask"),
        optimizer=_sgd(model))
    out, loss = train_model(data)

    optimizer = _sgd(reference)
    ref_out = reference(data.x, data.edge_index)
    ref_loss = F.cross_entropy(ref_out[data.train_mask],
                               data.y[data.train_mask])
    ref_loss.backward()
    optimizer.step()
    torch.testing.assert_close(out, ref_out.detach())
    torch.testing.assert_close(loss, ref_loss.detach())
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), msg=name)


def _graphs(n):
    return [graph(3 + i % 3, 4, edge_dim=None, seed=i,
                  y=torch.tensor([i % 3])) for i in range(n)]


def test_graph_classification_on_a_padded_batch_ignores_padding():
    graphs = _graphs(5)
    collater = FixedSizeCollater(FixedSizeOptions(30, 40, 8),
                                 add_masks_to_batch=True)
    padded = collater(graphs)
    model = GraphModel()
    reference = copy.deepcopy(model)
    train_model = poptorch.trainingModel(
        pyg_ipu.with_loss(model, F.cross_entropy), optimizer=_sgd(model))
    out, loss = train_model(padded)

    plain = Batch.from_data_list(graphs)
    optimizer = _sgd(reference)
    ref_loss = F.cross_entropy(
        reference(plain.x, plain.batch, plain.num_graphs), plain.y)
    ref_loss.backward()
    optimizer.step()
    assert out.shape == (8, 3)
    torch.testing.assert_close(loss, ref_loss.detach())
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach())


def test_a_padding_only_mini_batch_has_loss_zero_and_no_gradient():
    graphs = _graphs(3)
    collater = FixedSizeCollater(FixedSizeOptions(20, 20, 4),
                                 add_masks_to_batch=True)
    combined = pyg_ipu.CombinedBatchingCollater(
        collater, mini_batch_size=3, num_mini_batches=2)(graphs)
    model = GraphModel()
    reference = copy.deepcopy(model)
    train_model = poptorch.trainingModel(
        pyg_ipu.with_loss(model, F.cross_entropy),
        poptorch.Options().deviceIterations(2), optimizer=_sgd(model))
    _, losses = train_model(combined)  # the last step's loss (Final)

    plain = Batch.from_data_list(graphs)
    optimizer = _sgd(reference)
    F.cross_entropy(reference(plain.x, plain.batch, 3), plain.y).backward()
    optimizer.step()  # the second step's gradient is zero
    assert torch.isfinite(losses).all()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach())


def test_arguments_are_read_by_name_or_given_explicitly():
    data = _cora_like()

    class WholeData(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = NodeModel()

        def forward(self, data):
            return self.inner(data.x, data.edge_index)

    model = WholeData()
    wrapped = pyg_ipu.with_loss(model, F.cross_entropy)
    torch.testing.assert_close(wrapped(data)[0],
                               model.inner(data.x, data.edge_index))
    explicit = pyg_ipu.with_loss(model.inner, F.cross_entropy,
                                 inputs=("x", "edge_index"))
    assert explicit.model_arguments(data)[0][0] is data.x

    class NeedsPos(torch.nn.Module):
        def forward(self, x, pos):
            return x

    with pytest.raises(ValueError, match="'pos'"):
        pyg_ipu.with_loss(NeedsPos(), F.mse_loss)(data)


def test_loss_modules_and_regression_targets():
    data = Data(x=torch.randn(6, 2), y=torch.randn(6, 3),
                edge_index=torch.tensor([[0, 1], [1, 0]]))
    lin = torch.nn.Linear(2, 3)
    out, loss = pyg_ipu.with_loss(
        lambda_module(lin), torch.nn.MSELoss())(data)
    torch.testing.assert_close(loss, F.mse_loss(lin(data.x), data.y))


def lambda_module(lin):
    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            return self.lin(x)
    return Wrap()


def test_inference_model_follows_training_through_the_wrapper():
    data = _cora_like()
    model = NodeModel()
    train_model = poptorch.trainingModel(
        pyg_ipu.with_loss(model, F.cross_entropy, mask="train_mask"),
        optimizer=_sgd(model))
    test_model = poptorch.inferenceModel(model.eval())
    before = test_model(data.x, data.edge_index)
    train_model(data)
    after = test_model(data.x, data.edge_index)
    with torch.no_grad():
        expected = model(data.x, data.edge_index)  # synced host weights
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, expected)


def test_metrics_count_real_entries_only():
    graphs = _graphs(5)
    padded = FixedSizeCollater(FixedSizeOptions(30, 40, 8),
                               add_masks_to_batch=True)(graphs)
    plain = Batch.from_data_list(graphs)
    assert pyg_ipu.num_real_graphs(padded) == plain.num_graphs == 5
    assert pyg_ipu.num_real_nodes(padded) == plain.num_nodes
    pred = torch.zeros(8, dtype=torch.long)  # padding y is 0 too
    assert pyg_ipu.count_real(pred == padded.y, padded) == \
        int((pred[:5] == plain.y).sum())
    node_values = torch.ones(padded.num_nodes)
    assert pyg_ipu.count_real(node_values, padded) == plain.num_nodes
    assert pyg_ipu.count_real(torch.ones(5), plain) == 5  # no masks
