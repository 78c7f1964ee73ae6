"""Padding-only mini-batches never change the update or the reported loss
(issue 45, items 4 and 5).

A ``FixedSizeDataLoader`` with ``drop_last=False`` completes its last
combined batch with padding-only mini-batches. Trained with ``with_loss``,
the steps must equal eager PyG training on the same real graphs: gradients
averaged over the real mini-batches only, no step where there is none.
Pad values must be finite; with large finite ones ``with_loss`` stays
exact.
"""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch
from torch_geometric.nn import global_add_pool
from torch_geometric.transforms.pad import AttrNamePadding, UniformPadding

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric import FixedSizeCollater, FixedSizeOptions

from ._graphs import graph

#: Graph slots per mini-batch: 2 real graphs and one padding graph.
SLOTS = 3


class GraphModel(torch.nn.Module):
    def __init__(self, out_channels=3):
        super().__init__()
        self.lin1 = torch.nn.Linear(2, 4)
        self.lin2 = torch.nn.Linear(4, out_channels)

    def forward(self, x, batch, batch_size):
        h = torch.tanh(self.lin1(x))
        return self.lin2(global_add_pool(h, batch, size=batch_size))


def _graphs(n):
    return [graph(3 + i % 3, 4, edge_dim=None, seed=i,
                  y=torch.tensor([i % 3])) for i in range(n)]


def _sgd(params):
    return torch.optim.SGD(params, lr=0.2, momentum=0.9, weight_decay=0.1)


def _eager_epoch(model, optimizer, graphs, per_step):
    """Plain PyG on the real graphs: mini-batches of ``SLOTS - 1`` graphs
    in order, ``per_step`` of them per step, gradients averaged over the
    mini-batches of the step (the last step has fewer). Returns each
    mini-batch's loss."""
    minis = [graphs[i:i + SLOTS - 1]
             for i in range(0, len(graphs), SLOTS - 1)]
    losses = []
    for start in range(0, len(minis), per_step):
        step = minis[start:start + per_step]
        optimizer.zero_grad()
        for mini in step:
            plain = Batch.from_data_list(mini)
            loss = F.cross_entropy(
                model(plain.x, plain.batch, plain.num_graphs), plain.y)
            (loss / len(step)).backward()
            losses.append(float(loss.detach()))
        optimizer.step()
    return losses


@pytest.mark.parametrize("D, G, R", [(1, 4, 1), (1, 1, 4), (2, 2, 1)],
                         ids=["accumulation", "replication", "combined"])
def test_the_last_step_equals_eager_pyg_on_the_real_graphs(D, G, R):
    """11 graphs, 2 per mini-batch, 4 mini-batches per call: the second
    call holds 3 real graphs and 2 padding-only mini-batches (with D=2,
    its second step is padding only)."""
    graphs = _graphs(11)
    torch.manual_seed(0)
    model = GraphModel()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
    opts.Training.gradientAccumulation(G)
    opts.outputMode(poptorch.OutputMode.All)
    loader = pyg_ipu.FixedSizeDataLoader(
        graphs, batch_size=SLOTS, drop_last=False, options=opts,
        fixed_size_options=FixedSizeOptions.from_dataset(graphs, SLOTS))
    train_model = poptorch.trainingModel(
        pyg_ipu.with_loss(model, F.cross_entropy), opts, _sgd(
            model.parameters()))
    losses, counts = [], []
    for batch in loader:
        _, loss = train_model(batch)
        losses.append(loss)
        counts.append(pyg_ipu.num_real_graphs_per_mini_batch(batch))
    assert [c.tolist() for c in counts] == [[2, 2, 2, 2], [2, 1, 0, 0]]

    expected = _eager_epoch(reference, _sgd(reference.parameters()),
                            graphs, G * R)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach())
    # Every reported loss is eager's: the real mini-batches' in order, and
    # the mean over the real graphs, with the counts as weights.
    losses, counts = torch.cat(losses), torch.cat(counts)
    torch.testing.assert_close(losses[counts > 0], torch.tensor(expected))
    assert torch.equal(losses[counts == 0], torch.zeros(2))
    sizes = torch.tensor([2, 2, 2, 2, 2, 1])   # real graphs per mini-batch
    assert float((losses * counts).sum() / counts.sum()) == pytest.approx(
        float((torch.tensor(expected) * sizes).sum() / 11))


@pytest.mark.parametrize("name", ["node_pad_value", "edge_pad_value",
                                  "graph_pad_value"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_pad_values_are_refused(name, bad):
    with pytest.raises(ValueError, match=rf"{name} must be a finite number, "
                                         rf"got {bad}: .*Use a finite value"):
        FixedSizeOptions(10, 10, 2, **{name: bad})
    opts = FixedSizeOptions(10, 10, 2)
    with pytest.raises(ValueError, match=f"{name} must be a finite"):
        setattr(opts, name, bad)
    assert getattr(opts, name) == 0.0   # unchanged
    with pytest.raises(ValueError, match=f"{name} .*AttrNamePadding"):
        FixedSizeOptions(10, 10, 2, **{name: AttrNamePadding({"x": bad})})


def test_non_finite_values_from_padding_objects_and_defaults_are_refused():
    class Computed(UniformPadding):
        def get_value(self, store_type=None, attr_name=None):
            return math.nan if attr_name == "x" else 0.0

    graphs = _graphs(2)
    collater = FixedSizeCollater(FixedSizeOptions(
        20, 20, 3, node_pad_value=Computed()))
    with pytest.raises(ValueError, match="padding value of 'x'"):
        collater(graphs)
    with pytest.raises(ValueError, match=r"pad_graph_defaults\['w'\]"):
        FixedSizeOptions(10, 10, 2, pad_graph_defaults={"w": math.inf})
    for good in (-1e6, 1e30, 0, UniformPadding(5.0)):
        FixedSizeOptions(10, 10, 2, node_pad_value=good)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_with_loss_is_exact_with_large_finite_pad_values(task):
    """Pad values of 1e6 for nodes, edges and graph targets: the loss and
    the step equal eager PyG on the real graphs (the integer class target
    1e6 is no valid class: with_loss must not pass it to the loss)."""
    graphs = _graphs(3)
    if task == "regression":
        for i, g in enumerate(graphs):
            g.y = torch.tensor([[0.5 * i, -1.0]])
    loss_fn = F.cross_entropy if task == "classification" else F.mse_loss
    torch.manual_seed(0)
    model = GraphModel(3 if task == "classification" else 2)
    reference = copy.deepcopy(model)
    padded = FixedSizeCollater(FixedSizeOptions(
        30, 30, 6, node_pad_value=1e6, edge_pad_value=1e6,
        graph_pad_value=1e6), add_masks_to_batch=True)(graphs)
    assert padded.x[-1].eq(1e6).all() and padded.y[-1].eq(1e6).all()
    train_model = poptorch.trainingModel(
        pyg_ipu.with_loss(model, loss_fn), optimizer=_sgd(
            model.parameters()))
    _, loss = train_model(padded)

    plain = Batch.from_data_list(graphs)
    optimizer = _sgd(reference.parameters())
    ref_loss = loss_fn(reference(plain.x, plain.batch, 3), plain.y)
    ref_loss.backward()
    optimizer.step()
    torch.testing.assert_close(loss, ref_loss.detach())
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach())
