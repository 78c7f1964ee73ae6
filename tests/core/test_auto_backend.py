"""The ``auto`` backend (``_executor/tiered.py``): ``interpret`` until the
``compile`` backend's step, built in a background thread, takes over
between two calls.

The models share their shapes with each other where they can, so that the
graphs compile once per session (inductor's cache serves the others), and
no test asserts a time.
"""
import copy

import pytest
import torch

import poptorch
from poptorch_core._executor import (background_compile, scale_out_hook,
                                    tiered)
from poptorch_core._executor.backends.executable import Executable
from ._eager import assert_outputs_match, train_call
from ._models import MLP

#: Seconds a test waits for a background build at most (a cold compilation
#: of these models takes a few seconds on 2 cores).
_BUILD_TIMEOUT = 600


@pytest.fixture(autouse=True)
def _default_backend(monkeypatch):
    """The suite's conftest picks interpret for every other test."""
    monkeypatch.delenv("POPTORCH_SIM_BACKEND", raising=False)


class _Noisy(MLP):
    """``(out, loss, noise)``: the loss does not depend on the dropout, so
    training is deterministic while the graph draws from the device's RNG
    stream on every call."""

    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x, y):
        out, loss = super().forward(x, y)
        return (out, poptorch.identity_loss(loss, reduction="none"),
                self.drop(x))


def _batches(count):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 4, generator=gen),
             torch.randn(8, 3, generator=gen)) for _ in range(count)]


def _training(model, backend=None, optimizer=None):
    opts = poptorch.Options().randomSeed(5)
    if backend is not None:
        opts.Simulator.backend(backend)
    return poptorch.trainingModel(
        model, opts,
        optimizer or poptorch.optim.Adam(model.parameters(), lr=0.01))


def _tiers(ipu):
    return ipu._state.program.tiers


def _device_snapshot(ipu):
    """CPU copies of the device's weights, buffers and optimizer state, and
    its RNG state."""
    program = ipu._state.program
    state = program.device_optimizer.read_state()["ipu_state"]
    return ([p.detach().clone() for p in program.state.params],
            {k: v.clone() for k, v in state.items()}, ipu.rng_state)


def _assert_equal_snapshots(a, b):
    params_a, state_a, rng_a = a
    params_b, state_b, rng_b = b
    assert all(torch.equal(p, q) for p, q in zip(params_a, params_b))
    assert state_a.keys() == state_b.keys()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert rng_a == rng_b


def test_switch_keeps_weights_optimizer_state_and_rng_bitwise():
    """Up to the switch the ``auto`` model is the ``interpret`` one bit for
    bit (outputs, dropout masks, weights, Adam's moments and step counts,
    the device RNG state); the switch changes none of them, the flat Adam
    buffers repacked for the fused update included; after it, training
    matches eager PyTorch and the ``compile`` backend within float
    rounding, and the compiled graph draws from the same device stream."""
    torch.manual_seed(0)
    model = _Noisy()
    interpret_model, compile_model, eager = (copy.deepcopy(model)
                                             for _ in range(3))
    auto = _training(model)
    interpreted = _training(interpret_model, "interpret")
    compiled = _training(compile_model, "compile")
    eager_opt = torch.optim.Adam(eager.parameters(), lr=0.01)
    assert auto.options.Simulator.execution_backend == "auto"
    batches = _batches(6)

    def eager_step(x, y):
        eager_opt.zero_grad()
        out, loss, _ = eager(x, y)
        loss.backward()
        eager_opt.step()
        return out.detach(), loss.detach()

    for x, y in batches[:2]:
        got, want = auto(x, y), interpreted(x, y)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        compiled(x, y)
        eager_step(x, y)
    tiers = _tiers(auto)
    assert tiers.wait(_BUILD_TIMEOUT)
    assert auto.compilations() == 0 and not tiers.switched
    _assert_equal_snapshots(_device_snapshot(auto),
                            _device_snapshot(interpreted))

    # The switch, without a step: nothing the device holds changes.
    program = auto._state.program
    bound = auto._binder.bind(batches[2], {})
    assert tiers.switch_if_ready(program, bound)
    _assert_equal_snapshots(_device_snapshot(auto),
                            _device_snapshot(interpreted))
    packed, _ = program.device_optimizer.fusable_adam()  # repacks, fused
    assert packed.fused
    _assert_equal_snapshots(_device_snapshot(auto),
                            _device_snapshot(interpreted))

    # The compiled steps: the device stream advances, the host's does not.
    rng_before = auto.rng_state
    for x, y in batches[2:]:
        host_rng = torch.get_rng_state()
        out, loss, _ = auto(x, y)
        assert torch.equal(torch.get_rng_state(), host_rng)
        ref_out, ref_loss = eager_step(x, y)
        torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-5)
        for got, want in zip((out, loss), compiled(x, y)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        interpreted(x, y)
    assert auto.rng_state != rng_before
    assert auto.compilations() == 1 and tiers.interpreted_calls == 2
    for p, q, r in zip(model.parameters(), eager.parameters(),
                       interpret_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(p, r, rtol=1e-4, atol=1e-5)


def test_accumulated_steps_switch_and_match_eager():
    """Two accumulation steps per optimizer step and SGD with momentum:
    the compiled training step without the optimizer in it."""
    torch.manual_seed(0)
    model = MLP()
    eager = copy.deepcopy(model)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    opts.outputMode(poptorch.OutputMode.All)
    auto = poptorch.trainingModel(model, opts, torch.optim.SGD(
        model.parameters(), lr=0.05, momentum=0.9))
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(2)
    for call in range(4):
        inputs = [torch.randn(16, 4, generator=gen),
                  torch.randn(16, 3, generator=gen)]
        out, loss = auto(*inputs)
        assert_outputs_match(out, loss, train_call(eager, eager_opt, inputs,
                                                   G=2))
        if call == 1:
            assert _tiers(auto).wait(_BUILD_TIMEOUT)
    assert auto.compilations() == 1 and _tiers(auto).interpreted_calls == 2
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_inference_switches_and_matches_eager():
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    auto = poptorch.inferenceModel(layer)
    inputs = [torch.randn(8, 4) for _ in range(4)]
    for x in inputs[:2]:
        torch.testing.assert_close(auto(x), layer(x), rtol=0, atol=0)
    assert _tiers(auto).wait(_BUILD_TIMEOUT)
    for x in inputs[2:]:
        torch.testing.assert_close(auto(x), layer(x).detach(), rtol=1e-5,
                                   atol=1e-6)
    assert auto.compilations() == 1 and _tiers(auto).interpreted_calls == 2
    # The build compiled a copy: inductor's cache lookup swaps a module's
    # ``meta`` out while the calls on interpret read the captured graph's.
    program = auto._state.program
    assert program.executable.graph_module is not \
        program.captured.graph_module
    assert "poptorch_num_user_outputs" in program.captured.graph_module.meta


def test_compile_starts_the_build_without_a_bar_or_waiting():
    """``model.compile()`` traces and starts the build (the model is ready
    to run at once); the first call then switches if the build is done.
    The bar covers the tracing only, and ``compilationTime()`` counts what
    a call waited for, not the background build."""
    from .test_compile_progress import _recording
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    auto = poptorch.inferenceModel(layer)
    bar = _recording(auto)
    x = torch.randn(8, 4)
    auto.compile(x)
    tiers = _tiers(auto)
    assert tiers.wait(_BUILD_TIMEOUT)
    traced = auto.compilationTime()
    torch.testing.assert_close(auto(x), layer(x).detach(), rtol=1e-5,
                               atol=1e-6)
    assert tiers.interpreted_calls == 0 and auto.compilations() == 1
    assert bar.updates == [0, 100]
    assert auto.compilationTime() == traced


def test_saved_auto_model_loads_as_auto_and_continues(tmp_path):
    """``poptorch.load`` compiles the saved model, which for ``auto``
    traces and starts the build; the loaded model continues training as
    the original does (eager PyTorch's Adam within float rounding)."""
    torch.manual_seed(0)
    model = _Noisy()
    eager = copy.deepcopy(model)
    eager_opt = torch.optim.Adam(eager.parameters(), lr=0.01)
    auto = _training(model)
    batches = _batches(4)
    for x, y in batches:
        eager_opt.zero_grad()
        eager(x, y)[1].backward()
        eager_opt.step()
    auto(*batches[0])
    path = tmp_path / "model.poptorch"
    auto.save(str(path))
    restored = poptorch.load(str(path))
    assert restored.options.Simulator.execution_backend == "auto"
    assert _tiers(restored).wait(_BUILD_TIMEOUT)
    for x, y in batches[1:]:
        restored(x, y)
    assert restored.compilations() == 1
    for p, q in zip(restored.model.parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_waiting_for_every_build():
    """``wait_for_builds`` (benchmarks wait so that no build shares the
    cores with what they time) returns once the build is done."""
    auto = poptorch.inferenceModel(torch.nn.Linear(4, 3))
    for _ in range(2):
        auto(torch.randn(8, 4))
    assert background_compile.wait_for_builds(_BUILD_TIMEOUT)
    assert _tiers(auto)._build.done()


def test_a_model_called_once_builds_nothing():
    auto = poptorch.inferenceModel(torch.nn.Linear(4, 3))
    auto(torch.randn(8, 4))
    assert _tiers(auto)._build is None


def test_failed_build_logs_once_and_stays_on_interpret(monkeypatch,
                                                       log_records):
    def fail(self, form):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(Executable, "prepare_form", fail)
    torch.manual_seed(0)
    model = _Noisy()
    twin = copy.deepcopy(model)
    auto, interpreted = _training(model), _training(twin, "interpret")
    for i, (x, y) in enumerate(_batches(5)):
        got, want = auto(x, y), interpreted(x, y)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        if i == 1:
            assert _tiers(auto).wait(_BUILD_TIMEOUT)
    assert auto.compilations() == 0 and not _tiers(auto).switched
    warnings = [r.getMessage() for r in log_records
                if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "no C++ compiler found" in warnings[0]
    assert "stays on the interpret backend" in warnings[0]
    assert all(torch.equal(p, q)
               for p, q in zip(model.parameters(), twin.parameters()))


def test_a_step_that_needs_another_form_builds_again(monkeypatch):
    """``setOptimizer`` between the build and the switch (Adam to AdamW with
    weight decay: another fused update) starts a build of the new form
    instead of switching to the old one."""
    torch.manual_seed(0)
    model = _Noisy()
    auto = _training(model)
    batches = _batches(3)
    for x, y in batches[:2]:
        auto(x, y)
    tiers = _tiers(auto)
    assert tiers.wait(_BUILD_TIMEOUT)
    forms = []
    monkeypatch.setattr(tiered, "submit",
                        lambda executable, form, device: forms.append(form))
    auto.setOptimizer(poptorch.optim.AdamW(model.parameters(), lr=0.01,
                                           weight_decay=0.1))
    auto(*batches[2])
    assert not tiers.switched and auto.compilations() == 0
    assert [(f.kind, f.key.decoupled, f.key.weight_decay)
            for f in forms] == [("adam", True, True)]


@pytest.mark.parametrize("env, expected", [
    (None, "auto"), ("auto", "auto"), ("interpret", "interpret"),
    ("compile", "compile")])
def test_environment_variable_picks_the_backend(monkeypatch, env, expected):
    if env is not None:
        monkeypatch.setenv("POPTORCH_SIM_BACKEND", env)
    assert poptorch.Options().Simulator.execution_backend == expected
    # An explicit choice wins over the variable.
    assert poptorch.Options().Simulator.backend(
        "interpret").execution_backend == "interpret"


def test_explicit_interpret_never_builds():
    opts = poptorch.Options()
    opts.Simulator.backend("interpret")
    model = poptorch.inferenceModel(torch.nn.Linear(4, 3), opts)
    for _ in range(3):
        model(torch.randn(8, 4))
    program = model._state.program
    assert program.tiers is None and program.executable.backend == \
        "interpret"


def test_unknown_backend_in_the_environment_names_the_choices(monkeypatch):
    monkeypatch.setenv("POPTORCH_SIM_BACKEND", "fast")
    with pytest.raises(ValueError, match="POPTORCH_SIM_BACKEND: Invalid "
                       "Simulator backend 'fast': valid values are "
                       "'interpret', 'compile', 'auto'"):
        poptorch.Options()


def test_several_processes_stay_on_interpret(monkeypatch):
    """Processes would switch at different steps and update their replicas
    with different arithmetic: a distributed run keeps ``interpret``."""
    monkeypatch.setattr(scale_out_hook, "_hook",
                        lambda state, program: None)
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(0, 2)
    model = poptorch.inferenceModel(torch.nn.Linear(4, 3), opts)
    for _ in range(3):
        model(torch.randn(8, 4))
    tiers = _tiers(model)
    assert tiers._build is None and not tiers.switched


_ENDS_DURING_A_BUILD = """
import sys, threading, time
import torch
from poptorch_core._executor import background_compile
from poptorch_core._executor.backends import Executable
from poptorch_core._executor.backends.executable import Form

started = threading.Event()

def slow_build(self, form):
    started.set()
    time.sleep(1.0)
    with open(sys.argv[1] + "." + form.kind, "w"):
        pass

Executable.prepare_form = slow_build
gm = torch.fx.symbolic_trace(lambda x: x * 2)
for kind in ("first", "queued"):
    background_compile.submit(Executable(gm, "compile"),
                               Form(kind, [torch.ones(2)], False), "cpu")
started.wait()  # the script ends while the first build runs
"""


def test_a_program_that_ends_during_a_build_waits_for_it(tmp_path):
    """The interpreter waits for the build under way and drops the queued
    ones. A daemon thread was stopped wherever it was when the interpreter
    finalised: inside torch's C++ code, that aborted the process
    ("terminate called without an active exception")."""
    import pathlib
    import subprocess
    import sys
    marker = tmp_path / "built"
    result = subprocess.run(
        [sys.executable, "-c", _ENDS_DURING_A_BUILD, str(marker)],
        cwd=pathlib.Path(__file__).resolve().parents[2],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "built.first").exists()
    assert not (tmp_path / "built.queued").exists()
