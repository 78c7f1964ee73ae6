"""The interpret backend writes dead temporaries in place
(``passes.in_place_temporaries``):
only where nothing reads them afterwards, with the values and gradients of
plain PyTorch."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import poptorch
from poptorch_core._executor.backends.passes.in_place_temporaries import \
    write_temporaries_in_place


def _targets(graph_module):
    return [str(n.target) for n in graph_module.graph.nodes
            if n.op == "call_function"]


def _run_with_grads(graph_module, args):
    leaves = [a.detach().clone().requires_grad_(a.is_floating_point())
              for a in args]
    out = graph_module(*leaves)
    out.sum().backward()
    return out.detach(), [leaf.grad for leaf in leaves]


def _message(x, e, w, src):
    """A GINE message and an MLP layer: every temporary dies at its user
    (``doubled`` twice at the same one)."""
    h = torch.relu(torch.index_select(x, 0, src) + e)
    doubled = e.mul(2)
    return torch.relu(F.linear(h, w)) + (doubled + doubled)


def test_dead_temporaries_are_written_and_results_equal_eager():
    torch.manual_seed(0)
    args = (torch.randn(6, 4), torch.randn(9, 4), torch.randn(4, 4),
            torch.randint(0, 6, (9,)))
    rewritten = write_temporaries_in_place(make_fx(_message)(*args))
    assert _targets(rewritten).count("aten.relu_.default") == 2
    assert _targets(rewritten).count("aten.add_.Tensor") == 3
    assert "aten.relu.default" not in _targets(rewritten)
    out, grads = _run_with_grads(rewritten, args)
    expected_out, expected_grads = _run_with_grads(_message, args)
    torch.testing.assert_close(out, expected_out)
    for grad, expected in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected)


def _read_twice(x, w):
    h = F.linear(x, w)
    return torch.relu(h) + h


def _producer_saves_its_output(x):
    return torch.exp(x) + 1  # exp's backward reads exp's output


def _broadcast(x, row):
    return row.mul(2) + x  # the temporary is (4,), the sum (3, 4)


def _promoted(x, y):
    return x.mul(2) + y  # float32 + float64


def _scaled(x, y):
    return torch.add(x, y.mul(2), alpha=3)


def _graph_input(x):
    return torch.relu(x)


@pytest.mark.parametrize("fn,args", [
    (_read_twice, (torch.randn(3, 4), torch.randn(4, 4))),
    (_producer_saves_its_output, (torch.randn(3, 4),)),
    (_broadcast, (torch.randn(3, 4), torch.randn(4))),
    (_promoted, (torch.randn(3, 4), torch.randn(3, 4, dtype=torch.float64))),
    (_scaled, (torch.randn(3, 4), torch.randn(3, 4))),
    (_graph_input, (torch.randn(3, 4),)),
], ids=["read-twice", "saved-output", "broadcast", "promoted",
        "alpha", "graph-input"])
def test_values_someone_else_needs_are_not_written(fn, args):
    graph_module = make_fx(fn)(*args)
    assert write_temporaries_in_place(graph_module) is graph_module
    out, grads = _run_with_grads(graph_module, args)
    expected_out, expected_grads = _run_with_grads(fn, args)
    torch.testing.assert_close(out, expected_out)
    for grad, expected in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected)


class _Gine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 8)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(8, 8),
                                       torch.nn.ReLU(),
                                       torch.nn.Linear(8, 8))

    def forward(self, atoms, edge_attr, src, dst, y):
        x = self.embed(atoms)
        for _ in range(2):
            message = torch.relu(x.index_select(0, src) + edge_attr)
            aggregated = torch.zeros_like(x).index_add(0, dst, message)
            x = x + torch.relu(self.mlp(aggregated + x))
        loss = F.mse_loss(x.sum(-1), y)
        return x, poptorch.identity_loss(loss, reduction="none")


def test_interpret_training_matches_eager_training():
    """Three SGD steps of the interpret backend (which runs the in-place
    copy) against the same steps run eagerly."""
    torch.manual_seed(0)
    model = _Gine()
    reference = copy.deepcopy(model)
    atoms = torch.randint(0, 5, (7,))
    edge_attr = torch.randn(12, 8)
    src, dst = torch.randint(0, 7, (12,)), torch.randint(0, 7, (12,))
    y = torch.randn(7)
    opts = poptorch.Options()
    opts.Simulator.backend("interpret")
    training = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.05))
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for _ in range(3):
        x, loss = training(atoms, edge_attr, src, dst, y)
        optimizer.zero_grad()
        expected_x, expected_loss = reference(atoms, edge_attr, src, dst, y)
        expected_loss.backward()
        optimizer.step()
        torch.testing.assert_close(loss, expected_loss.detach())
        torch.testing.assert_close(x, expected_x.detach())
    training.copyWeightsToHost()
    for param, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param, expected)
    run = training._state.program.executable._interpreted
    assert "aten.relu_.default" in _targets(run)
