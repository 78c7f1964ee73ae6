"""poptorch.optim classes: signatures, defaults, variable attributes,
pickling, state dicts and LAMB's CPU step."""
import copy
import inspect
import logging
import math
import pickle

import pytest
import torch

import poptorch
import poptorch_core
from poptorch_core._logging import logger
from ._reference_optim import LambReference

P, T = poptorch.optim, torch.optim
HALF = torch.float16
# The extra arguments in the order the spec (6.2) lists them.
EXTRAS = {
    P.SGD: ["loss_scaling", "velocity_scaling", "use_combined_accum",
            "accum_type", "velocity_accum_type", "max_grad_norm"],
    P.Adam: ["loss_scaling", "accum_type", "first_order_momentum_accum_type",
             "second_order_momentum_accum_type", "max_grad_norm"],
    P.AdamW: ["loss_scaling", "bias_correction", "accum_type",
              "first_order_momentum_accum_type",
              "second_order_momentum_accum_type", "max_grad_norm"],
    P.RMSprop: ["loss_scaling", "accum_type",
                "first_order_momentum_accum_type",
                "second_order_momentum_accum_type", "use_tf_variant"],
}
TORCH_CLASS = {P.SGD: T.SGD, P.Adam: T.Adam, P.AdamW: T.AdamW,
               P.RMSprop: T.RMSprop}
ALL_CLASSES = [P.SGD, P.Adam, P.AdamW, P.RMSprop, P.LAMB]


@pytest.fixture
def poptorch_log(caplog, monkeypatch):
    monkeypatch.setattr(logger, "propagate", True)
    caplog.set_level(logging.DEBUG, logger="poptorch::python")
    return caplog


def _params():
    return [torch.nn.Parameter(torch.randn(3, 2)),
            torch.nn.Parameter(torch.randn(2))]


def test_public_names():
    import poptorch.optim as alias
    for name in ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "LAMB",
                 "VariableAttributes"]:
        assert getattr(alias, name) is getattr(poptorch_core.optim, name)
    assert alias is poptorch_core.optim


@pytest.mark.parametrize("cls", list(EXTRAS))
def test_signature_is_torch_then_extras(cls):
    ours = inspect.signature(cls.__init__).parameters
    theirs = inspect.signature(TORCH_CLASS[cls].__init__).parameters
    assert list(ours) == list(theirs) + EXTRAS[cls]
    for name, param in theirs.items():
        assert ours[name].kind == param.kind
    assert all(p.default is None for p in list(ours.values())[2:])


def test_lamb_signature():
    params = inspect.signature(P.LAMB.__init__).parameters
    assert list(params) == [
        "self", "params", "lr", "betas", "eps", "weight_decay",
        "bias_correction", "loss_scaling", "max_weight_norm", "accum_type",
        "first_order_momentum_accum_type", "second_order_momentum_accum_type"]
    assert all(p.default is None for p in list(params.values())[2:])


@pytest.mark.parametrize("cls", ALL_CLASSES)
def test_class_hierarchy(cls):
    opt = cls(_params())
    assert isinstance(opt, P.Optimizer)
    assert isinstance(opt, TORCH_CLASS.get(cls, T.Optimizer))


@pytest.mark.parametrize("cls", list(EXTRAS))
def test_none_means_torch_default(cls):
    ours, theirs = cls(_params()), TORCH_CLASS[cls](_params())
    assert ours.defaults == theirs.defaults
    assert ours.loss_scaling == 1.0
    for name in EXTRAS[cls]:
        if name.endswith("accum_type"):
            assert getattr(ours, name) == torch.float32


def test_extra_defaults():
    assert P.SGD(_params()).max_grad_norm == math.inf
    assert P.SGD(_params()).use_combined_accum is False
    assert P.AdamW(_params()).bias_correction is True
    assert P.RMSprop(_params()).use_tf_variant is False
    lamb = P.LAMB(_params())
    assert lamb.defaults == {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                             "weight_decay": 1e-2, "max_weight_norm": 65500.0}
    assert lamb.bias_correction is True and lamb.loss_scaling == 1.0
    assert P.LAMB(_params(), max_weight_norm=None).defaults[
        "max_weight_norm"] == 65500.0


def test_explicit_arguments_are_variable():
    opt = P.SGD(_params(), lr=0.1, momentum=0.0, loss_scaling=2.0)
    attrs = opt.variable_attrs
    assert not attrs.isConstant("lr")
    assert not attrs.isConstant("momentum")  # passed, even at its default
    assert not attrs.isConstant("loss_scaling")
    assert attrs.isConstant("weight_decay")
    assert attrs.isConstant("dampening")
    attrs.markAsVariable("weight_decay")
    assert not attrs.isConstant("weight_decay")
    attrs.markAsConstant("lr")
    assert attrs.isConstant("lr")


def test_unknown_variable_attribute_asserts():
    opt = P.Adam(_params())
    allowed = list(opt.defaults) + ["loss_scaling"]
    with pytest.raises(AssertionError) as info:
        opt.variable_attrs.markAsVariable("momentum")
    assert str(info.value) == (f"Unknown attribute momentum, allowed values: "
                               f"{allowed}")
    with pytest.raises(AssertionError, match="Unknown attribute accum_type"):
        opt.variable_attrs.markAsConstant("accum_type")


def test_lamb_variable_attributes():
    opt = P.LAMB(_params(), lr=0.1, max_weight_norm=10.0)
    assert not opt.variable_attrs.isConstant("max_weight_norm")
    assert opt.variable_attrs.isConstant("betas")
    opt.variable_attrs.markAsVariable("loss_scaling")


@pytest.mark.parametrize("cls,name", [
    (cls, name) for cls in ALL_CLASSES
    for name in inspect.signature(cls.__init__).parameters
    if name.endswith("accum_type")])
def test_accumulation_types_must_be_half_or_float(cls, name):
    cls(_params(), **{name: HALF})
    with pytest.raises(AssertionError) as info:
        cls(_params(), **{name: torch.float64})
    assert str(info.value) == ("Accumulation types must be either "
                               "torch.float32 or torch.float16")


def test_velocity_scaling(poptorch_log):
    combined = P.SGD(_params(), lr=0.1, use_combined_accum=True,
                     velocity_scaling=2.0)
    assert combined.defaults["velocity_scaling"] == 2.0
    assert all(g["velocity_scaling"] == 2.0 for g in combined.param_groups)
    assert not combined.variable_attrs.isConstant("velocity_scaling")
    assert "velocity_scaling value ignored" not in poptorch_log.text
    separate = P.SGD(_params(), lr=0.1, velocity_scaling=2.0)
    assert "velocity_scaling value ignored" in poptorch_log.text
    assert "velocity_scaling" not in separate.defaults
    assert "velocity_scaling" not in vars(separate)


def _custom(cls):
    extra = {"loss_scaling": 4.0, "accum_type": HALF}
    if cls is P.AdamW:
        extra["bias_correction"] = False
    if cls is P.RMSprop:
        extra["use_tf_variant"] = True
    return cls(_params(), lr=0.5, **extra)


def _assert_same_optimizer(a, b):
    assert type(a) is type(b)
    assert a.loss_scaling == b.loss_scaling == 4.0
    assert a.accum_type == b.accum_type == HALF
    for name in ("bias_correction", "use_tf_variant", "max_grad_norm"):
        assert getattr(a, name, None) == getattr(b, name, None)
    # torch's unpickling adds differentiable=False to the defaults.
    assert all(b.defaults[k] == v for k, v in a.defaults.items())
    assert [g["lr"] for g in a.param_groups] == \
        [g["lr"] for g in b.param_groups]
    for attr in a.variable_attrs._allowed_attributes:
        assert a.variable_attrs.isConstant(attr) == \
            b.variable_attrs.isConstant(attr)
    assert not b.variable_attrs.isConstant("lr")


@pytest.mark.parametrize("cls", ALL_CLASSES)
@pytest.mark.parametrize("clone", [copy.copy, copy.deepcopy,
                                   lambda o: pickle.loads(pickle.dumps(o))])
def test_copy_and_pickle_keep_extra_attributes(cls, clone):
    opt = _custom(cls)
    opt._device_state_source = lambda: {}  # bound to an executor: not copied
    copied = clone(opt)
    _assert_same_optimizer(opt, copied)
    assert copied._device_state_source is None
    assert copied.get_state_dict()["ipu_state"] is None


def test_state_dict_before_any_device():
    opt = P.SGD(_params(), lr=0.1)
    state = opt.state_dict()
    assert set(state) == {"ipu_state", "ipu_param", "state", "param_groups"}
    assert state["ipu_state"] is None and state["ipu_param"] is None
    assert not opt.has_state()
    assert state["param_groups"] == T.SGD(_params(), lr=0.1).state_dict()[
        "param_groups"]


def test_load_state_dict_errors():
    opt = P.Adam(_params())
    with pytest.raises(RuntimeError) as info:
        opt.load_state_dict({})
    assert str(info.value) == ("Cannot load optimizer state dictionary "
                               "because it is empty.")
    with pytest.raises(RuntimeError) as info:
        opt.load_state_dict({"ipu_state": {}})
    assert str(info.value) == ("Only IPU optimizer states can be loaded onto "
                               "the IPU.")
    assert not opt.ipu_state_is_dirty
    # Deliberate deviation: a torch optimizer's state dict is accepted (it
    # is converted to the IPU's names when written to the device).
    opt.load_state_dict(T.Adam(_params()).state_dict())
    assert opt.ipu_state_is_dirty


def test_load_state_dict_marks_ipu_state_dirty_and_restores_torch_part():
    source = P.SGD(_params(), lr=0.1, momentum=0.9)
    source._state_dict = {"ipu_state": {"Accl1___w": torch.ones(2)},
                          "ipu_param": {"lossScaling_FLOAT": torch.tensor(1.)}}
    scheduler = T.lr_scheduler.StepLR(source, step_size=1, gamma=0.5)
    source.step()
    scheduler.step()
    saved = source.state_dict()
    target = P.SGD(_params(), lr=0.1, momentum=0.9)
    target.load_state_dict(saved)
    assert target.ipu_state_is_dirty and target.has_state()
    assert torch.equal(target.state_dict()["ipu_state"]["Accl1___w"],
                       torch.ones(2))
    assert target.param_groups[0]["lr"] == pytest.approx(0.05)


def test_device_state_source_is_read_once_per_run(poptorch_log):
    reads = []

    def source():
        reads.append(1)
        return {"ipu_state": {"Step___w": torch.tensor(float(len(reads)))},
                "ipu_param": {}}

    opt = P.Adam(_params())
    opt._device_state_source = source
    opt.host_state_is_dirty = True
    first = opt.state_dict()
    assert len(reads) == 1 and not opt.host_state_is_dirty
    assert first["ipu_state"]["Step___w"].item() == 1
    assert "Writing optimiser state tensors from IPU to host." in \
        poptorch_log.messages
    opt.state_dict()
    assert len(reads) == 1
    assert "Using cached optimiser state dict" in poptorch_log.messages
    opt.host_state_is_dirty = True  # another run
    assert opt.state_dict()["ipu_state"]["Step___w"].item() == 2


def test_cpu_step_is_torchs():
    torch.manual_seed(0)
    a = _params()
    torch.manual_seed(0)
    b = _params()
    ours, theirs = P.SGD(a, lr=0.1, momentum=0.9, loss_scaling=8.0), \
        T.SGD(b, lr=0.1, momentum=0.9)
    for _ in range(3):
        for params, opt in ((a, ours), (b, theirs)):
            opt.zero_grad()
            sum((p**2).sum() for p in params).backward()
            opt.step()
    for pa, pb in zip(a, b):
        torch.testing.assert_close(pa, pb)


@pytest.mark.parametrize("kwargs", [
    dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
         bias_correction=True, max_weight_norm=65500.0),
    dict(lr=0.1, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.0,
         bias_correction=False, max_weight_norm=0.5),
])
def test_lamb_step_matches_the_formula(kwargs):
    torch.manual_seed(0)
    start = [torch.randn(4, 3), torch.zeros(3)]  # a zero weight: trust 1
    grads = [[torch.randn(4, 3), torch.randn(3)] for _ in range(4)]
    params = [torch.nn.Parameter(p.clone()) for p in start]
    opt = P.LAMB(params, **kwargs)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()
    expected = [torch.nn.Parameter(p.clone()) for p in start]
    reference = LambReference(expected, **kwargs)
    for step_grads in grads:
        for p, g in zip(expected, step_grads):
            p.grad = g.clone()
        reference.step()
    for got, want in zip(params, expected):
        torch.testing.assert_close(got.detach(), want, rtol=1e-5, atol=1e-6)


def test_lamb_step_closure_and_missing_grads():
    params = _params()
    opt = P.LAMB(params, lr=0.1)
    before = [p.detach().clone() for p in params]
    params[0].grad = torch.ones_like(params[0])
    assert opt.step(lambda: torch.tensor(3.0)).item() == 3.0
    assert not torch.equal(params[0], before[0])
    assert torch.equal(params[1], before[1])
