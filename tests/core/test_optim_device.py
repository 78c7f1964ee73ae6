"""The simulated device optimizer against torch's optimizers (and against
independent re-implementations for PopTorch's own variants)."""
import copy
import math

import pytest
import torch

import poptorch
from poptorch_core.optim._device import DeviceOptimizer
from ._reference_optim import LambReference, TFRMSpropReference

STEPS = 5
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]


def _model(device="cpu"):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3)).to(device)


def _batches(device="cpu", n=STEPS, size=8):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 4, generator=gen).to(device),
             torch.randn(size, 3, generator=gen).to(device))
            for _ in range(n)]


def _loss(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def _on_device(host_model, host_opt, **kwargs):
    """A device copy of ``host_model`` driven by a DeviceOptimizer."""
    dev_model = copy.deepcopy(host_model)
    params = {id(h): d for h, d in zip(host_model.parameters(),
                                       dev_model.parameters())}
    names = {id(h): n for n, h in host_model.named_parameters()}
    return dev_model, DeviceOptimizer(host_opt, params, names, **kwargs)


def _train_device(dev_model, dev_opt, batches, micro_batches=1, mean=True):
    for x, y in batches:
        for xm, ym in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
            (_loss(dev_model, xm, ym) * dev_opt.loss_scaling).backward()
        dev_opt.step(micro_batches if mean else 1)


def _train_torch(model, opt, batches, clip=None):
    for x, y in batches:
        opt.zero_grad()
        _loss(model, x, y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()


def _assert_same_params(a, b, rtol=1e-5, atol=1e-6):
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"{name}: {m}")


def _compare(popt_factory, torch_factory, device="cpu", batches=None,
             **train_kwargs):
    """Trains the same model with the device optimizer (host optimizer from
    ``popt_factory``) and with the torch optimizer; returns both models."""
    batches = batches or _batches(device)
    host, ref = _model(device), _model(device)
    dev_model, dev_opt = _on_device(host, popt_factory(host.parameters()))
    _train_device(dev_model, dev_opt, batches, **train_kwargs)
    _train_torch(ref, torch_factory(ref.parameters()), batches)
    return dev_model, ref


P, T = poptorch.optim, torch.optim
TORCH_EQUIVALENT = {
    "sgd": (lambda p: P.SGD(p, lr=0.1), lambda p: T.SGD(p, lr=0.1)),
    "sgd_momentum": (
        lambda p: P.SGD(p, lr=0.1, momentum=0.9, dampening=0.2,
                        weight_decay=0.01),
        lambda p: T.SGD(p, lr=0.1, momentum=0.9, dampening=0.2,
                        weight_decay=0.01)),
    "sgd_nesterov": (
        lambda p: P.SGD(p, lr=0.05, momentum=0.8, nesterov=True,
                        weight_decay=0.1),
        lambda p: T.SGD(p, lr=0.05, momentum=0.8, nesterov=True,
                        weight_decay=0.1)),
    "sgd_maximize": (
        lambda p: P.SGD(p, lr=0.1, momentum=0.5, maximize=True),
        lambda p: T.SGD(p, lr=0.1, momentum=0.5, maximize=True)),
    "sgd_combined": (
        lambda p: P.SGD(p, lr=0.1, momentum=0.9, use_combined_accum=True,
                        velocity_scaling=4.0),
        lambda p: T.SGD(p, lr=0.1, momentum=0.9)),
    "adam": (lambda p: P.Adam(p, lr=0.01), lambda p: T.Adam(p, lr=0.01)),
    "adam_wd_maximize": (
        lambda p: P.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                         weight_decay=0.1, maximize=True),
        lambda p: T.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                         weight_decay=0.1, maximize=True)),
    "adam_decoupled": (
        lambda p: P.Adam(p, lr=0.01, weight_decay=0.1,
                         decoupled_weight_decay=True),
        lambda p: T.Adam(p, lr=0.01, weight_decay=0.1,
                         decoupled_weight_decay=True)),
    "adamw": (lambda p: P.AdamW(p, lr=0.01, weight_decay=0.1),
              lambda p: T.AdamW(p, lr=0.01, weight_decay=0.1)),
    # maximize takes the per-parameter path (the others are packed).
    "adamw_maximize": (
        lambda p: P.AdamW(p, lr=0.01, weight_decay=1.0, maximize=True),
        lambda p: T.AdamW(p, lr=0.01, weight_decay=1.0, maximize=True)),
    "rmsprop": (lambda p: P.RMSprop(p, lr=0.01),
                lambda p: T.RMSprop(p, lr=0.01)),
    "rmsprop_weight_decay": (
        lambda p: P.RMSprop(p, lr=0.01, weight_decay=1.0),
        lambda p: T.RMSprop(p, lr=0.01, weight_decay=1.0)),
    "rmsprop_centered_momentum": (
        lambda p: P.RMSprop(p, lr=0.01, alpha=0.9, eps=1e-6, momentum=0.5,
                            centered=True, weight_decay=0.01),
        lambda p: T.RMSprop(p, lr=0.01, alpha=0.9, eps=1e-6, momentum=0.5,
                            centered=True, weight_decay=0.01)),
    "rmsprop_momentum_maximize": (
        lambda p: P.RMSprop(p, lr=0.01, momentum=0.9, maximize=True),
        lambda p: T.RMSprop(p, lr=0.01, momentum=0.9, maximize=True)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", sorted(TORCH_EQUIVALENT))
def test_matches_torch(config, device):
    popt, topt = TORCH_EQUIVALENT[config]
    dev_model, ref = _compare(popt, topt, device)
    _assert_same_params(dev_model, ref)
    # The weights really moved: the comparison is not between two no-ops.
    assert not torch.allclose(ref[0].weight, _model(device)[0].weight)


@pytest.mark.parametrize("config", ["sgd_momentum", "adamw", "rmsprop"])
def test_native_torch_optimizer_behaves_like_poptorch_defaults(config):
    _, topt = TORCH_EQUIVALENT[config]
    dev_model, ref = _compare(topt, topt)
    _assert_same_params(dev_model, ref)


@pytest.mark.parametrize("loss_scaling", [1024.0, 3.0])
@pytest.mark.parametrize("config", ["sgd_momentum", "adam"])
def test_loss_scaling_does_not_change_numerics(config, loss_scaling):
    popt, topt = TORCH_EQUIVALENT[config]

    def scaled(params):
        opt = popt(params)
        opt.loss_scaling = loss_scaling
        return opt

    host = _model()
    dev_model, dev_opt = _on_device(host, scaled(host.parameters()))
    assert dev_opt.loss_scaling == loss_scaling
    _train_device(dev_model, dev_opt, _batches())
    ref = _model()
    _train_torch(ref, topt(ref.parameters()), _batches())
    _assert_same_params(dev_model, ref)


def test_mean_over_micro_batches_equals_one_step_on_the_average():
    popt, topt = TORCH_EQUIVALENT["adam"]
    dev_model, ref = _compare(popt, topt, micro_batches=4, mean=True)
    _assert_same_params(dev_model, ref)


def test_sum_over_micro_batches_scales_the_gradient():
    # Sum over 4 equal-size micro-batches of mean losses = 4x the full-batch
    # gradient: plain SGD with lr equals torch SGD with 4*lr.
    dev_model, ref = _compare(lambda p: P.SGD(p, lr=0.01),
                              lambda p: T.SGD(p, lr=0.04),
                              micro_batches=4, mean=False)
    _assert_same_params(dev_model, ref)


@pytest.mark.parametrize("popt,topt", [
    (lambda p: P.SGD(p, lr=0.1, momentum=0.9, max_grad_norm=0.05),
     lambda p: T.SGD(p, lr=0.1, momentum=0.9)),
    (lambda p: P.Adam(p, lr=0.01, max_grad_norm=0.05),
     lambda p: T.Adam(p, lr=0.01)),
])
def test_max_grad_norm_equals_clip_grad_norm(popt, topt):
    batches = _batches()
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(host, popt(host.parameters()))
    _train_device(dev_model, dev_opt, batches)
    _train_torch(ref, topt(ref.parameters()), batches, clip=0.05)
    _assert_same_params(dev_model, ref)
    unclipped = _model()
    _train_torch(unclipped, topt(unclipped.parameters()), batches)
    assert not torch.allclose(unclipped[0].weight, ref[0].weight)


def _two_groups(model, **second):
    return [{"params": model[0].parameters()},
            {"params": model[2].parameters(), **second}]


@pytest.mark.parametrize("popt,topt", [
    (lambda g: P.SGD(g, lr=0.1, momentum=0.9),
     lambda g: T.SGD(g, lr=0.1, momentum=0.9)),
    (lambda g: P.Adam(g, lr=0.01), lambda g: T.Adam(g, lr=0.01)),
    (lambda g: P.RMSprop(g, lr=0.01), lambda g: T.RMSprop(g, lr=0.01)),
])
def test_per_group_hyper_parameters(popt, topt):
    kwargs = {"sgd": {"lr": 0.02, "momentum": 0.5, "weight_decay": 0.1},
              "adam": {"lr": 0.05, "betas": (0.5, 0.9)},
              "rmsprop": {"lr": 0.05, "alpha": 0.5, "momentum": 0.3}}
    family = type(topt([torch.zeros(1, requires_grad=True)])).__name__.lower()
    second = kwargs[family]
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(host, popt(_two_groups(host, **second)))
    _train_device(dev_model, dev_opt, _batches())
    _train_torch(ref, topt(_two_groups(ref, **second)), _batches())
    _assert_same_params(dev_model, ref)


def test_update_from_host_lr_change_keeps_momentum():
    batches = _batches(n=6)
    host, ref = _model(), _model()
    host_opt = P.SGD(host.parameters(), lr=0.1, momentum=0.9)
    ref_opt = T.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    dev_model, dev_opt = _on_device(host, host_opt)
    _train_device(dev_model, dev_opt, batches[:3])
    _train_torch(ref, ref_opt, batches[:3])
    host_opt.param_groups[0]["lr"] = 0.01
    ref_opt.param_groups[0]["lr"] = 0.01
    dev_opt.update_from_host(host_opt)
    _train_device(dev_model, dev_opt, batches[3:])
    _train_torch(ref, ref_opt, batches[3:])
    _assert_same_params(dev_model, ref)


def test_update_from_host_new_object_same_type_keeps_state():
    batches = _batches(n=6)
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01))
    ref_opt = T.Adam(ref.parameters(), lr=0.01)
    _train_device(dev_model, dev_opt, batches[:3])
    _train_torch(ref, ref_opt, batches[:3])
    dev_opt.update_from_host(P.Adam(host.parameters(), lr=0.005))
    ref_opt.param_groups[0]["lr"] = 0.005
    _train_device(dev_model, dev_opt, batches[3:])
    _train_torch(ref, ref_opt, batches[3:])
    _assert_same_params(dev_model, ref)


def test_update_from_host_type_change_resets_state():
    batches = _batches(n=6)
    host = _model()
    dev_model, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01))
    _train_device(dev_model, dev_opt, batches[:3])
    # From here on it must behave like a fresh SGD from the current weights.
    ref = copy.deepcopy(dev_model)
    dev_opt.update_from_host(P.SGD(host.parameters(), lr=0.1, momentum=0.9))
    assert dev_opt.read_state()["ipu_state"] == {}
    _train_device(dev_model, dev_opt, batches[3:])
    _train_torch(ref, T.SGD(ref.parameters(), lr=0.1, momentum=0.9),
                 batches[3:])
    _assert_same_params(dev_model, ref)


@pytest.mark.parametrize("factory", [
    lambda p: P.SGD(p, lr=0.1, momentum=0.9, dampening=0.3),
    lambda p: P.Adam(p, lr=0.01),
    lambda p: P.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
    lambda p: P.LAMB(p, lr=0.01),
])
def test_state_round_trip_into_a_fresh_device_optimizer(factory):
    batches = _batches(n=6)
    host = _model()
    dev_a, opt_a = _on_device(host, factory(host.parameters()))
    _train_device(dev_a, opt_a, batches[:3])
    state = opt_a.read_state()["ipu_state"]
    assert state, "the optimizer should have a state after 3 steps"
    # A second model (same names) that starts from A's weights but a fresh
    # optimizer state; loading A's state must make it continue identically.
    host_b = copy.deepcopy(dev_a)
    dev_b, opt_b = _on_device(host_b, factory(host_b.parameters()))
    opt_b.write_state(state)
    _train_device(dev_a, opt_a, batches[3:])
    _train_device(dev_b, opt_b, batches[3:])
    _assert_same_params(dev_a, dev_b, rtol=0, atol=0)
    # Without the state it would not (the comparison can fail).
    dev_c, opt_c = _on_device(host_b, factory(host_b.parameters()))
    _train_device(dev_c, opt_c, batches[3:])
    assert not torch.equal(dev_c[0].weight, dev_a[0].weight)


def test_read_state_values_are_cpu_copies():
    host = _model()
    dev_model, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01))
    _train_device(dev_model, dev_opt, _batches(n=1))
    state = dev_opt.read_state()["ipu_state"]
    before = state["Accl1___0.weight"].clone()
    state["Accl1___0.weight"].add_(1.0)
    assert torch.equal(dev_opt.read_state()["ipu_state"]["Accl1___0.weight"],
                       before)


def test_write_state_missing_keys_keep_device_values():
    host = _model()
    dev_model, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01))
    _train_device(dev_model, dev_opt, _batches(n=2))
    before = dev_opt.read_state()["ipu_state"]
    dev_opt.write_state({"Accl1___2.bias": torch.zeros(3)})
    after = dev_opt.read_state()["ipu_state"]
    assert torch.equal(after["Accl1___2.bias"], torch.zeros(3))
    for key in before:
        if key != "Accl1___2.bias":
            assert torch.equal(after[key], before[key]), key


def test_sgd_ipu_param_values():
    host = _model()
    opt = P.SGD(host.parameters(), lr=0.1, dampening=0.2, momentum=0.9,
                weight_decay=0.01, loss_scaling=4.0)
    _, dev_opt = _on_device(host, opt)
    params = dev_opt.read_state()["ipu_param"]
    for name, _ in host.named_parameters():
        assert params[f"scaledLearningRate0___specific___{name}"].item() == \
            pytest.approx(0.1 * (1 - 0.2) / 4.0)
        assert params[f"weightDecayScaleFactor0___specific___{name}"].item() \
            == pytest.approx(1 - 0.1 * (1 - 0.2) * 0.01)
    assert params["lossScaling_FLOAT"].item() == 4.0


def test_adam_state_and_param_names():
    host = _model()
    _, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01,
                                         weight_decay=0.1))
    read = dev_opt.read_state()
    names = [n for n, _ in host.named_parameters()]
    assert set(read["ipu_state"]) == {f"{slot}___{n}" for n in names
                                      for slot in ("Accl1", "Accl2", "Step")}
    for name in names:
        assert read["ipu_param"][f"learningRate___specific___{name}"].item() \
            == pytest.approx(0.01)
        assert read["ipu_param"][f"weightDecay___specific___{name}"].item() \
            == pytest.approx(0.1)
    assert "lossScaleUpdateFactor" not in read["ipu_state"]
    _, auto = _on_device(host, P.Adam(host.parameters()),
                         auto_loss_scaling=True)
    assert auto.read_state()["ipu_state"]["lossScaleUpdateFactor"].item() == 1


def test_accumulation_types_are_honoured():
    host = _model()
    half = torch.float16
    opt = P.Adam(host.parameters(), lr=0.01,
                 first_order_momentum_accum_type=half)
    dev_model, dev_opt = _on_device(host, opt)
    _train_device(dev_model, dev_opt, _batches())
    state = dev_opt.read_state()["ipu_state"]
    assert state["Accl1___0.weight"].dtype == half
    assert state["Accl2___0.weight"].dtype == torch.float32
    ref = _model()
    _train_torch(ref, T.Adam(ref.parameters(), lr=0.01), _batches())
    _assert_same_params(dev_model, ref, rtol=1e-2, atol=1e-3)
    sgd = P.SGD(host.parameters(), lr=0.1, momentum=0.9,
                velocity_accum_type=half)
    dev_model, dev_opt = _on_device(host, sgd)
    _train_device(dev_model, dev_opt, _batches(n=1))
    assert dev_opt.read_state()["ipu_state"]["Accl1___0.weight"].dtype == half


def test_fp16_gradient_accumulator_rounds_the_reduced_gradient():
    batches = _batches()
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(
        host, P.SGD(host.parameters(), lr=0.1, accum_type=torch.float16))
    _train_device(dev_model, dev_opt, batches)
    ref_opt = T.SGD(ref.parameters(), lr=0.1)
    for x, y in batches:
        ref_opt.zero_grad()
        _loss(ref, x, y).backward()
        for p in ref.parameters():
            p.grad = p.grad.half().float()
        ref_opt.step()
    _assert_same_params(dev_model, ref, rtol=0, atol=0)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rmsprop_tf_variant(momentum):
    kwargs = dict(lr=0.01, alpha=0.9, eps=1e-3, momentum=momentum)
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(
        host, P.RMSprop(host.parameters(), use_tf_variant=True, **kwargs))
    _train_device(dev_model, dev_opt, _batches())
    _train_torch(ref, TFRMSpropReference(ref.parameters(), **kwargs),
                 _batches())
    _assert_same_params(dev_model, ref)
    torch_variant = _model()
    _train_torch(torch_variant, T.RMSprop(torch_variant.parameters(),
                                          **kwargs), _batches())
    assert not torch.allclose(torch_variant[0].weight, dev_model[0].weight,
                              rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("maximize", [False, True])
def test_adamw_without_bias_correction(maximize):
    """On the packed path and (maximize) the per-parameter one."""
    lr, (b1, b2), eps, wd = 0.01, (0.9, 0.999), 1e-8, 0.1
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(host, P.AdamW(
        host.parameters(), lr=lr, weight_decay=wd, bias_correction=False,
        maximize=maximize))
    _train_device(dev_model, dev_opt, _batches())
    params = list(ref.parameters())
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for x, y in _batches():
        grads = torch.autograd.grad(_loss(ref, x, y), params)
        with torch.no_grad():
            for p, g, mi, vi in zip(params, grads, m, v):
                g = -g if maximize else g
                mi.copy_(b1 * mi + (1 - b1) * g)
                vi.copy_(b2 * vi + (1 - b2) * g * g)
                p.copy_(p * (1 - lr * wd) - lr * mi / (vi.sqrt() + eps))
    _assert_same_params(dev_model, ref)


@pytest.mark.parametrize("kwargs", [
    {"lr": 0.01},
    {"lr": 0.02, "bias_correction": False, "weight_decay": 0.0},
    {"lr": 0.01, "max_weight_norm": 0.5, "betas": (0.8, 0.9)},
    {"lr": 0.01, "weight_decay": 1.0},
])
def test_lamb_matches_its_definition(kwargs):
    host, ref = _model(), _model()
    dev_model, dev_opt = _on_device(
        host, P.LAMB(_two_groups(host, lr=0.03), **kwargs))
    _train_device(dev_model, dev_opt, _batches())
    _train_torch(ref, LambReference(_two_groups(ref, lr=0.03), **kwargs),
                 _batches())
    _assert_same_params(dev_model, ref)


def test_params_without_grad_are_not_updated_and_grads_are_cleared():
    host = _model()
    host[2].bias.requires_grad_(False)
    dev_model, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.1,
                                                 weight_decay=0.1))
    frozen = dev_model[2].bias.detach().clone()
    _train_device(dev_model, dev_opt, _batches(n=2))
    assert torch.equal(dev_model[2].bias, frozen)
    assert all(p.grad is None for p in dev_model.parameters())
    # torch does not count a step for a parameter without gradient either.
    steps = dev_opt.read_state()["ipu_state"]
    assert steps["Step___2.bias"].item() == 0
    assert steps["Step___2.weight"].item() == 2


def test_param_not_in_model_is_an_error():
    host = _model()
    stray = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="not a parameter of the model"):
        _on_device(host, P.SGD(list(host.parameters()) + [stray], lr=0.1))


def test_write_state_errors():
    host = _model()
    _, dev_opt = _on_device(host, P.Adam(host.parameters()))
    with pytest.raises(ValueError, match="no state of that name"):
        dev_opt.write_state({"Accl1___missing": torch.zeros(1)})
    with pytest.raises(ValueError, match="has shape"):
        dev_opt.write_state({"Accl1___0.weight": torch.zeros(2)})
    with pytest.raises(TypeError, match="dict of tensors"):
        dev_opt.write_state(None)


def test_step_rejects_non_positive_divisor():
    host = _model()
    _, dev_opt = _on_device(host, P.SGD(host.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="grad_divisor must be positive"):
        dev_opt.step(0)


def test_invalid_optimizer_rejected_by_the_device():
    host = _model()
    with pytest.raises(ValueError, match="non-amsgrad"):
        _on_device(host, T.Adam(host.parameters(), amsgrad=True))


def test_infinite_max_grad_norm_is_default():
    assert P.SGD([torch.zeros(1, requires_grad=True)]).max_grad_norm == \
        math.inf
