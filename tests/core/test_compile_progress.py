"""The compilation progress bar over the calls that compile, and
``compilationTime()`` (``executor/_compile_progress.py``)."""
import datetime

import pytest
import torch

import poptorch
from poptorch_core.options import _progress


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


class _WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        out = self.linear(x)
        return out, poptorch.identity_loss(out.sum(), reduction="none")


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


def test_the_compile_backend_compiles_on_the_first_call_under_the_bar():
    opts = poptorch.Options()
    opts.Simulator.backend("compile")
    model = poptorch.trainingModel(_WithLoss(), opts)
    bar = _recording(model)
    model.compile(torch.ones(2, 4))
    traced = model.compilationTime()
    executable = model._state.program.executable
    assert executable.compilations == 0
    model(torch.ones(2, 4))
    model(torch.ones(2, 4))
    # compile(): tracing; the first call: inductor (70 once its code is
    # generated), to the first result; the second call compiles nothing.
    assert bar.updates == [0, 100, 0, 70, 100]
    assert executable.compilations == 1 and executable.compile_seconds > 0
    assert model.compilationTime() == traced + datetime.timedelta(
        seconds=executable.compile_seconds)


def test_a_first_call_that_traces_and_compiles_shows_one_bar():
    opts = poptorch.Options()
    opts.Simulator.backend("compile")
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
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
    bar = _progress._CompilationProgressBar()
    bar(30, 100)
    bar._timer.join()  # fires after 0.05 s, with no update since
    assert "30/100" in capsys.readouterr().err
    bar(100, 100)
    assert bar._timer is None and bar.compilation_time is not None
