"""Exceptions that any signal handler raises during a training call (a
``KeyboardInterrupt`` from a SIGALRM handler, ``sys.exit`` in a SIGTERM
handler, an exception of the user's own): a step's update is applied whole
or not at all, the exception comes out at a step boundary saying how many
steps the call applied, and the weights, the Adam state and the host copies
agree with an eager PyTorch loop of that many steps."""
import contextlib
import copy
import os
import random
import re
import select
import signal
import sys

import pytest
import torch

import poptorch
from ._models import MLP

ITERATIONS = 200
BATCH = 4


class _HandlerError(Exception):
    """An exception of the user's own, raised by their signal handler."""


def _raise_keyboard_interrupt():
    raise KeyboardInterrupt


def _exit():
    sys.exit(3)


def _raise_own():
    raise _HandlerError("raised by a signal handler")


RAISERS = {"KeyboardInterrupt": (KeyboardInterrupt, _raise_keyboard_interrupt),
           "SystemExit": (SystemExit, _exit),
           "own exception": (_HandlerError, _raise_own)}


@contextlib.contextmanager
def _handler(signum, raiser, before=lambda: None):
    """Installs a handler of ``signum`` that runs ``before()`` then
    ``raiser()``; the previous handler comes back afterwards."""
    def handler(number, frame):
        before()
        raiser()
    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)


class _Run:
    """A training model over ``ITERATIONS`` device iterations of Adam, and
    the same model trained eagerly, step for step, as the calls report."""

    def __init__(self, backend="interpret", hidden=8):
        torch.manual_seed(0)
        self.model = MLP(hidden=hidden)
        self.eager = copy.deepcopy(self.model)
        self.optimizer = poptorch.optim.Adam(self.model.parameters(),
                                             lr=0.01)
        self.eager_optimizer = torch.optim.Adam(self.eager.parameters(),
                                                lr=0.01)
        opts = poptorch.Options().deviceIterations(ITERATIONS)
        opts.Simulator.backend(backend)
        self.ipu = poptorch.trainingModel(self.model, opts, self.optimizer)
        self.x = torch.randn(ITERATIONS * BATCH, 4)
        self.y = torch.randn(ITERATIONS * BATCH, 3)
        self.ipu.compile(self.x, self.y)
        self.steps = 0

    @property
    def device_optimizer(self):
        return self.ipu._state.program.device_optimizer

    def call(self, expected, unreported=None):
        """One call, ended by an exception of type ``expected`` (or not
        ended early); returns how many steps it reports (``unreported``
        for an exception that says nothing of steps, None: an error)."""
        try:
            self.ipu(self.x, self.y)
        except expected as error:
            return _reported_steps(error, unreported)
        return ITERATIONS

    def eager_steps(self, steps):
        """``steps`` Adam steps in plain PyTorch on a call's first
        micro-batches."""
        for i in range(steps):
            self.eager_optimizer.zero_grad()
            self.eager(self.x[BATCH * i:BATCH * (i + 1)],
                       self.y[BATCH * i:BATCH * (i + 1)])[1].backward()
            self.eager_optimizer.step()
        self.steps += steps

    def check(self):
        """The weights and Adam's state agree with the eager loop."""
        state = self.optimizer.state_dict()["ipu_state"]
        for (name, p), q in zip(self.model.named_parameters(),
                                self.eager.parameters()):
            torch.testing.assert_close(p, q)
            eager_state = self.eager_optimizer.state.get(q, {})
            assert float(state[f"Step___{name}"]) == self.steps
            assert float(eager_state.get("step", 0)) == self.steps
            if self.steps:
                torch.testing.assert_close(state[f"Accl1___{name}"],
                                           eager_state["exp_avg"])
                torch.testing.assert_close(state[f"Accl2___{name}"],
                                           eager_state["exp_avg_sq"])


def _reported_steps(error, unreported=None):
    """How many steps the exception says the call applied (its message, or
    a note added to another exception)."""
    text = " ".join([str(error)] + getattr(error, "__notes__", []))
    found = re.search(r"(\d+) optimizer step\(s\) were applied", text)
    if found is None and unreported is not None:
        return unreported
    assert found, f"the exception does not say how many steps: {text!r}"
    return int(found.group(1))


@pytest.mark.parametrize("signum", [signal.SIGALRM, signal.SIGTERM],
                         ids=["SIGALRM", "SIGTERM"])
@pytest.mark.parametrize("raised", sorted(RAISERS))
def test_a_handler_raising_during_an_update_waits_for_the_step(signum,
                                                               raised):
    """The signal arrives while the second step's update runs (right after
    its arithmetic, before the step is counted): that step still counts,
    and the call stops after it."""
    run = _Run()
    expected, raiser = RAISERS[raised]
    step = run.device_optimizer.step
    updates = []

    def step_then_signal(divisor):
        step(divisor)
        updates.append(divisor)
        if len(updates) == 2:
            signal.raise_signal(signum)
    run.device_optimizer.step = step_then_signal
    with _handler(signum, raiser):
        assert run.call(expected) == 2
    assert len(updates) == 2
    run.eager_steps(2)
    run.check()
    run.device_optimizer.step = step
    assert run.call(expected) == ITERATIONS
    run.eager_steps(ITERATIONS)
    run.check()


def test_a_handler_raising_during_a_compiled_step_waits_for_it():
    """The ``compile`` backend applies Adam inside its training graph
    (``Program.adam_in_graph``): a handler's exception that arrives as
    that graph finishes comes out after the step is recorded."""
    run = _Run("compile")
    program = run.ipu._state.program
    prepare, runs = program.executable.training_with_adam, []

    def prepare_with_signal(*args):
        graph = prepare(*args)
        assert graph is not None, "the update should run in the graph"

        def run_then_signal(*run_args):
            outputs = graph(*run_args)
            runs.append(1)
            if len(runs) == 3:
                signal.raise_signal(signal.SIGALRM)
            return outputs
        return run_then_signal
    program.executable.training_with_adam = prepare_with_signal
    with _handler(signal.SIGALRM, _raise_own):
        assert run.call(_HandlerError) == 3
    run.eager_steps(3)
    run.check()


@contextlib.contextmanager
def _signals_seen():
    """A function saying whether a signal with a Python handler arrived
    since it was last asked: the C-level handler writes to the wake-up
    pipe the moment the signal arrives, whenever the Python handler runs."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write)

    def seen():
        found = False
        while select.select([read], [], [], 0)[0]:
            found = bool(os.read(read, 64)) or found
        return found
    try:
        yield seen
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("raised", sorted(RAISERS))
def test_a_timer_signal_landing_anywhere_leaves_whole_steps(raised):
    """SIGALRM from ``setitimer`` at random points of long training calls,
    its handler raising: after every call the model and Adam's state are
    those of exactly the steps it reports (an exception that reports none
    came before the first). The rounds go on until a signal has arrived
    while an update ran (bounded): a wide hidden layer makes the update
    take a good part of each step."""
    run = _Run(hidden=32768)
    expected, raiser = RAISERS[raised]
    step, landed = run.device_optimizer.step, []
    rng = random.Random(0)
    with _signals_seen() as seen:
        def watched_step(divisor):
            seen()
            step(divisor)
            if seen():
                landed.append(divisor)
        run.device_optimizer.step = watched_step

        def stop_timer():
            signal.setitimer(signal.ITIMER_REAL, 0)
        with _handler(signal.SIGALRM, raiser, before=stop_timer):
            for _ in range(60):
                signal.setitimer(signal.ITIMER_REAL,
                                 rng.uniform(1e-4, 5e-3), 5e-4)
                try:
                    steps = run.call(expected, unreported=0)
                finally:
                    stop_timer()
                run.eager_steps(steps)
                run.check()
                if landed:
                    break
    assert landed, "no signal arrived while an update ran"


def test_an_exception_never_comes_out_of_the_middle_of_an_update():
    """``HeldSignals.run`` under a timer firing every 50 microseconds, its
    handler raising: whenever the exception comes out, the update has run
    to its end. The handler raises only where it interrupted an update
    (``HeldSignals.run`` is on the stack), so that the test's own loop
    never sees an exception."""
    from poptorch_core._executor import interrupts

    started, finished, caught = [], [], []

    def update():
        started.append(1)
        for _ in range(100):  # Python work, so that handlers may run
            sum(range(20))
        finished.append(1)

    def raise_in_updates(number, frame):
        while frame is not None:
            if frame.f_code is interrupts.HeldSignals.run.__code__:
                raise _HandlerError
            frame = frame.f_back

    previous = signal.signal(signal.SIGALRM, raise_in_updates)
    try:
        with interrupts.HeldSignals() as held:
            signal.setitimer(signal.ITIMER_REAL, 5e-5, 5e-5)
            # On a loaded machine the timer lands in an update less often:
            # run until it has a few times (bounded).
            for _ in range(20000):
                try:
                    held.run(update)
                except _HandlerError:
                    caught.append(len(started) == len(finished))
                if len(caught) >= 5:
                    break
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert caught and all(caught), caught


def test_the_handlers_are_put_back_after_a_call():
    """The wrappers live only during a call: afterwards ``getsignal``
    returns the user's handlers, and Ctrl-C is Python's again."""
    run = _Run()
    with _handler(signal.SIGALRM, _raise_own):
        installed = signal.getsignal(signal.SIGALRM)
        run.ipu(run.x, run.y)
        assert signal.getsignal(signal.SIGALRM) is installed
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_dropped_step_leaves_no_trace_in_the_buffers():
    """A handler's exception that arrives after a step's forward pass (which
    updated BatchNorm's running statistics) but before its update drops
    the step: the buffers are those of the steps applied, as in an eager
    loop of that many steps."""
    torch.manual_seed(0)
    model = MLP(batch_norm=True)
    assert dict(model.named_buffers())  # what each forward pass writes
    eager = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(5)
    ipu = poptorch.trainingModel(model, opts, poptorch.optim.Adam(
        model.parameters(), lr=0.01))
    x, y = torch.randn(20, 4), torch.randn(20, 3)
    ipu.compile(x, y)
    executable = ipu._state.program.executable
    run, runs = executable.run, []

    def forward_then_signal(*args):
        outputs = run(*args)
        runs.append(1)
        if len(runs) == 4:  # the 4th step's forward pass has run
            signal.raise_signal(signal.SIGALRM)
        return outputs
    executable.run = forward_then_signal
    with _handler(signal.SIGALRM, _raise_own):
        with pytest.raises(_HandlerError) as raised:
            ipu(x, y)
    assert _reported_steps(raised.value) == 3
    optimizer = torch.optim.Adam(eager.parameters(), lr=0.01)
    for i in range(3):
        optimizer.zero_grad()
        eager(x[4 * i:4 * i + 4], y[4 * i:4 * i + 4])[1].backward()
        optimizer.step()
    for (name, p), q in zip(model.named_buffers(), eager.buffers()):
        torch.testing.assert_close(p, q, msg=name)
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p, q)


def test_a_host_copy_stopped_part_way_is_made_again():
    """An exception that stops the device-to-host copy of the weights after
    some of them leaves the host copy stale, not torn: the next read
    copies them all."""
    run = _Run()
    run.ipu(run.x, run.y)
    state = run.ipu._state.program.state
    copy_to_host = state.copy_to_host

    def copy_one_then_raise():
        state.host_params[0].data.copy_(state.params[0].detach())
        raise _HandlerError("arrived during the copy")
    state.copy_to_host = copy_one_then_raise
    with pytest.raises(_HandlerError):
        run.model.fc2.weight.sum()
    state.copy_to_host = copy_to_host
    run.eager_steps(ITERATIONS)
    run.check()
