"""Ctrl-C during a training call with many device iterations: the call
stops between optimizer steps, says how many it applied, and the model,
optimizer state and host weights agree with an eager loop of that many
steps."""
import copy
import re
import signal

import pytest
import torch

import poptorch
from ._models import MLP

DEVICE_ITERATIONS = 5


def _setup(backend="interpret", groups=1):
    """``groups`` > 1 splits the parameters over that many (identical)
    parameter groups, which keeps the ``compile`` backend's Adam update out
    of its training graph (``Program.adam_in_graph``)."""
    torch.manual_seed(0)
    model = MLP()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(DEVICE_ITERATIONS)
    opts.Simulator.backend(backend)
    params = list(model.parameters())
    ipu = poptorch.trainingModel(model, opts, torch.optim.Adam(
        [{"params": params[i::groups]} for i in range(groups)], lr=0.01))
    x = torch.randn(DEVICE_ITERATIONS * 4, 4)
    y = torch.randn(DEVICE_ITERATIONS * 4, 3)
    ipu.compile(x, y)
    return model, reference, ipu, x, y


def _eager_steps(model, x, y, steps):
    """``steps`` Adam steps on the first micro-batches, in plain PyTorch."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for i in range(steps):
        optimizer.zero_grad()
        model(x[4 * i:4 * i + 4], y[4 * i:4 * i + 4])[1].backward()
        optimizer.step()
    return optimizer


def _assert_same_weights(model, reference):
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


def _next_call_continues(ipu, model, reference, eager_optimizer, x, y):
    """The call after an interrupted one continues from the steps it
    applied, as the eager loop does."""
    ipu(x, y)
    for i in range(DEVICE_ITERATIONS):
        eager_optimizer.zero_grad()
        reference(x[4 * i:4 * i + 4], y[4 * i:4 * i + 4])[1].backward()
        eager_optimizer.step()
    _assert_same_weights(model, reference)


def test_ctrl_c_while_a_step_updates_the_weights_finishes_that_step():
    model, reference, ipu, x, y = _setup()
    optimizer = ipu._state.program.device_optimizer
    step, calls = optimizer.step, []

    def step_then_ctrl_c(divisor):
        calls.append(divisor)
        if len(calls) == 2:
            signal.raise_signal(signal.SIGINT)  # arrives mid-update
        step(divisor)
    optimizer.step = step_then_ctrl_c
    with pytest.raises(KeyboardInterrupt, match=re.escape(
            "call of 5 device iteration(s): 2 optimizer step(s) were "
            "applied")):
        ipu(x, y)
    _eager_steps(reference, x, y, 2)
    _assert_same_weights(model, reference)


@pytest.mark.parametrize("backend", ["interpret", "compile"])
def test_ctrl_c_while_gradients_are_computed_discards_that_step(backend):
    """``interpret`` runs a micro-batch's forward then its backward;
    ``compile`` runs both as one graph (``run_training``), the optimizer
    update apart (two parameter groups)."""
    model, reference, ipu, x, y = _setup(backend, groups=2)
    program = ipu._state.program
    name = "run" if backend == "interpret" else "run_training"
    run, runs = getattr(program.executable, name), []

    def run_then_ctrl_c(*args):
        runs.append(1)
        if len(runs) == 4:  # the 4th iteration's micro-batch
            raise KeyboardInterrupt
        return run(*args)
    setattr(program.executable, name, run_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt,
                       match=re.escape(": 3 optimizer step(s) were applied")):
        ipu(x, y)
    assert all(p.grad is None for p in program.state.params)
    eager_optimizer = _eager_steps(reference, x, y, 3)
    _assert_same_weights(model, reference)
    setattr(program.executable, name, run)
    _next_call_continues(ipu, model, reference, eager_optimizer, x, y)


def test_ctrl_c_while_a_compiled_step_runs_finishes_that_step():
    """``compile`` runs a micro-batch's forward and backward pass and its
    Adam update as one graph (``Program.adam_in_graph``): a Ctrl-C that
    arrives while it runs stops the call after that step, not before."""
    model, reference, ipu, x, y = _setup("compile")
    program = ipu._state.program
    prepare, runs = program.executable.training_with_adam, []

    def prepare_with_ctrl_c(*args):
        run = prepare(*args)
        assert run is not None, "the update should run in the graph"

        def run_with_ctrl_c(*run_args):
            runs.append(1)
            if len(runs) == 4:
                signal.raise_signal(signal.SIGINT)  # arrives mid-step
            return run(*run_args)
        return run_with_ctrl_c
    program.executable.training_with_adam = prepare_with_ctrl_c
    with pytest.raises(KeyboardInterrupt,
                       match=re.escape(": 4 optimizer step(s) were applied")):
        ipu(x, y)
    eager_optimizer = _eager_steps(reference, x, y, 4)
    _assert_same_weights(model, reference)
    program.executable.training_with_adam = prepare
    _next_call_continues(ipu, model, reference, eager_optimizer, x, y)
