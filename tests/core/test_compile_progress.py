"""The compilation progress bar over the calls that compile, and
``compilationTime()`` (``_executor/compile_progress.py``)."""
import datetime

import pytest
import torch

import poptorch
from poptorch_core.options import _progress

from ._models import SumLoss

class _Recorder:
    """Stands in for ``Options._progress_bar``: records each update and
    whether the bar was closed without finishing."""

    def __init__(self):
        self.updates = []
        self.closed = 0

    def __call__(self, progress, total):
        assert total == 100
        self.updates.append(progress)

    def close(self):
        self.closed += 1


def _recording(model):
    recorder = _Recorder()
    # The wrapper's options are frozen: set the attribute underneath.
    model._state.options.__dict__["_progress_bar"] = recorder
    return recorder


def test_tracing_alone_runs_the_bar_to_the_end():
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    bar = _recording(model)
    model(torch.ones(1, 2))
    model(torch.ones(1, 2))  # compiles nothing: no bar
    assert bar.updates == [0, 100] and bar.closed == 0


def test_explicit_compile_shows_the_bar_over_tracing():
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    bar = _recording(model)
    model.compile(torch.ones(1, 2))
    model(torch.ones(1, 2))
    assert bar.updates == [0, 100]


def test_a_failed_compilation_closes_its_bar():
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("broken model")

    model = poptorch.inferenceModel(Broken())
    bar = _recording(model)
    with pytest.raises(RuntimeError, match="broken model"):
        model(torch.ones(1, 2))
    assert bar.updates == [0] and bar.closed == 1


def test_no_bar_when_switched_off_and_no_time_to_ask_for():
    opts = poptorch.Options().showCompilationProgressBar(False)
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    bar = _recording(model)
    model(torch.ones(1, 2))
    assert bar.updates == []
    with pytest.raises(poptorch.Error, match="showCompilationProgressBar"):
        model.compilationTime()


def _compile_backend(**kwargs) -> poptorch.Options:
    opts = poptorch.Options()
    opts.Simulator.backend("compile")
    if kwargs.get("offline"):
        opts.useOfflineIpuTarget()
    return opts


def test_compile_compiles_the_backend_too_under_one_bar():
    model = poptorch.trainingModel(SumLoss(4, 4), _compile_backend())
    bar = _recording(model)
    model.compile(torch.ones(2, 4))
    executable = model._state.program.executable
    assert executable.compilations == 1 and executable.compile_seconds > 0
    compiled = model.compilationTime()
    model(torch.ones(2, 4))
    model(torch.ones(2, 4))
    # compile(): traced (30), inductor's code generated (70), built (100);
    # the calls compile nothing.
    assert bar.updates == [0, 30, 70, 100]
    assert executable.compilations == 1
    assert model.compilationTime() == compiled
    assert compiled > datetime.timedelta(seconds=executable.compile_seconds)


def test_an_offline_compile_leaves_the_backend_alone():
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2),
                                    _compile_backend(offline=True))
    bar = _recording(model)
    model.compile(torch.ones(1, 2))
    assert model._state.program.executable.compilations == 0
    assert bar.updates == [0, 100]


def test_a_first_call_that_traces_and_compiles_shows_one_bar():
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2),
                                    _compile_backend())
    bar = _recording(model)
    model(torch.ones(1, 2))
    assert bar.updates == [0, 30, 70, 100]
    assert model.compilationTime() > datetime.timedelta(
        seconds=model._state.program.executable.compile_seconds)


def test_a_compilation_shows_its_bar_once_it_takes_long(monkeypatch, capsys):
    monkeypatch.setattr(_progress, "SHOW_AFTER_S", 0.0)
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    model(torch.ones(1, 2))
    err = capsys.readouterr().err
    assert "Graph compilation" in err and "100/100" in err
    model(torch.ones(1, 2))
    assert "Graph compilation" not in capsys.readouterr().err


def test_a_compilation_within_the_delay_prints_nothing(monkeypatch, capsys):
    monkeypatch.setattr(_progress, "SHOW_AFTER_S", 600.0)
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    model(torch.ones(1, 2))
    assert "Graph compilation" not in capsys.readouterr().err
    assert model._state.options._progress_bar._timer is None


def test_the_bar_appears_after_the_delay_without_an_update(monkeypatch,
                                                           capsys):
    monkeypatch.setattr(_progress, "SHOW_AFTER_S", 0.05)
    bar = _progress.CompilationProgressBar()
    bar(30, 100)
    bar._timer.join()  # fires after 0.05 s, with no update since
    assert "30/100" in capsys.readouterr().err
    bar(100, 100)
    assert bar._timer is None and bar.compilation_time is not None


def _adam(model):
    return poptorch.optim.Adam(model.parameters(), lr=0.01)


def _sgd(model):
    return poptorch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize("optimizer,forms", [(_adam, "_adam_steps"),
                                             (_sgd, "_steps")],
                         ids=["adam in the graph", "one-graph step"])
def test_compile_ahead_makes_the_form_the_calls_run(optimizer, forms):
    """What ``compile()`` compiles is what the calls run: no second
    compilation, and the same training as ``interpret``'s."""
    torch.manual_seed(0)
    reference = SumLoss(4, 4)
    compiled = poptorch.trainingModel(
        reference, _compile_backend(), optimizer(reference))
    torch.manual_seed(0)
    twin = SumLoss(4, 4)
    interpreted = poptorch.trainingModel(twin, poptorch.Options(),
                                         optimizer(twin))
    x = torch.randn(2, 4)
    compiled.compile(x)
    executable = compiled._state.program.executable
    assert executable.compilations == 1 and getattr(executable, forms)
    for _ in range(3):
        out, loss = compiled(x)
        expected_out, expected_loss = interpreted(x)
        torch.testing.assert_close(out, expected_out)
        torch.testing.assert_close(loss, expected_loss)
    assert executable.compilations == 1


def test_compile_ahead_of_an_inference_model():
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 2)
    model = poptorch.inferenceModel(linear, _compile_backend())
    x = torch.randn(4, 3)
    model.compile(x)
    torch.testing.assert_close(model(x), linear(x))
    assert model._state.program.executable.compilations == 1


def test_compile_ahead_with_accumulation_and_device_iterations():
    """Several micro-batches per call: the Adam update leaves the graph
    (the one-graph step with the optimizer after it), compiled ahead for
    the first micro-batch and reused by every one."""
    torch.manual_seed(0)
    model = SumLoss(4, 4)
    opts = _compile_backend().deviceIterations(2)
    opts.Training.gradientAccumulation(2)
    compiled = poptorch.trainingModel(model, opts, _adam(model))
    x = torch.randn(8, 4)
    compiled.compile(x)
    executable = compiled._state.program.executable
    assert executable.compilations == 1 and executable._steps
    compiled(x)
    compiled(x)
    assert executable.compilations == 1 and not executable._adam_steps
