"""The device optimizer's state as PopTorch users see it: PopART's names for
each optimizer's state tensors, the dtypes the accumulation types ask for,
the debug lines PopTorch logs, and the arithmetic edge values (a divisor or
loss scale of 2, a weight decay or momentum of 1, a clip norm that does not
bind) against torch's optimizers."""
import logging

import pytest
import torch

import poptorch
from poptorch_core._logging import logger
from .test_optim_device import (_assert_same_params, _batches, _compare,
                                _model, _on_device, _train_device)

P, T = poptorch.optim, torch.optim
HALF = torch.float16


def _state_after_one_step(opt_factory):
    host = _model()
    dev_model, dev_opt = _on_device(host, opt_factory(host.parameters()))
    _train_device(dev_model, dev_opt, _batches(n=1))
    return dev_opt.read_state()["ipu_state"], [
        name for name, _ in host.named_parameters()]


@pytest.mark.parametrize("factory,prefixes", [
    # SGD with a combined accumulator (SGD1) keeps PopART's "Accl".
    (lambda p: P.SGD(p, lr=0.1, momentum=0.9, use_combined_accum=True),
     {"Accl"}),
    (lambda p: P.SGD(p, lr=0.1, momentum=0.9), {"Accl1"}),
    (lambda p: P.RMSprop(p, lr=0.01), {"Accl1"}),
    (lambda p: P.RMSprop(p, lr=0.01, momentum=0.9), {"Accl1", "Accl3"}),
    (lambda p: P.RMSprop(p, lr=0.01, centered=True), {"Accl1", "Accl2"}),
    (lambda p: P.RMSprop(p, lr=0.01, momentum=0.9, centered=True),
     {"Accl1", "Accl2", "Accl3"}),
    (lambda p: P.LAMB(p, lr=0.01), {"Accl1", "Accl2", "Step"}),
], ids=["sgd1", "sgd2", "rmsprop", "rmsprop_momentum", "rmsprop_centered",
        "rmsprop_centered_momentum", "lamb"])
def test_state_tensors_have_popart_names(factory, prefixes):
    state, names = _state_after_one_step(factory)
    assert set(state) == {f"{prefix}___{name}" for prefix in prefixes
                          for name in names}


def test_rmsprop_state_holds_torch_values_under_popart_names():
    """Accl1 is the mean square, Accl2 the mean gradient, Accl3 the
    momentum buffer: the values torch's RMSprop keeps under its names."""
    state, names = _state_after_one_step(
        lambda p: P.RMSprop(p, lr=0.01, momentum=0.9, centered=True))
    ref = _model()
    opt = T.RMSprop(ref.parameters(), lr=0.01, momentum=0.9, centered=True)
    x, y = _batches(n=1)[0]
    torch.nn.functional.mse_loss(ref(x), y).backward()
    opt.step()
    for name, param in zip(names, ref.parameters()):
        torch_state = opt.state[param]
        for prefix, key in (("Accl1", "square_avg"), ("Accl2", "grad_avg"),
                            ("Accl3", "momentum_buffer")):
            torch.testing.assert_close(state[f"{prefix}___{name}"],
                                       torch_state[key])


@pytest.mark.parametrize("factory,expected", [
    (lambda p: P.Adam(p, lr=0.01, second_order_momentum_accum_type=HALF),
     {"Accl1": torch.float32, "Accl2": HALF}),
    (lambda p: P.RMSprop(p, lr=0.01, momentum=0.9, centered=True,
                         first_order_momentum_accum_type=HALF),
     {"Accl1": torch.float32, "Accl2": HALF, "Accl3": HALF}),
    (lambda p: P.RMSprop(p, lr=0.01, momentum=0.9, centered=True,
                         second_order_momentum_accum_type=HALF),
     {"Accl1": HALF, "Accl2": torch.float32, "Accl3": torch.float32}),
    (lambda p: P.SGD(p, lr=0.1, momentum=0.9, use_combined_accum=True,
                     velocity_accum_type=HALF), {"Accl": HALF}),
], ids=["adam_second", "rmsprop_first", "rmsprop_second", "sgd1_velocity"])
def test_accumulation_types_set_each_state_dtype(factory, expected):
    state, names = _state_after_one_step(factory)
    for name in names:
        for prefix, dtype in expected.items():
            assert state[f"{prefix}___{name}"].dtype == dtype, prefix


def test_loaded_state_takes_the_slot_dtype():
    """A float32 state loaded into a float16 slot is stored as float16."""
    factory = (lambda p: P.Adam(p, lr=0.01,
                                first_order_momentum_accum_type=HALF))
    state, _ = _state_after_one_step(factory)
    host = _model()
    _, dev_opt = _on_device(host, factory(host.parameters()))
    dev_opt.write_state({k: v.float() for k, v in state.items()})
    read = dev_opt.read_state()["ipu_state"]
    assert read["Accl1___0.weight"].dtype == HALF
    torch.testing.assert_close(read["Accl1___0.weight"],
                               state["Accl1___0.weight"])


def test_rmsprop_mean_square_starts_at_zero_unless_tf_variant():
    for tf_variant, fill in ((None, 0.0), (True, 1.0)):
        host = _model()
        _, dev_opt = _on_device(host, P.RMSprop(
            host.parameters(), lr=0.01, use_tf_variant=tf_variant))
        for key, value in dev_opt.read_state()["ipu_state"].items():
            assert torch.all(value == fill), key


@pytest.mark.parametrize("popt,topt", [
    (lambda p: P.SGD(p, lr=0.01, weight_decay=1.0),
     lambda p: T.SGD(p, lr=0.01, weight_decay=1.0)),
    (lambda p: P.SGD(p, lr=0.01, momentum=1.0),
     lambda p: T.SGD(p, lr=0.01, momentum=1.0)),
    (lambda p: P.Adam(p, lr=0.01, weight_decay=1.0),
     lambda p: T.Adam(p, lr=0.01, weight_decay=1.0)),
    (lambda p: P.Adam(p, lr=0.01, weight_decay=0.1),
     lambda p: T.Adam(p, lr=0.01, weight_decay=0.1)),
    (lambda p: T.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
     lambda p: T.RMSprop(p, lr=0.01, momentum=0.5, centered=True)),
], ids=["sgd_weight_decay_1", "sgd_momentum_1", "adam_weight_decay_1",
        "adam_weight_decay", "native_rmsprop"])
def test_edge_hyper_parameters_match_torch(popt, topt):
    dev_model, ref = _compare(popt, topt)
    _assert_same_params(dev_model, ref)


@pytest.mark.parametrize("config", ["sgd", "adam"])
def test_a_divisor_and_loss_scale_of_two_are_applied(config):
    """Two micro-batches averaged (divisor 2) under a loss scale of 2."""
    popt = {"sgd": lambda p: P.SGD(p, lr=0.1, loss_scaling=2.0),
            "adam": lambda p: P.Adam(p, lr=0.01, loss_scaling=2.0)}[config]
    topt = {"sgd": lambda p: T.SGD(p, lr=0.1),
            "adam": lambda p: T.Adam(p, lr=0.01)}[config]
    dev_model, ref = _compare(popt, topt, micro_batches=2, mean=True)
    _assert_same_params(dev_model, ref)


def test_a_clip_norm_that_does_not_bind_leaves_gradients_alone():
    dev_model, ref = _compare(
        lambda p: P.SGD(p, lr=0.1, max_grad_norm=1e3),
        lambda p: T.SGD(p, lr=0.1))
    _assert_same_params(dev_model, ref)


@pytest.fixture
def debug_lines(log_records):
    """``log_records`` with the logger at DEBUG for the test."""
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield log_records
    logger.setLevel(level)


def _groups_of(records):
    return [r.getMessage() for r in records
            if r.getMessage().startswith("Updating group")]


def test_group_settings_are_logged_as_popart_does(debug_lines):
    host = _model()
    params = list(host.parameters())
    _on_device(host, P.SGD([{"params": params[:2]},
                            {"params": params[2:], "lr": 0.5}],
                           lr=0.1, momentum=0.9, loss_scaling=4.0,
                           use_combined_accum=True, velocity_scaling=2.0))
    first, second = _groups_of(debug_lines)
    assert first.startswith("Updating group 0 optimizer with SGD1: lr=0.1, ")
    assert second.startswith("Updating group 1 optimizer with SGD1: lr=0.5, ")
    for line in (first, second):
        assert "momentum=0.9" in line and "velocity_scaling" not in line
        assert line.endswith("lossScaling=4, defaultVelocityScaling=2")
    debug_lines.clear()
    # The separate-accumulator variant scales the velocity by the loss scale.
    _on_device(host, P.SGD(host.parameters(), lr=0.1, momentum=0.9,
                           loss_scaling=8.0))
    (line,) = _groups_of(debug_lines)
    assert line.startswith("Updating group 0 optimizer with SGD2: ")
    assert line.endswith("lossScaling=8, defaultVelocityScaling=8")
    debug_lines.clear()
    _on_device(host, P.Adam(host.parameters(), lr=0.01))
    (line,) = _groups_of(debug_lines)
    assert line.startswith("Updating group 0 optimizer with ADAM: lr=0.01")
    assert line.endswith("lossScaling=1")


def test_nothing_is_logged_above_debug(debug_lines):
    logger.setLevel(logging.INFO)
    host = _model()
    _on_device(host, P.Adam(host.parameters(), lr=0.01))
    assert _groups_of(debug_lines) == []


def test_a_changed_optimizer_type_is_logged(debug_lines):
    host = _model()
    _, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01))
    dev_opt.update_from_host(P.SGD(host.parameters(), lr=0.1, momentum=0.9))
    assert "Optimizer type changed from ADAM to SGD2: resetting the " \
        "optimizer state" in [r.getMessage() for r in debug_lines]


def test_a_state_loaded_before_its_slot_exists_takes_the_slot_dtype():
    """SGD's momentum buffer is made by the first step; a state loaded
    before it is stored in the velocity accumulation type."""
    host = _model()
    _, dev_opt = _on_device(host, P.SGD(host.parameters(), lr=0.1,
                                        momentum=0.9,
                                        velocity_accum_type=HALF))
    assert dev_opt.read_state()["ipu_state"] == {}
    value = torch.randn_like(host[0].weight)
    dev_opt.write_state({"Accl1___0.weight": value})
    loaded = dev_opt.read_state()["ipu_state"]["Accl1___0.weight"]
    assert loaded.dtype == HALF
    torch.testing.assert_close(loaded, value.half())


def test_the_loss_scale_update_factor_is_loaded_with_the_state():
    host = _model()
    _, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01,
                                         loss_scaling=2.0),
                            auto_loss_scaling=True)
    value = torch.randn_like(host[0].weight)
    # The factor first: the tensors after it must still be loaded.
    dev_opt.write_state({"lossScaleUpdateFactor": torch.tensor(4.0),
                         "Accl1___0.weight": value})
    assert dev_opt.loss_scaling == 8.0
    state = dev_opt.read_state()["ipu_state"]
    assert state["lossScaleUpdateFactor"].item() == 4.0
    torch.testing.assert_close(state["Accl1___0.weight"], value)


def test_a_torch_state_entry_the_optimizer_lacks_is_named():
    host = _model()
    _, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01))
    weight = host[0].weight
    with pytest.raises(ValueError) as error:
        dev_opt.write_torch_state(
            {weight: {"max_exp_avg_sq": torch.zeros_like(weight)}})
    assert str(error.value) == (
        "Cannot load the optimizer state entry 'max_exp_avg_sq' into a ADAM "
        "optimizer: it has no such state. Load a state from the same "
        "optimizer type (amsgrad is not supported).")


def test_an_integer_step_of_an_old_torch_state_is_loaded_as_float():
    """torch before 1.12 kept Adam's step as a Python int."""
    host = _model()
    _, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01))
    weight = host[0].weight
    exp_avg = torch.randn_like(weight)
    dev_opt.write_torch_state({weight: {
        "exp_avg": exp_avg, "exp_avg_sq": exp_avg.abs(), "step": 3}})
    state = dev_opt.read_state()["ipu_state"]
    assert state["Step___0.weight"].dtype == torch.float32
    assert state["Step___0.weight"].item() == 3.0
    torch.testing.assert_close(state["Accl1___0.weight"], exp_avg)


def test_a_state_that_is_not_a_dict_is_named():
    host = _model()
    _, dev_opt = _on_device(host, P.Adam(host.parameters(), lr=0.01))
    with pytest.raises(TypeError,
                       match="^ipu_state must be a dict of tensors, got list$"):
        dev_opt.write_state([torch.zeros(1)])
