"""PopTorch semantics that upstream scripts and tests rely on (issue 46,
item 3): optimizer state written through ``load_state_dict``, complete or
not, for every optimizer; ``setOptimizer`` with options frozen by
compilation; BeginBlock through copies, saving and ``removeBlocks``; dict
inputs; AdamW without bias correction; ``F.one_hot``'s class count; and
config-file syntax errors.

References are eager torch optimizers (or the update rule written out in
``_reference_optim``) stepping copies of the same model on the same data,
eager models, and the texts PopTorch raises.
"""
import copy
import io
import pickle
import re

import pytest
import torch

import poptorch
from ._models import LinearMSE
from ._reference_optim import AdamWNoBiasReference, LambReference


def _data(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g)


def _eager_step(model, optimizer, step):
    optimizer.zero_grad()
    model(*_data(step))[1].backward()
    optimizer.step()


def _assert_same_weights(a, b):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), msg=name)


# --- 1. Optimizer state through load_state_dict ------------------------------

_ADAM_NAMES = {"Accl1": "exp_avg", "Accl2": "exp_avg_sq", "Step": "step"}
_RMSPROP_NAMES = {"Accl1": "square_avg", "Accl2": "grad_avg",
                  "Accl3": "momentum_buffer"}
_LAMB_NAMES = {"Accl1": "m", "Accl2": "v", "Step": "t"}

# id -> (PopTorch optimizer, eager reference, PopART prefix -> reference
# state key). The references are torch's optimizers, or PopTorch's rule
# written out where torch has no such optimizer.
OPTIMIZERS = {
    "sgd": (lambda p: poptorch.optim.SGD(p, lr=0.1),
            lambda p: torch.optim.SGD(p, lr=0.1), {}),
    "sgd_momentum": (
        lambda p: poptorch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.2,
                                     weight_decay=0.01),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.2,
                                  weight_decay=0.01),
        {"Accl1": "momentum_buffer"}),
    "sgd_velocity_scaling": (
        lambda p: poptorch.optim.SGD(p, lr=0.1, momentum=0.9,
                                     use_combined_accum=True,
                                     velocity_scaling=4.0),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        {"Accl": "momentum_buffer"}),
    "adam": (lambda p: poptorch.optim.Adam(p, lr=0.05),
             lambda p: torch.optim.Adam(p, lr=0.05), _ADAM_NAMES),
    "adamw": (lambda p: poptorch.optim.AdamW(p, lr=0.05, weight_decay=0.1),
              lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1),
              _ADAM_NAMES),
    "adamw_no_bias": (
        lambda p: poptorch.optim.AdamW(p, lr=0.05, weight_decay=0.1,
                                       bias_correction=False),
        lambda p: AdamWNoBiasReference(p, lr=0.05, weight_decay=0.1),
        _ADAM_NAMES),
    "lamb": (lambda p: poptorch.optim.LAMB(p, lr=0.05),
             lambda p: LambReference(p, lr=0.05), _LAMB_NAMES),
    "lamb_no_bias": (
        lambda p: poptorch.optim.LAMB(p, lr=0.05, bias_correction=False),
        lambda p: LambReference(p, lr=0.05, bias_correction=False),
        _LAMB_NAMES),
    "rmsprop": (
        lambda p: poptorch.optim.RMSprop(p, lr=0.01, momentum=0.5,
                                         centered=True),
        lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5,
                                      centered=True),
        _RMSPROP_NAMES),
}


def _reference_value(value):
    """A reference optimizer's state entry as a float32 tensor (LAMB's
    reference counts steps in a Python int)."""
    return torch.as_tensor(value, dtype=torch.float32)


def _reference_state(model, optimizer, names):
    """The reference optimizer's state under PopART's names."""
    return {f"{prefix}___{name}": _reference_value(
        optimizer.state[param][key])
        for name, param in model.named_parameters()
        for prefix, key in names.items() if key in optimizer.state[param]}


def _new_state(state, complete):
    """Different, valid values for a state: whole step counts, and
    ``Accl2`` (a second moment, or RMSprop's mean gradient) below every
    other entry (RMSprop's mean square must exceed the squared mean
    gradient). Without ``complete``, the bias has no entry and the weight
    only its first one."""
    g = torch.Generator().manual_seed(7)
    new = {}
    for key, value in state.items():
        if not complete and (key.endswith("fc.bias") or
                             not key.startswith(("Accl1", "Accl_"))):
            continue
        if key.startswith("Step"):
            new[key] = value + 3
        else:
            low = 0.0 if key.startswith("Accl2") else 0.5
            new[key] = torch.rand(value.shape, generator=g) * 0.5 + low
    return new


def _write_reference(model, optimizer, names, state):
    params = dict(model.named_parameters())
    for key, value in state.items():
        prefix, name = key.split("___")
        entry = optimizer.state[params[name]]
        if isinstance(entry.get(names[prefix]), int):   # LAMB's step count
            entry[names[prefix]] = int(value)
        else:
            entry[names[prefix]] = value.clone()


@pytest.mark.parametrize("complete", [True, False],
                         ids=["complete", "incomplete"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_loaded_optimizer_state_continues_as_eager(name, complete):
    make, make_reference, names = OPTIMIZERS[name]
    model = LinearMSE()
    reference = copy.deepcopy(model)
    optimizer = make(model.parameters())
    ref_opt = make_reference(reference.parameters())
    training = poptorch.trainingModel(model, optimizer=optimizer)
    for step in range(2):
        training(*_data(step))
        _eager_step(reference, ref_opt, step)
    saved = copy.deepcopy(optimizer.state_dict())
    torch.testing.assert_close(saved["ipu_state"],
                               _reference_state(reference, ref_opt, names))
    # Hyper-parameter tensors are float32 as on the IPU (a random fill
    # must work on each).
    assert {v.dtype for v in saved["ipu_param"].values()} == {torch.float32}
    # The device steps on, then a state read before that step is loaded.
    training(*_data(2))
    _eager_step(reference, ref_opt, 2)
    saved["ipu_state"] = _new_state(saved["ipu_state"], complete)
    optimizer.load_state_dict(saved)
    _write_reference(reference, ref_opt, names, saved["ipu_state"])
    # Read back before the next run: the loaded values, and the device's
    # for the entries the loaded state lacks.
    expected = _reference_state(reference, ref_opt, names)
    torch.testing.assert_close(optimizer.state_dict()["ipu_state"], expected)
    training(*_data(3))
    _eager_step(reference, ref_opt, 3)
    _assert_same_weights(model, reference)
    torch.testing.assert_close(optimizer.state_dict()["ipu_state"],
                               _reference_state(reference, ref_opt, names))


# --- 2. setOptimizer with options frozen by compilation -----------------------

RUNNING_REQUIRED = (
    "Invalid optimizer: the new optimizer would require changing "
    "options.Training.meanAccumulationAndReplicationReductionStrategy to "
    "poptorch.MeanReductionStrategy.Running but the executable is already "
    "compiled.")
POST, RUNNING = poptorch.MeanReductionStrategy.Post, \
    poptorch.MeanReductionStrategy.Running
HALF, FLOAT = torch.float16, torch.float32


@pytest.mark.parametrize("strategy, compiled_type, new_type, accepted", [
    (POST, FLOAT, HALF, False),     # Running needed, options frozen
    (RUNNING, FLOAT, HALF, True),   # already Running
    (POST, HALF, FLOAT, True),      # wrapping switched to Running
    (POST, HALF, HALF, True),
])
def test_set_optimizer_changes_the_accumulation_type_after_compilation(
        strategy, compiled_type, new_type, accepted):
    model = LinearMSE()
    reference = copy.deepcopy(model)
    opts = poptorch.Options()
    opts.Training.setMeanAccumulationAndReplicationReductionStrategy(strategy)
    training = poptorch.trainingModel(model, opts, poptorch.optim.SGD(
        model.parameters(), lr=0.1, accum_type=compiled_type))
    training.compile(*_data(0))
    # The model's own options switched for a float16 accumulator; the
    # user's stay as given, frozen.
    assert training.options.Training.\
        meanAccumulationAndReplicationReductionStrategy == \
        (RUNNING if compiled_type == HALF else strategy)
    assert opts.Training.meanAccumulationAndReplicationReductionStrategy \
        == strategy
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        opts.Training.setMeanAccumulationAndReplicationReductionStrategy(
            RUNNING)
    new = poptorch.optim.SGD(model.parameters(), lr=0.1, accum_type=new_type)
    if not accepted:
        with pytest.raises(ValueError) as info:
            training.setOptimizer(new)
        assert str(info.value) == RUNNING_REQUIRED
        return
    training.setOptimizer(new)
    training(*_data(0))
    # The new type applies: the reduced gradient is stored in it.
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(*_data(0))[1].backward()
    for param in reference.parameters():
        param.grad = param.grad.to(new_type).float()
    ref_opt.step()
    _assert_same_weights(model, reference)


def test_set_optimizer_changes_the_moment_types_after_compilation():
    model = LinearMSE()
    optimizer = poptorch.optim.Adam(model.parameters(), lr=0.01)
    training = poptorch.trainingModel(model, optimizer=optimizer)
    training(*_data(0))
    new = poptorch.optim.Adam(model.parameters(), lr=0.01,
                              first_order_momentum_accum_type=HALF)
    training.setOptimizer(new)
    training(*_data(1))
    state = new.state_dict()["ipu_state"]
    assert state["Accl1___fc.weight"].dtype == HALF
    assert state["Accl2___fc.weight"].dtype == FLOAT


# --- 3. BeginBlock through copies, saving and removeBlocks --------------------

class TwoIpus(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = poptorch.BeginBlock(torch.nn.Linear(4, 4), "b", ipu_id=1)

    def forward(self, x):
        out = self.b(torch.relu(self.a(x)))
        return out, poptorch.identity_loss(out.sum(), "mean")


def _duplicate(model, how):
    if how == "deepcopy":
        return copy.deepcopy(model)
    if how == "pickle":
        return pickle.loads(pickle.dumps(model))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _block_hooks(model):
    return {name: [repr(h) for h in m._forward_pre_hooks.values()]
            for name, m in model.named_modules() if m._forward_pre_hooks}


def _ipus_and_output(model, x):
    """The IPUs the compiled model uses and its output."""
    inference = poptorch.inferenceModel(
        model, poptorch.Options().deviceIterations(2))
    out = inference(x)[0]
    return inference.simulationReport().to_dict()["ipus_per_replica"], out


@pytest.mark.parametrize("wrapped", [False, True],
                         ids=["model", "trained_model"])
@pytest.mark.parametrize("how", ["deepcopy", "pickle", "torch.save"])
def test_begin_block_survives_copies_and_remove_blocks_strips_it(how,
                                                                  wrapped):
    model = TwoIpus()
    x = torch.randn(8, 4)
    if wrapped:
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(4)
        poptorch.trainingModel(model, opts)(x)
    twin = _duplicate(model, how)
    assert type(twin) is TwoIpus     # never PopTorch's wrapper class
    assert _block_hooks(twin) == _block_hooks(model) == {
        "b": ["BeginBlock(user_id=b, ipu_id=1)"]}
    _assert_same_weights(twin, model)   # the trained weights, if trained
    ipus, out = _ipus_and_output(twin, x)
    assert ipus == 2
    torch.testing.assert_close(out, twin(x)[0])
    poptorch.removeBlocks(twin)
    assert _block_hooks(twin) == {}
    assert _block_hooks(model) == {"b": ["BeginBlock(user_id=b, ipu_id=1)"]}
    ipus, out = _ipus_and_output(twin, x)
    assert ipus == 1
    torch.testing.assert_close(out, twin(x)[0])
    # Blocks can be given again once removed.
    poptorch.BeginBlock(twin.a, "a", ipu_id=1)
    assert _block_hooks(twin) == {"a": ["BeginBlock(user_id=a, ipu_id=1)"]}


# --- 4. Dict inputs --------------------------------------------------------------

class DictNet(torch.nn.Module):
    """Nested dicts, positional and keyword; writes into an input."""

    def forward(self, x, d, *, extra=None):
        d["b"]["c"] += 1.0
        out = x * d["a"] - d["b"]["c"] + 2 * d["b"]["e"]
        if extra is not None:
            out = out + 10 * extra["k"]
        return out, {"s": d["a"] + 1, "t": d["b"]["e"] * 3}


def _dict_inputs(seed):
    g = torch.Generator().manual_seed(seed)

    def rand():
        return torch.randn(4, 2, generator=g)

    return rand(), {"a": rand(), "b": {"c": rand(), "e": rand()}}, \
        {"k": rand()}


def _reordered(d):
    """The same dict (same tensors), keys in reverse order, recursively."""
    return {k: _reordered(v) if isinstance(v, dict) else v
            for k, v in reversed(list(d.items()))}


@pytest.mark.parametrize("call", ["positional", "keyword"])
@pytest.mark.parametrize("order", ["same", "reordered"])
def test_dict_inputs_match_eager(order, call):
    model = DictNet()
    inference = poptorch.inferenceModel(
        model, poptorch.Options().deviceIterations(2))
    inference(*_dict_inputs(0)[:2], extra=_dict_inputs(0)[2])   # compiles
    x, d, extra = _dict_inputs(1)
    eager_inputs = copy.deepcopy((x, d, extra))
    expected = model(eager_inputs[0], eager_inputs[1], extra=eager_inputs[2])
    if order == "reordered":
        d, extra = _reordered(d), _reordered(extra)
    if call == "positional":
        out = inference(x, d, extra=extra)
    else:
        out = inference(d=d, x=x, extra=extra)
    torch.testing.assert_close(out, expected)
    # The in-place change reached the caller's tensor.
    torch.testing.assert_close(d["b"]["c"], eager_inputs[1]["b"]["c"])


def test_dict_keyword_arguments_match_eager_in_any_order():
    class Kwargs(torch.nn.Module):
        def forward(self, **named):
            return named["a"] * 2 + named["b"]

    a, b = torch.randn(2, 3), torch.randn(2, 3)
    inference = poptorch.inferenceModel(Kwargs())
    inference(a=a, b=b)
    torch.testing.assert_close(inference(b=b, a=a), a * 2 + b)


# --- 5. AdamW without bias correction ----------------------------------------

def _adamw_runs(opts, model_factory=LinearMSE, **kwargs):
    """Weights after three IPU steps of poptorch's AdamW."""
    model = model_factory()
    start = copy.deepcopy(model)
    training = poptorch.trainingModel(
        model, opts, poptorch.optim.AdamW(model.parameters(), **kwargs))
    for step in range(3):
        training(*_data(step))
    return start, model


def _g2():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    return opts


class HalfFrozen(LinearMSE):
    def __init__(self):
        super().__init__()
        self.fc.bias.requires_grad_(False)


@pytest.mark.parametrize("opts, model_factory", [
    (None, LinearMSE),
    (_g2, LinearMSE),                 # two micro-batches per step
    (None, HalfFrozen),         # a parameter without gradient
], ids=["one_micro_batch", "accumulation", "frozen_bias"])
def test_adamw_without_bias_correction_follows_its_rule(opts, model_factory):
    hyper = dict(lr=0.05, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)
    start, model = _adamw_runs(opts and opts(), model_factory,
                               bias_correction=False, **hyper)
    reference = copy.deepcopy(start)
    ref_opt = AdamWNoBiasReference(
        [p for p in reference.parameters() if p.requires_grad], **hyper)
    corrected = copy.deepcopy(start)
    torch_opt = torch.optim.AdamW(
        [p for p in corrected.parameters() if p.requires_grad], **hyper)
    for step in range(3):
        _eager_step(reference, ref_opt, step)
        _eager_step(corrected, torch_opt, step)
    _assert_same_weights(model, reference)
    # ... which is not torch's bias-corrected AdamW.
    assert not torch.allclose(model.fc.weight, corrected.fc.weight)


def test_adamw_without_bias_correction_matches_torch_where_the_rules_agree():
    # With both betas 0 the bias corrections 1 - beta**t are 1: torch's
    # AdamW then follows the same rule.
    hyper = dict(lr=0.05, betas=(0.0, 0.0), eps=1e-6, weight_decay=0.1)
    start, model = _adamw_runs(None, bias_correction=False, **hyper)
    reference = copy.deepcopy(start)
    ref_opt = torch.optim.AdamW(reference.parameters(), **hyper)
    for step in range(3):
        _eager_step(reference, ref_opt, step)
    _assert_same_weights(model, reference)


# --- 6. F.one_hot's class count -------------------------------------------------

class OneHot(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.args = args

    def forward(self, x):
        return torch.nn.functional.one_hot(x, *self.args)


ONE_HOT_UNSPECIFIED = "OneHot num classes must be specified and must be " \
    "constant."
TOO_SMALL = "Class values must be smaller than num_classes."
NEGATIVE = "Class values must be non-negative."


@pytest.mark.parametrize("args, values, text", [
    ((), [0, 2, 1], ONE_HOT_UNSPECIFIED),
    ((-1,), [0, 2, 1], ONE_HOT_UNSPECIFIED),
    ((0,), [0, 2, 1], TOO_SMALL),
    ((-3,), [0, 2, 1], TOO_SMALL),
    ((2,), [0, 2, 1], TOO_SMALL),
    ((3,), [0, -1, 1], NEGATIVE),
], ids=["missing", "minus_one", "zero", "negative", "too_small",
        "negative_value"])
def test_one_hot_with_an_invalid_class_count_raises_poptorchs_text(
        args, values, text):
    x = torch.tensor(values)
    if args not in [(), (-1,)]:
        # Eager PyTorch refuses these with the same words.
        with pytest.raises(RuntimeError, match=re.escape(text)):
            OneHot(*args)(x)
    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(OneHot(*args))(x)
    assert str(info.value).startswith(text)
    assert "test_fidelity_semantics.py" in str(info.value)   # user's line


# --- 7. Config-file syntax errors -------------------------------------------

@pytest.mark.parametrize("bad", [
    "replicationFactor(2",
    "deviceIterations(2))",
    "Training.gradientAccumulation = = 2  # a comment",
    "outputMode(poptorch.OutputMode.All,,)",
])
def test_config_file_syntax_error_quotes_the_command(tmp_path, bad):
    path = tmp_path / "bad.conf"
    path.write_text("deviceIterations(4)\n" + bad + "\n")
    # Python's own words for the command PopTorch runs.
    try:
        compile("options." + bad.strip(), "bad.conf", "exec")
    except SyntaxError as err:
        detail = err.msg
    with pytest.raises(poptorch.options.ConfigFileError) as info:
        poptorch.Options().loadFromFile(str(path))
    assert str(info.value) == (f"SyntaxError at line 2 of bad.conf: "
                               f"{detail}\n> options.{bad.strip()}")
