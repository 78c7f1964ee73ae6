"""The ``compile`` backend's training step: forward, loss seed and
gradients traced and compiled as one graph (``backends/passes/training_step``),
against eager PyTorch's autograd."""
import copy

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import poptorch
from poptorch_core._executor.backends.executable import Executable
from ._eager import assert_outputs_match, train_call
from ._models import GIN, MLP, graph_batch


def _compile_training(model, optimizer, opts=None):
    opts = opts or poptorch.Options()
    opts.Simulator.backend("compile")
    return poptorch.trainingModel(model, opts, optimizer)


def test_gradients_are_autograds_for_a_non_scalar_scaled_loss():
    """``run_training`` of a graph whose loss is not a scalar: the
    gradients of ``loss.sum() * scale``, as ``backward()`` computes them
    eagerly, for the placeholders that require them (only those the loss
    depends on), and the outputs of the graph, detached."""
    def model(w1, w2, unused, x):
        hidden = torch.relu(x @ w1)
        out = hidden @ w2
        return out, (out - 1.0) ** 2, unused * 2

    gen = torch.Generator().manual_seed(0)
    w1 = torch.randn(4, 8, generator=gen, requires_grad=True)
    w2 = torch.randn(8, 3, generator=gen, requires_grad=True)
    unused = torch.randn(3, requires_grad=True)
    x = torch.randn(6, 4, generator=gen)
    executable = Executable(make_fx(model)(w1, w2, unused, x), "compile")
    outputs, grads = executable.run_training([w1, w2, unused, x], 1, 8.0)

    out, loss, doubled = model(w1, w2, unused, x)
    expected = torch.autograd.grad(loss.sum() * 8.0, [w1, w2])
    assert [position for position, _ in grads] == [0, 1]
    for (_, grad), reference in zip(grads, expected):
        torch.testing.assert_close(grad, reference, rtol=1e-5, atol=1e-6)
    for value, reference in zip(outputs, (out, loss, doubled)):
        assert not value.requires_grad
        torch.testing.assert_close(value, reference.detach())
    assert executable.compilations == 1
    executable.run_training([w1, w2, unused, x], 1, 2.0)
    assert executable.compilations == 1  # the scale is an input


def test_a_training_call_takes_the_one_graph_path():
    model = MLP()
    ipu = _compile_training(model, torch.optim.SGD(model.parameters(),
                                                   lr=0.1))
    ipu(torch.randn(8, 4), torch.randn(8, 3))
    executable = ipu._state.program.executable
    assert len(executable._steps) == 1 and not executable._compiled
    assert ipu.compilations() == 1


@pytest.mark.parametrize("loss_scaling", [1.0, 1024.0])
def test_accumulated_scaled_training_matches_eager(loss_scaling):
    """Two accumulation steps per optimizer step (the second adds to
    ``.grad``), a loss scaling the optimizer undoes, batch norm buffers
    that the graph updates: weights, buffers and per-micro-batch outputs
    equal eager PyTorch's."""
    torch.manual_seed(8)
    model = GIN(batch_norm=True)
    reference = copy.deepcopy(model)
    G = 2
    opts = poptorch.Options().outputMode(poptorch.OutputMode.All)
    opts.Training.gradientAccumulation(G)
    ipu = _compile_training(
        model, poptorch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                  loss_scaling=loss_scaling), opts)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(9)
    for _ in range(3):
        inputs = graph_batch(batches=G, generator=gen)
        out, loss = ipu(*inputs)
        assert_outputs_match(out, loss, train_call(
            reference, ref_opt, inputs, G=G, loss_scaling=loss_scaling))
    ipu.copyWeightsToHost()
    for (name, p), q in zip(model.state_dict().items(),
                            reference.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


def test_a_parameter_the_loss_ignores_keeps_no_gradient():
    """A trainable parameter outside the loss gets no ``.grad`` (as with
    ``backward()``), so AdamW leaves it untouched: a zero gradient would
    still let its weight decay."""
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used = torch.nn.Linear(4, 3)
            self.ignored = torch.nn.Linear(4, 3)

        def forward(self, x, y):
            out = self.used(x)
            return out, torch.nn.functional.mse_loss(out, y)

    torch.manual_seed(10)
    model = Model()
    reference = copy.deepcopy(model)
    ipu = _compile_training(model, poptorch.optim.AdamW(
        model.parameters(), lr=0.01, weight_decay=0.1))
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.01,
                                weight_decay=0.1)
    gen = torch.Generator().manual_seed(11)
    for _ in range(3):
        x = torch.randn(8, 4, generator=gen)
        y = torch.randn(8, 3, generator=gen)
        ipu(x, y)
        train_call(reference, ref_opt, (x, y))
    ipu.copyWeightsToHost()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.ignored.weight,
                               reference.ignored.weight, rtol=0, atol=0)


def test_dropout_gradients_use_the_mask_of_the_forward_pass():
    """Forward and backward are one graph: the dropout mask the gradient
    goes through is the one the forward pass drew (and returned), and each
    call draws a new one."""
    class Dropout(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(6, 3))

        def forward(self, x):
            dropped = torch.nn.functional.dropout(x, 0.5, self.training)
            return dropped, poptorch.identity_loss((dropped @ self.w).sum(),
                                                   reduction="none")

    torch.manual_seed(12)
    model = Dropout()
    ipu = _compile_training(model, torch.optim.SGD(model.parameters(),
                                                   lr=1.0))
    x = torch.randn(8, 6)
    before = model.w.detach().clone()
    dropped, _ = ipu(x)
    ipu.copyWeightsToHost()
    assert 0 < int((dropped == 0).sum()) < dropped.numel()
    # d(sum(dropped @ w))/dw = column sums of dropped, for every output.
    torch.testing.assert_close(before - model.w.detach(),
                               dropped.sum(0)[:, None].expand(6, 3))
    assert not torch.equal(ipu(x)[0], dropped)
