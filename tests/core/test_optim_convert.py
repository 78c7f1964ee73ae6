"""Conversion of host optimizers for the device (spec 6.3 / 6.4)."""
import logging

import pytest
import torch

import poptorch
from poptorch_core.optim._attributes import OptimizerAttrTracker, \
    convertOptimizerToDict
# Shared with the class tests: a log-capturing fixture and small parameters.
from .test_optim import _params, poptorch_log  # noqa: F401

P, T = poptorch.optim, torch.optim
HALF = torch.float16
SUBCLASS_WARNING = "Poptorch does not run Python optimizer code directly"


def _convert(opt, options=None, is_compiled=False, tracker=None):
    options = options or poptorch.Options()
    tracker = tracker or OptimizerAttrTracker(options)
    return convertOptimizerToDict(opt, tracker, options, is_compiled)


def _values(section):
    return {name: value for name, (value, _) in section.items()}


@pytest.mark.parametrize("factory,expected", [
    (lambda p: T.SGD(p, lr=0.1), "SGD2"),
    (lambda p: P.SGD(p, lr=0.1), "SGD2"),
    (lambda p: P.SGD(p, lr=0.1, use_combined_accum=True), "SGD1"),
    (lambda p: T.Adam(p), "ADAM"),
    (lambda p: P.Adam(p), "ADAM"),
    (lambda p: T.Adam(p, decoupled_weight_decay=True), "ADAMW"),
    (lambda p: T.AdamW(p), "ADAMW"),
    (lambda p: P.AdamW(p), "ADAMW"),
    (lambda p: P.AdamW(p, bias_correction=False), "ADAMW_NO_BIAS"),
    (lambda p: T.RMSprop(p), "RMSPROP"),
    (lambda p: P.RMSprop(p, centered=True), "RMSPROP_CENTERED"),
    (lambda p: P.LAMB(p), "LAMB"),
    (lambda p: P.LAMB(p, bias_correction=False), "LAMB_NO_BIAS"),
])
def test_type_mapping(factory, expected):
    assert _convert(factory(_params()))["type"] == expected


def test_unsupported_type_asserts():
    with pytest.raises(AssertionError, match="Unsupported optimizer type. "
                       "Types supported"):
        _convert(T.Adagrad(_params()))


@pytest.mark.parametrize("native,ours", [
    (lambda p: T.SGD(p, lr=0.1, momentum=0.9), lambda p: P.SGD(
        p, lr=0.1, momentum=0.9)),
    (lambda p: T.AdamW(p, lr=0.01), lambda p: P.AdamW(p, lr=0.01)),
    (lambda p: T.RMSprop(p, alpha=0.5), lambda p: P.RMSprop(p, alpha=0.5)),
])
def test_native_optimizer_has_poptorch_defaults(native, ours):
    a, b = _convert(native(_params())), _convert(ours(_params()))
    assert a["type"] == b["type"]
    for section in ("attributes", "defaults"):
        assert _values(a[section]) == _values(b[section])
    assert [_values(g) for g in a["groups"]] == \
        [_values(g) for g in b["groups"]]
    assert _values(a["attributes"])["loss_scaling"] == 1.0


def test_description_is_comparable():
    opt = P.SGD(_params(), lr=0.1, momentum=0.9)
    options = poptorch.Options()
    tracker = OptimizerAttrTracker(options)
    first = convertOptimizerToDict(opt, tracker, options, False)
    assert convertOptimizerToDict(opt, tracker, options, False) == first
    opt.param_groups[0]["lr"] = 0.05
    second = convertOptimizerToDict(opt, tracker, options, False)
    assert second != first
    assert second["groups"][0]["lr"] == (0.05, False)


def test_native_constness_rules():
    sgd = _convert(T.SGD(_params(), lr=0.1, momentum=0.9))["groups"][0]
    assert sgd["lr"] == (0.1, False)
    assert sgd["momentum"] == (0.9, False)
    assert sgd["weight_decay"] == (0, True)
    assert sgd["dampening"] == (0, True)
    assert sgd["nesterov"] == (False, True)
    assert sgd["velocity_scaling"] == (1.0, True)
    adamw = _convert(T.AdamW(_params(), eps=1e-6))["groups"][0]
    assert adamw["weight_decay"] == (1e-2, True)
    assert adamw["eps"] == (1e-6, False)
    assert adamw["betas"][1] is True
    adamw = _convert(T.AdamW(_params(), weight_decay=0.1))["groups"][0]
    assert adamw["weight_decay"] == (0.1, False)
    assert adamw["eps"] == (1e-8, True)
    rms = _convert(T.RMSprop(_params(), alpha=0.5))["groups"][0]
    assert rms["alpha"] == (0.5, True)
    native = T.SGD(_params(), lr=0.1)
    assert _convert(native)["attributes"]["loss_scaling"] == (1.0, True)
    native.loss_scaling = 2.0
    assert _convert(native)["attributes"]["loss_scaling"] == (2.0, False)


def test_poptorch_constness_follows_variable_attrs():
    opt = P.SGD(_params(), lr=0.1, weight_decay=0.0)
    desc = _convert(opt)
    assert desc["groups"][0]["weight_decay"] == (0.0, False)
    assert desc["groups"][0]["momentum"] == (0, True)
    assert desc["attributes"]["loss_scaling"] == (1.0, True)
    opt.variable_attrs.markAsVariable("momentum")
    assert _convert(opt)["groups"][0]["momentum"] == (0, False)


def test_automatic_loss_scaling_makes_loss_scaling_variable():
    options = poptorch.Options()
    options.Training.setAutomaticLossScaling(True)
    for opt in (P.Adam(_params()), T.Adam(_params())):
        desc = _convert(opt, options)
        assert desc["attributes"]["loss_scaling"] == (1.0, False)


@pytest.mark.parametrize("factory", [
    lambda p: T.SGD(p, lr=0.1), lambda p: T.AdamW(p), lambda p: T.Adam(p),
    lambda p: T.RMSprop(p), lambda p: P.SGD(p, lr=0.1), lambda p: P.AdamW(p),
    lambda p: P.LAMB(p)])
def test_plain_classes_do_not_warn(factory, poptorch_log):
    _convert(factory(_params()))
    assert SUBCLASS_WARNING not in poptorch_log.text


@pytest.mark.parametrize("base", [T.SGD, P.SGD, T.AdamW])
def test_user_subclass_warns(base, poptorch_log):
    class MyOptimizer(base):
        def step(self, closure=None):
            raise AssertionError("never called by PopTorch")

    _convert(MyOptimizer(_params(), lr=0.1))
    warnings = [r for r in poptorch_log.records
                if SUBCLASS_WARNING in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


def _unexpected_messages(caplog, level):
    return [r.getMessage() for r in caplog.records
            if "Ignoring unexpected" in r.getMessage() and r.levelno == level]


def test_unexpected_attributes_warn_once_after_first_conversion(poptorch_log):
    options = poptorch.Options()
    tracker = OptimizerAttrTracker(options)
    opt = P.SGD(_params(), lr=0.1)
    opt.my_counter = 0
    opt.param_groups[0]["my_tag"] = "a"
    convertOptimizerToDict(opt, tracker, options, False)
    assert _unexpected_messages(poptorch_log, logging.WARNING) == []
    opt.extra_attr = 1
    opt.param_groups[0]["group_extra"] = 2
    opt.defaults["default_extra"] = 3
    for _ in range(2):
        convertOptimizerToDict(opt, tracker, options, False)
    assert sorted(_unexpected_messages(poptorch_log, logging.WARNING)) == [
        "Ignoring unexpected optimizer attribute in SGD optimizer: "
        "['extra_attr']",
        "Ignoring unexpected optimizer default group variable in SGD "
        "optimizer: ['default_extra']",
        "Ignoring unexpected optimizer group 0 attribute in SGD optimizer: "
        "['group_extra']",
    ]


def test_relaxed_checks_log_at_debug(poptorch_log):
    options = poptorch.Options().relaxOptimizerAttributesChecks()
    tracker = OptimizerAttrTracker(options)
    opt = T.Adam(_params())
    convertOptimizerToDict(opt, tracker, options, False)
    opt.my_lr = 0.1
    convertOptimizerToDict(opt, tracker, options, False)
    assert _unexpected_messages(poptorch_log, logging.WARNING) == []
    assert _unexpected_messages(poptorch_log, logging.DEBUG) == [
        "Ignoring unexpected optimizer attribute in Adam optimizer: "
        "['my_lr']"]


def test_lr_scheduler_bookkeeping_is_expected(poptorch_log):
    options = poptorch.Options()
    tracker = OptimizerAttrTracker(options)
    opt = P.SGD(_params(), lr=0.1)
    convertOptimizerToDict(opt, tracker, options, False)
    scheduler = T.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    opt.step()
    scheduler.step()
    desc = convertOptimizerToDict(opt, tracker, options, False)
    assert desc["groups"][0]["lr"][0] == pytest.approx(0.05)
    assert _unexpected_messages(poptorch_log, logging.WARNING) == []


def test_amsgrad_is_rejected():
    for opt in (T.Adam(_params(), amsgrad=True),
                P.AdamW(_params(), amsgrad=True)):
        with pytest.raises(ValueError) as info:
            _convert(opt)
        assert str(info.value) == ("Only non-amsgrad Adam/AdamW optimizers "
                                   "are supported.")


def test_use_tf_variant_only_for_rmsprop():
    _convert(P.RMSprop(_params(), use_tf_variant=True))
    opt = P.SGD(_params(), lr=0.1)
    opt.use_tf_variant = True
    with pytest.raises(ValueError) as info:
        _convert(opt)
    assert str(info.value) == ("use_tf_variant is only available with "
                               "RMSProp optimizers.")


def test_rmsprop_groups_must_agree_on_centered():
    params = _params()
    opt = P.RMSprop([{"params": params[:1], "centered": True},
                     {"params": params[1:], "centered": False}])
    with pytest.raises(AssertionError, match="centered"):
        _convert(opt)


def test_accumulation_type_checked_at_conversion():
    opt = P.Adam(_params())
    opt.accum_type = torch.bfloat16
    with pytest.raises(AssertionError, match="Accumulation types must be "
                       "either torch.float32 or torch.float16"):
        _convert(opt)


def test_optimizer_wide_attribute_in_a_group_is_rejected():
    opt = P.SGD(_params(), lr=0.1)
    opt.param_groups[0]["loss_scaling"] = 2.0
    with pytest.raises(ValueError, match=r"\['loss_scaling'\] found in "
                       r"optimizer.param_groups\[0\]"):
        _convert(opt)


def test_half_accumulator_switches_to_running_mean():
    Running = poptorch.MeanReductionStrategy.Running
    options = poptorch.Options()
    options._freeze()
    _convert(P.SGD(_params(), lr=0.1, accum_type=HALF), options)
    assert options.Training.meanAccumulationAndReplicationReductionStrategy \
        == Running
    assert options._is_frozen
    # Already Running: fine after compilation too.
    _convert(P.SGD(_params(), lr=0.1, accum_type=HALF), options, True)


def test_half_accumulator_after_compilation_is_an_error():
    options = poptorch.Options()
    with pytest.raises(ValueError) as info:
        _convert(P.SGD(_params(), lr=0.1, accum_type=HALF), options, True)
    assert str(info.value) == (
        "Invalid optimizer: the new optimizer would require changing "
        "options.Training.meanAccumulationAndReplicationReductionStrategy to "
        "poptorch.MeanReductionStrategy.Running but the executable is "
        "already compiled.")


@pytest.mark.parametrize("factory", [
    lambda p: P.SGD(p, lr=0.1, use_combined_accum=True, accum_type=HALF),
    lambda p: P.Adam(p, accum_type=HALF)])
def test_half_accumulator_of_other_variants_keeps_post_mean(factory):
    options = poptorch.Options()
    _convert(factory(_params()), options, True)
    assert options.Training.meanAccumulationAndReplicationReductionStrategy \
        == poptorch.MeanReductionStrategy.Post
