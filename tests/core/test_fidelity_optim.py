"""Optimizer state on the device (issue 13, item 6): reading and writing
``ipu_state``, states from CPU-trained torch optimizers, constant
attributes, ``setOptimizer`` validation, AdamW without bias correction and
LR schedulers driven through ``setOptimizer``.

References are eager torch optimizers stepping copies of the same model on
the same data, or the update rule written out in the test.
"""
import copy
import math

import pytest
import torch

import poptorch
from ._models import LinearMSE


def _data(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g)


def _eager_steps(model, optimizer, steps, scheduler=None):
    for step in steps:
        optimizer.zero_grad()
        model(*_data(step))[1].backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def _ipu_steps(training, steps, after=None):
    for step in steps:
        training(*_data(step))
        if after is not None:
            after()


def _assert_same_weights(a, b):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), msg=name)


def test_state_dict_holds_the_device_state_after_compile():
    torch.manual_seed(0)
    model, reference = LinearMSE(), None
    reference = copy.deepcopy(model)
    optimizer = poptorch.optim.Adam(model.parameters(), lr=0.01)
    assert optimizer.state_dict()["ipu_state"] is None
    training = poptorch.trainingModel(model, optimizer=optimizer)
    _ipu_steps(training, range(2))
    ref_opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    _eager_steps(reference, ref_opt, range(2))
    state = optimizer.state_dict()
    ref_state = ref_opt.state[reference.fc.weight]
    torch.testing.assert_close(state["ipu_state"]["Accl1___fc.weight"],
                               ref_state["exp_avg"])
    torch.testing.assert_close(state["ipu_state"]["Accl2___fc.weight"],
                               ref_state["exp_avg_sq"])
    assert float(state["ipu_param"]["learningRate___specific___fc.weight"]) \
        == pytest.approx(0.01)


def test_loaded_state_continues_training_exactly():
    torch.manual_seed(0)
    first = LinearMSE()
    opt_a = poptorch.optim.Adam(first.parameters(), lr=0.01)
    training_a = poptorch.trainingModel(first, optimizer=opt_a)
    _ipu_steps(training_a, range(2))
    saved = copy.deepcopy(opt_a.state_dict())
    second = copy.deepcopy(LinearMSE())
    second.load_state_dict(first.state_dict())
    opt_b = poptorch.optim.Adam(second.parameters(), lr=0.01)
    opt_b.load_state_dict(saved)
    training_b = poptorch.trainingModel(second, optimizer=opt_b)
    _ipu_steps(training_b, [2])
    _ipu_steps(training_a, [2])
    _assert_same_weights(first, second)
    # Later reads return the device's state, which continued from the load.
    torch.testing.assert_close(opt_b.state_dict()["ipu_state"],
                               opt_a.state_dict()["ipu_state"])


def test_incomplete_state_keeps_the_device_values_of_missing_entries():
    torch.manual_seed(0)
    model = LinearMSE()
    reference = copy.deepcopy(model)
    optimizer = poptorch.optim.Adam(model.parameters(), lr=0.01)
    training = poptorch.trainingModel(model, optimizer=optimizer)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    _ipu_steps(training, range(2))
    _eager_steps(reference, ref_opt, range(2))
    # Reset only the first moment of the weight, on both sides.
    loaded = optimizer.state_dict()
    loaded["ipu_state"] = {"Accl1___fc.weight":
                           torch.zeros_like(reference.fc.weight)}
    optimizer.load_state_dict(loaded)
    assert torch.equal(optimizer.state_dict()["ipu_state"][
        "Accl1___fc.weight"], torch.zeros(2, 3))
    ref_opt.state[reference.fc.weight]["exp_avg"].zero_()
    _ipu_steps(training, [2])
    _eager_steps(reference, ref_opt, [2])
    _assert_same_weights(model, reference)


@pytest.mark.parametrize("algorithm", ["Adam", "SGD", "RMSprop"])
def test_cpu_trained_torch_state_is_accepted(algorithm):
    torch.manual_seed(0)
    kwargs = {"lr": 0.01}
    if algorithm != "Adam":
        kwargs["momentum"] = 0.9
    cpu_model = LinearMSE()
    cpu_opt = getattr(torch.optim, algorithm)(cpu_model.parameters(),
                                              **kwargs)
    _eager_steps(cpu_model, cpu_opt, range(2))
    ipu_model = copy.deepcopy(cpu_model)
    ipu_opt = getattr(poptorch.optim, algorithm)(ipu_model.parameters(),
                                                 **kwargs)
    ipu_opt.load_state_dict(copy.deepcopy(cpu_opt.state_dict()))
    training = poptorch.trainingModel(ipu_model, optimizer=ipu_opt)
    _ipu_steps(training, [2, 3])
    _eager_steps(cpu_model, cpu_opt, [2, 3])
    _assert_same_weights(ipu_model, cpu_model)


def test_native_optimizer_trained_on_cpu_keeps_its_state_on_the_device():
    torch.manual_seed(0)
    model = LinearMSE()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    _eager_steps(model, optimizer, range(2))
    reference = copy.deepcopy(model)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    ref_opt.load_state_dict(optimizer.state_dict())
    training = poptorch.trainingModel(model, optimizer=optimizer)
    _ipu_steps(training, [2, 3])
    _eager_steps(reference, ref_opt, [2, 3])
    _assert_same_weights(model, reference)


# --- Constant attributes and setOptimizer validation ---------------------------------

def _compiled(optimizer_factory):
    model = LinearMSE()
    optimizer = optimizer_factory(model.parameters())
    training = poptorch.trainingModel(model, optimizer=optimizer)
    training.compile(*_data(0))
    return training, optimizer


CONSTANT_MESSAGE = r"Cannot change the constant optimizer attribute {}"


def test_constant_attributes_cannot_change_after_compilation():
    def marked(params):
        optimizer = poptorch.optim.SGD(params, lr=0.1, momentum=0.5)
        optimizer.variable_attrs.markAsConstant("momentum")
        return optimizer

    training, optimizer = _compiled(marked)
    optimizer.param_groups[0]["momentum"] = 0.9
    with pytest.raises(poptorch.Error, match=CONSTANT_MESSAGE.format(
            "momentum")):
        training.setOptimizer(optimizer)
    optimizer.param_groups[0]["momentum"] = 0.5
    optimizer.param_groups[0]["lr"] = 0.2   # variable: fine
    training.setOptimizer(optimizer)

    # Native torch optimizers: attributes at their default are constant.
    training, optimizer = _compiled(
        lambda params: torch.optim.SGD(params, lr=0.1))
    optimizer.param_groups[0]["weight_decay"] = 0.01
    with pytest.raises(poptorch.Error, match=CONSTANT_MESSAGE.format(
            "weight_decay")):
        training.setOptimizer(optimizer)
    # A poptorch optimizer's constant loss_scaling.
    training, optimizer = _compiled(
        lambda params: poptorch.optim.Adam(params, lr=0.1))
    optimizer.loss_scaling = 4.0
    with pytest.raises(poptorch.Error, match=CONSTANT_MESSAGE.format(
            "loss_scaling")):
        training.setOptimizer(optimizer)


def test_set_optimizer_validates_frozen_options():
    training, optimizer = _compiled(
        lambda params: poptorch.optim.SGD(params, lr=0.1))
    half_accum = poptorch.optim.SGD(optimizer.param_groups[0]["params"],
                                    lr=0.1, accum_type=torch.float16)
    with pytest.raises(ValueError, match=(
            "Invalid optimizer: the new optimizer would require changing "
            r"options.Training.meanAccumulationAndReplicationReductionStrategy"
            r" to poptorch.MeanReductionStrategy.Running but the executable "
            "is already compiled.")):
        training.setOptimizer(half_accum)
    amsgrad = torch.optim.Adam(optimizer.param_groups[0]["params"],
                               amsgrad=True)
    with pytest.raises(ValueError, match="Only non-amsgrad Adam/AdamW "
                       "optimizers are supported."):
        training.setOptimizer(amsgrad)


# --- Numerics --------------------------------------------------------------------------

def test_adamw_without_bias_correction_follows_its_rule():
    torch.manual_seed(0)
    model = LinearMSE()
    start = copy.deepcopy(model)
    lr, betas, eps, wd = 0.01, (0.9, 0.99), 1e-6, 0.1
    optimizer = poptorch.optim.AdamW(model.parameters(), lr=lr, betas=betas,
                                     eps=eps, weight_decay=wd,
                                     bias_correction=False)
    training = poptorch.trainingModel(model, optimizer=optimizer)
    _ipu_steps(training, range(3))
    # Reference: the rule written out, gradients by eager autograd.
    params = [p.detach().clone().requires_grad_() for p in start.parameters()]
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    for step in range(3):
        x, y = _data(step)
        out = torch.nn.functional.linear(x, params[0], params[1])
        grads = torch.autograd.grad(torch.nn.functional.mse_loss(out, y),
                                    params)
        with torch.no_grad():
            for p, g, (m, v) in zip(params, grads, moments):
                m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
                v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
                p.mul_(1 - lr * wd).sub_(lr * m / (v.sqrt() + eps))
    for p, q in zip(model.parameters(), params):
        torch.testing.assert_close(p.detach(), q.detach())
    # ... which differs from torch's bias-corrected AdamW.
    corrected = copy.deepcopy(start)
    _eager_steps(corrected, torch.optim.AdamW(
        corrected.parameters(), lr=lr, betas=betas, eps=eps,
        weight_decay=wd), range(3))
    assert not torch.allclose(corrected.fc.weight, model.fc.weight)


@pytest.mark.parametrize("make_scheduler", [
    lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
    lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.7),
    lambda opt: torch.optim.lr_scheduler.LambdaLR(
        opt, lambda epoch: 1.0 / (1 + epoch)),
])
def test_lr_scheduler_through_set_optimizer(make_scheduler):
    torch.manual_seed(0)
    model = LinearMSE()
    reference = copy.deepcopy(model)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = make_scheduler(optimizer)
    training = poptorch.trainingModel(model, optimizer=optimizer)

    def next_epoch():
        scheduler.step()
        training.setOptimizer(optimizer)

    _ipu_steps(training, range(5), after=next_epoch)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    _eager_steps(reference, ref_opt, range(5),
                 scheduler=make_scheduler(ref_opt))
    assert optimizer.param_groups[0]["lr"] == pytest.approx(
        ref_opt.param_groups[0]["lr"])
    assert not math.isclose(optimizer.param_groups[0]["lr"], 0.1)
    _assert_same_weights(model, reference)
