"""The ``compile`` backend's training step with its Adam update in the
compiled graph (``Program.adam_in_graph``, ``backends.passes.fused_adam``),
against torch's fused kernel and eager PyTorch training."""
import copy

import pytest
import torch

import poptorch
from poptorch_core._executor.backends.passes.fused_adam import (FusedAdamKey,
                                                         adam_coefficients,
                                                         adam_update)
from poptorch_core.optim._device import DeviceOptimizer
from ._eager import assert_outputs_match, train_call
from ._models import GIN, MLP, graph_batch


@pytest.mark.parametrize("decoupled", [False, True])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_the_update_is_torchs_fused_kernels(decoupled, weight_decay):
    """Three steps of :func:`adam_update` (loss-scaled gradients, bias
    corrections of the step number) against ``torch._fused_adam(w)_``."""
    gen = torch.Generator().manual_seed(0)
    param = torch.randn(1000, generator=gen)
    moments = [torch.zeros(1000), torch.zeros(1000)]
    ref = [param.clone(), torch.zeros(1000), torch.zeros(1000)]
    kernel = torch._fused_adamw_ if decoupled else torch._fused_adam_
    key = FusedAdamKey((0,), decoupled, weight_decay != 0)
    for step in range(1, 4):
        grad = torch.randn(1000, generator=gen) * 1e-2
        coefficients = adam_coefficients(1e-2, (0.9, 0.99), 1e-6,
                                         weight_decay, step, 128.0)
        param, *moments = adam_update(param, grad * 128.0, *moments,
                                      coefficients, key)
        kernel([ref[0]], [grad], [ref[1]], [ref[2]], [],
               [torch.tensor(float(step))], lr=1e-2, beta1=0.9, beta2=0.99,
               weight_decay=weight_decay, eps=1e-6, amsgrad=False,
               maximize=False)
    for value, reference in zip([param, *moments], ref):
        torch.testing.assert_close(value, reference, rtol=1e-6, atol=1e-8)


def _no_separate_step(monkeypatch):
    def step(self, grad_divisor):
        raise AssertionError("the update should run in the graph")
    monkeypatch.setattr(DeviceOptimizer, "step", step)


@pytest.mark.parametrize("optimizer,loss_scaling", [
    ("Adam", 1.0), ("AdamW", 1.0), ("Adam", 1024.0)])
def test_training_matches_eager(optimizer, loss_scaling, monkeypatch):
    """Device iterations of one micro-batch each, batch norm buffers that
    the graph updates, a frozen parameter, a learning rate changed between
    calls: outputs, weights, buffers and the optimizer's moments equal
    eager PyTorch's, with one compilation and no separate optimizer step.
    (The frozen one is the bias before the batch norm, whose gradient is
    rounding noise that Adam would scale up to the learning rate.)"""
    _no_separate_step(monkeypatch)
    torch.manual_seed(3)
    model = GIN(batch_norm=True)
    model.conv1.nn[0].bias.requires_grad_(False)
    reference = copy.deepcopy(model)
    D = 2
    opts = poptorch.Options().deviceIterations(D).outputMode(
        poptorch.OutputMode.All)
    opts.Simulator.backend("compile")
    kwargs = {"lr": 0.01, "weight_decay": 0.05}
    ipu_opt = getattr(poptorch.optim, optimizer)(
        model.parameters(), loss_scaling=loss_scaling, **kwargs)
    ref_opt = getattr(torch.optim, optimizer)(reference.parameters(),
                                              **kwargs)
    ipu = poptorch.trainingModel(model, opts, ipu_opt)
    gen = torch.Generator().manual_seed(4)
    for call in range(3):
        if call == 2:
            for group in ipu_opt.param_groups + ref_opt.param_groups:
                group["lr"] = 0.003
            ipu.setOptimizer(ipu_opt)
        inputs = graph_batch(batches=D, generator=gen)
        out, loss = ipu(*inputs)
        assert_outputs_match(out, loss, train_call(
            reference, ref_opt, inputs, D=D, loss_scaling=loss_scaling))
    assert ipu.compilations() == 1
    assert ipu._state.program.adam_plan.packed is not None
    ipu.copyWeightsToHost()
    for (name, p), q in zip(model.state_dict().items(),
                            reference.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    state = ipu._state.program.device_optimizer.read_state()["ipu_state"]
    for (name, _), param in zip(model.named_parameters(),
                                reference.parameters()):
        if not param.requires_grad:
            continue
        ref_state = ref_opt.state[param]
        assert float(state[f"Step___{name}"]) == float(ref_state["step"])
        torch.testing.assert_close(state[f"Accl1___{name}"],
                                   ref_state["exp_avg"], rtol=1e-4,
                                   atol=1e-6, msg=name)
        torch.testing.assert_close(state[f"Accl2___{name}"],
                                   ref_state["exp_avg_sq"], rtol=1e-4,
                                   atol=1e-8, msg=name)


def _program_after_one_call(optimizer_factory, opts=None):
    torch.manual_seed(5)
    model = MLP()
    opts = opts or poptorch.Options()
    opts.Simulator.backend("compile")
    ipu = poptorch.trainingModel(model, opts, optimizer_factory(model))
    batch = opts.Training.gradient_accumulation if opts.exists(
        "Training") else 1
    ipu(torch.randn(8 * batch, 4), torch.randn(8 * batch, 3))
    return ipu._state.program


def _two_groups(model):
    params = list(model.parameters())
    return torch.optim.Adam([{"params": params[:2]}, {"params": params[2:]}])


def _accumulating():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    return opts


@pytest.mark.parametrize("factory,opts,fused", [
    (lambda m: torch.optim.Adam(m.parameters()), None, True),
    (lambda m: poptorch.optim.AdamW(m.parameters()), None, True),
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.1), None, False),
    (_two_groups, None, False),
    (lambda m: poptorch.optim.Adam(m.parameters(), max_grad_norm=1.0),
     None, False),
    (lambda m: torch.optim.Adam(m.parameters()), _accumulating, False),
], ids=["adam", "adamw", "sgd", "two-groups", "clipping", "accumulation"])
def test_which_steps_apply_the_update_in_the_graph(factory, opts, fused):
    program = _program_after_one_call(factory, opts() if opts else None)
    assert (program.adam_in_graph() is not None) == fused
    assert bool(program.executable._adam_steps) == fused


def test_a_returned_weight_is_its_value_before_the_update():
    """The graph writes the update into the weights it read: an output
    that is a weight, or a view of one, keeps the forward pass's value
    (as the optimizer's separate step leaves it)."""
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x, y):
            out = self.lin(x)
            return (out, torch.nn.functional.mse_loss(out, y),
                    self.lin.weight, self.lin.weight.t())

    torch.manual_seed(6)
    model = Model()
    before = model.lin.weight.detach().clone()
    opts = poptorch.Options()
    opts.Simulator.backend("compile")
    ipu = poptorch.trainingModel(model, opts, torch.optim.Adam(
        model.parameters(), lr=0.1))
    _, _, weight, transposed = ipu(torch.randn(8, 4), torch.randn(8, 3))
    assert ipu._state.program.executable._adam_steps
    ipu.copyWeightsToHost()
    assert not torch.equal(model.lin.weight, before)  # the step ran
    torch.testing.assert_close(weight, before, rtol=0, atol=0)
    torch.testing.assert_close(transposed, before.t(), rtol=0, atol=0)
