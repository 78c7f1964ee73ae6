"""One wrapper used from several threads, and wrappers used after
``destroy()``: never a crash, torn weights or a silently private copy."""
import copy
import sys
import threading

import pytest
import torch

import poptorch
from ._models import MLP


def _serial_reference(model, batches, calls):
    """The same steps in a plain PyTorch loop."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(calls):
        for x, y in batches:
            optimizer.zero_grad()
            model(x, y)[1].backward()
            optimizer.step()
    return model


@pytest.fixture
def frequent_thread_switches():
    """Switch threads every microsecond, so unserialised calls would
    interleave inside one optimizer step."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def test_concurrent_calls_are_serialised(frequent_thread_switches):
    torch.manual_seed(0)
    model = MLP()
    reference = copy.deepcopy(model)
    ipu = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05))
    # Every call sees the same batch, so serialised calls in any order give
    # the same weights as the serial loop; interleaved steps would not.
    batch = (torch.randn(8, 4), torch.randn(8, 3))
    ipu(*batch)
    errors = []
    readers_done = threading.Event()

    def train():
        try:
            for _ in range(15):
                ipu(*batch)
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    def read_weights():
        # A reader must see whole optimizer steps (it waits for the call
        # in flight), never fail.
        try:
            while not readers_done.is_set():
                assert torch.isfinite(model.fc1.weight).all()
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=train) for _ in range(3)]
    reader = threading.Thread(target=read_weights)
    reader.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    readers_done.set()
    reader.join(timeout=120)
    assert not errors
    _serial_reference(reference, [batch], 46)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


def test_no_two_calls_run_at_once():
    model = MLP()
    ipu = poptorch.trainingModel(model)
    batch = (torch.randn(8, 4), torch.randn(8, 3))
    ipu(*batch)
    program = ipu._state.program
    run = program.run
    active, overlaps = [], []
    entered = threading.Barrier(2, timeout=1)

    def slow_run(*args):
        active.append(1)
        overlaps.append(len(active))
        try:
            # Both threads reach this point before either leaves only if
            # nothing serialises them; the barrier then returns at once.
            entered.wait()
        except threading.BrokenBarrierError:
            pass
        try:
            return run(*args)
        finally:
            active.pop()
    program.run = slow_run
    threads = [threading.Thread(target=ipu, args=batch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert overlaps == [1, 1]


def test_destroyed_training_wrapper_recompiles_and_keeps_syncing():
    torch.manual_seed(0)
    model = MLP()
    reference = copy.deepcopy(model)
    ipu = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05))
    batch = (torch.randn(8, 4), torch.randn(8, 3))
    ipu(*batch)
    ipu.destroy()
    ipu(*batch)  # recompiles, as PopTorch does, and trains the model again
    _serial_reference(reference, [batch], 2)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


def test_destroyed_wrapper_whose_model_was_rewrapped_raises():
    model = MLP()
    batch = (torch.randn(8, 4), torch.randn(8, 3))
    first = poptorch.trainingModel(model)
    first(*batch)
    model.destroy()
    second = poptorch.trainingModel(model)
    second(*batch)
    with pytest.raises(poptorch.Error, match="wrapped by another "
                       "poptorch.trainingModel: call that wrapper instead"):
        first(*batch)


class _Chain(torch.nn.Module):
    """Many parameters that one SGD step moves together: an output row of
    the weights of two different steps shows a torn read."""

    def __init__(self, links=200, width=8):
        super().__init__()
        self.links = torch.nn.ParameterList(
            torch.nn.Parameter(torch.full((width,), float(i)))
            for i in range(links))

    def forward(self, x):
        out = torch.stack([(w * x).sum() for w in self.links])
        return out, poptorch.identity_loss(out.sum(), reduction="none")


class _Holder(torch.nn.Module):
    """A model that holds ``_Chain`` (a training wrapper adding a loss)."""

    def __init__(self, chain):
        super().__init__()
        self.chain = chain

    def forward(self, x):
        return self.chain(x)


def _eager_outputs(model, x, steps, lr):
    """Row k: the model's output after k SGD steps, in plain PyTorch."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    rows = []
    for _ in range(steps + 1):
        with torch.no_grad():
            rows.append(model(x)[0])
        optimizer.zero_grad()
        model(x)[1].backward()
        optimizer.step()
    return torch.stack(rows)


def _run_both(train, infer, calls, timeout=120):
    """Trains ``calls`` times in one thread while another thread runs the
    inference model; returns the inference outputs and any error."""
    outputs, errors = [], []
    training_done = threading.Event()

    def training():
        try:
            for _ in range(calls):
                train()
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)
        finally:
            training_done.set()

    def inference():
        try:
            while not training_done.is_set():
                outputs.append(infer())
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=training),
               threading.Thread(target=inference)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(thread.is_alive() for thread in threads), "deadlock"
    return outputs, errors


def _assert_whole_steps(outputs, rows):
    """Each inference output is the eager output after some step."""
    assert outputs
    for out in outputs:
        distances = (rows - out).abs().amax(dim=1)
        step = int(distances.argmin())
        assert distances[step] < 1e-3, (
            f"inference saw weights of several steps: the nearest whole "
            f"step ({step}) is {float(distances[step])} away")


def _wrappers(chain, trained: str, lr: float):
    """A trainingModel of ``chain`` (or of a model holding it) and an
    inferenceModel of ``chain``."""
    trained_model = chain if trained == "same model" else _Holder(chain)
    train = poptorch.trainingModel(
        trained_model,
        optimizer=torch.optim.SGD(trained_model.parameters(), lr=lr))
    return train, poptorch.inferenceModel(chain)


@pytest.mark.parametrize("trained", ["same model", "model holding it"])
def test_inference_never_sees_half_a_training_step(frequent_thread_switches,
                                                   trained):
    """A trainingModel and an inferenceModel of one model, called from two
    threads: an inference call sees the weights before or after a training
    step, never some of each (one lock per model, not per wrapper)."""
    chain, lr, calls = _Chain(), 0.25, 30
    x = torch.ones(1, 8)
    rows = _eager_outputs(chain, x, calls, lr)
    train, infer = _wrappers(chain, trained, lr)
    train(x)
    infer(x)
    outputs, errors = _run_both(lambda: train(x), lambda: infer(x)[0],
                                calls - 1)
    assert not errors
    _assert_whole_steps(outputs, rows)
    torch.testing.assert_close(chain(x)[0], rows[calls])


@pytest.mark.parametrize("trained", ["same model", "model holding it"])
def test_a_training_call_waits_for_an_inference_call_in_flight(monkeypatch,
                                                               trained):
    """Another thread starts a training call while an inference call is
    copying the trained weights to its device, after two of them: the
    training call waits for the inference call (one lock), which sees the
    weights of one step only."""
    from poptorch_core._executor import device_state

    chain, lr, x = _Chain(links=6), 0.25, torch.ones(1, 8)
    rows = _eager_outputs(chain, x, 3, lr)
    train, infer = _wrappers(chain, trained, lr)
    train(x)
    torch.testing.assert_close(infer(x)[0], rows[1])
    train(x)  # the next inference call copies the weights again
    trainer = threading.Thread(target=train, args=(x,))
    copy_into, copied = device_state._copy_into, []

    def copy_then_start_training(*args):
        copy_into(*args)
        copied.append(1)
        if len(copied) == 2:
            trainer.start()
            trainer.join(timeout=0.5)  # it finishes now only without a lock
    monkeypatch.setattr(device_state, "_copy_into", copy_then_start_training)
    out = infer(x)[0]
    monkeypatch.undo()
    trainer.join(timeout=60)
    assert not trainer.is_alive(), "deadlock"
    _assert_whole_steps([out], rows)
    torch.testing.assert_close(out, rows[2])
    torch.testing.assert_close(infer(x)[0], rows[3])


def test_a_training_wrapper_made_after_inference_calls_is_followed():
    """Which training model an inference model follows is looked up once
    and kept until a model is wrapped or unwrapped: a training wrapper made
    after inference calls is still followed (and shares their lock)."""
    other = MLP()
    poptorch.trainingModel(other)  # some model is wrapped for training
    chain, lr, x = _Chain(links=4), 0.25, torch.ones(1, 8)
    rows = _eager_outputs(chain, x, 2, lr)
    infer = poptorch.inferenceModel(chain)
    torch.testing.assert_close(infer(x)[0], rows[0])
    holder = _Holder(chain)
    train = poptorch.trainingModel(
        holder, optimizer=torch.optim.SGD(holder.parameters(), lr=lr))
    train(x)
    train(x)
    torch.testing.assert_close(infer(x)[0], rows[2])
