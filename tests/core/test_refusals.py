"""Refusals in the user's terms (issue 48, the core's cases): each bad
input or fault gives the exception type and the words that name the
problem and the fix, or a warning once where PopTorch runs it; the
traceback of every refusal starts at the public call the user made (all
frames with ``POPTORCH_FULL_TRACEBACKS=1``). One parametrised test per
entry point, as in ``tests/test_error_catalogue.py``.
"""
import contextlib
import importlib.util
import io
import json
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import time
import traceback

import pytest
import torch

import poptorch
import poptorch_core
from ._models import SumLoss

CORE_DIR = os.path.dirname(os.path.abspath(poptorch_core.__file__))


# --- Models and datasets ------------------------------------------------------

class Features(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, features):
        return self.fc(features)


class Energies(torch.nn.Module):
    def forward(self, energies):
        return energies * 2


class Unpicklable(torch.utils.data.Dataset):
    def __init__(self):
        self.make = lambda i: torch.full((2,), float(i))

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return self.make(i)


class WithNames(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.ones(2), f"molecule {i}"


class Ragged(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.ones(i % 3 + 1)


class Growing(torch.utils.data.Dataset):
    """Batches of 2 whose width changes from the second batch on."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.ones(2 + i // 2)


class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.full((2,), float(i))


class DiesLeavingAChild(torch.utils.data.Dataset):
    """Element 2 exits the worker, whose child keeps its pipe open: the
    worker stays a zombie until its parent reaps it."""

    def __len__(self):
        return 100

    def __getitem__(self, i):
        if i == 2:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
            os._exit(1)
        return torch.full((2,), float(i))


DS = torch.utils.data.TensorDataset(torch.randn(10, 2))


# --- Helpers -------------------------------------------------------------------

def _poptorch_frames(error):
    return [f for f in traceback.extract_tb(error.__traceback__)
            if os.path.abspath(f.filename).startswith(CORE_DIR)]


def _check(call, error, words):
    with pytest.raises(error, match=words) as info:
        call()
    # The traceback starts at the public call: below the user's frames,
    # only the public call's own frame.
    frames = _poptorch_frames(info.value)
    assert [f.name for f in frames] == ["public_call_boundary"], \
        traceback.format_tb(info.value.__traceback__)
    # The exceptions it chains (a collate error, ...) show the user's
    # frames only.
    cause = info.value.__cause__ or info.value.__context__
    while cause is not None:
        for frame in traceback.extract_tb(cause.__traceback__):
            assert not frame.filename.startswith(CORE_DIR) and \
                "site-packages" not in frame.filename, frame
        cause = cause.__cause__ or cause.__context__


def _file(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def _compiled(model, *inputs):
    ipu_model = poptorch.inferenceModel(model)
    ipu_model(*inputs)
    return ipu_model


# --- Options -----------------------------------------------------------------

OPTIONS = [
    (lambda p: poptorch.Options().loadFromFile(
        _file(p, "opts.bin", bytes(range(256)))), poptorch.ConfigFileError,
     r"opts.bin is not a text file .*setter calls, one per line, such as "
     r"deviceIterations\(4\)"),
    (lambda p: poptorch.Options().loadFromFile(_file(p, "opts.json", json.dumps(
        {"deviceIterations": 4, "outputMode": "OutputMode.All"}))),
     poptorch.ConfigFileError,
     r"opts.json holds JSON, but loadFromFile reads one setter call per "
     r"line.*from_json.*write the file as:\n  deviceIterations\(4\)\n"
     r"  outputMode\(poptorch.OutputMode.All\)"),
    (lambda p: poptorch.Options().deviceIterations(10**20), ValueError,
     r"device_iterations must be at most 2\*\*31 - 1 = 2147483647 .*32-bit"
     r".*Use a smaller count"),
    (lambda p: poptorch.Options().replicationFactor(2**31), ValueError,
     r"replication_factor must be at most 2\*\*31 - 1"),
    (lambda p: poptorch.Options().Training.gradientAccumulation(10**20),
     ValueError, r"gradient_accumulation must be at most 2\*\*31 - 1"),
    (lambda p: poptorch.Options()._Popart.set("enableStableNorn", True),
     poptorch.Error, "Unknown backend option 'enableStableNorn': did you mean "
     r"'enableStableNorm'\? Use opts._Popart.set\('enableStableNorm'"),
    (lambda p: poptorch.Options()._Popart.set("enableStableNorm", object()),
     poptorch.Error, "Unknown value type object for option enableStableNorm: "
     "backend options take bools, numbers, strings.*Pass the value"),
    (lambda p: poptorch.Options().from_json('{"deviceIteration": 2}'),
     AttributeError, "Invalid attribute deviceIteration.*did you mean "
     "'deviceIterations'"),
]


@pytest.mark.parametrize("call, error, words", OPTIONS)
def test_options(tmp_path, call, error, words):
    _check(lambda: call(tmp_path), error, words)


@pytest.mark.parametrize("apply", [
    lambda opts, p: opts.loadFromFile(_file(
        p, "opts.cfg", "deviceIterations(4)\nreplicationFactor(-1)\n")),
    lambda opts, p: opts.from_json(
        '{"deviceIterations": 4, "replicationFactor": -1}'),
])
def test_failed_settings_leave_the_options_unchanged(tmp_path, apply):
    opts = poptorch.Options().randomSeed(3)
    before = repr(opts)
    with pytest.raises(ValueError, match="replication_factor must be a "
                       "positive integer"):
        apply(opts, tmp_path)
    assert repr(opts) == before and opts.device_iterations == 1


# --- Environment variables ---------------------------------------------------

ENVIRONMENT = [
    ({"POPTORCH_DEFAULT_OPTIONS": "{bad"}, ValueError,
     "Environment variable POPTORCH_DEFAULT_OPTIONS='{bad': Options JSON is "
     "not valid JSON .*Fix the variable or unset it"),
    ({"POPTORCH_DEFAULT_OPTIONS": "0"}, ValueError,
     "POPTORCH_DEFAULT_OPTIONS='0': Options JSON must be an object"),
    ({"POPTORCH_DEFAULT_OPTIONS": '{"deviceIterations": 0}'}, ValueError,
     "POPTORCH_DEFAULT_OPTIONS=.*device_iterations must be a positive "
     "integer.*Fix the variable"),
    ({"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "2"}, ValueError,
     r"OMPI_COMM_WORLD_RANK='4' is not the rank of a process of the run "
     r"\(OMPI_COMM_WORLD_SIZE='2'\).*from 0 to the process count - 1"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, ValueError,
     r"RANK='-1' is not the rank of a process of the run \(WORLD_SIZE='2'\)"),
    ({"OMPI_COMM_WORLD_SIZE": "0"}, ValueError,
     "OMPI_COMM_WORLD_SIZE='0' must be the number of processes of the run"),
]


@pytest.mark.parametrize("env, error, words", ENVIRONMENT)
def test_environment_variables(monkeypatch, env, error, words):
    for var in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "RANK",
                "WORLD_SIZE", "POPTORCH_DEFAULT_OPTIONS"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    _check(poptorch.Options, error, words)


# --- Wrappers, calls and files -------------------------------------------------

def _save_model_of_module(tmp_path, source):
    """Saves a compiled model whose class lives in a module file."""
    path = tmp_path / "changing_model.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("changing_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["changing_model"] = module
    spec.loader.exec_module(module)
    saved = str(tmp_path / "model.poptorch")
    _compiled(module.Net(), torch.ones(2, 4)).save(saved)
    return path, saved


_NET = """import torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
"""


def _load_after_class_change(tmp_path, new_source):
    path, saved = _save_model_of_module(tmp_path, _NET)
    if new_source is None:
        del sys.modules["changing_model"]
    else:
        path.write_text(new_source)
        spec = importlib.util.spec_from_file_location("changing_model", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["changing_model"] = module
        spec.loader.exec_module(module)
    try:
        return poptorch.load(saved)
    finally:
        sys.modules.pop("changing_model", None)


_NET_WITH_PROJECTION = _NET.replace(
    "self.fc = torch.nn.Linear(4, 2)",
    "self.fc = torch.nn.Linear(4, 2)\n"
    "        self.proj = torch.nn.Linear(2, 2)").replace(
        "return self.fc(x)", "return self.proj(self.fc(x))")

WRAPPERS = [
    (lambda p: poptorch.trainingModel(SumLoss(2, 1), optimizer=torch.optim.SGD),
     TypeError, r"optimizer is the class torch.optim.SGD, not an optimizer: "
     r"create one .*torch.optim.SGD\(model.parameters\(\), lr=0.01\)"),
    (lambda p: poptorch.trainingModel(SumLoss(2, 1),
                                      optimizer=poptorch.optim.SGD),
     TypeError, r"the class poptorch.optim.SGD, not an optimizer.*"
     r"poptorch.optim.SGD\(model.parameters\(\)"),
    (lambda p: poptorch.trainingModel(SumLoss(2, 1)).setOptimizer(
        torch.optim.Adam), TypeError,
     r"the class torch.optim.Adam, not an optimizer"),
    (lambda p: poptorch.inferenceModel(Features())(
        torch.ones(3, 4, dtype=torch.int64)), poptorch.Error,
     r"The input 'features' is an integer tensor \(torch.int32 on the IPU\) "
     r"and linear needs floating point \(torch: mat1 and mat2 must have the "
     r"same dtype.*model\(features.float\(\)\), or in forward: features = "
     r"features.float\(\).\n  at .*test_refusals.py:\d+ in forward"),
    (lambda p: _load_after_class_change(p, _NET_WITH_PROJECTION),
     poptorch.Error,
     r"poptorch.load\('.*model.poptorch'\): the saved model is a "
     r"changing_model.Net, and the class Net defined now differs from the "
     r"one it was saved with \(its source code changed; the saved object "
     r"lacks an attribute it reads\).*AttributeError: 'Net' object has no "
     r"attribute 'proj'. The saved model has the submodules: fc. Run with "
     r"the class as it was when the model was saved, or .*load_state_dict"),
    (lambda p: _load_after_class_change(p, None), poptorch.Error,
     r"No module named 'changing_model'\): the saved model's class cannot be "
     r"found. Import or define it"),
]


@pytest.mark.parametrize("call, error, words", WRAPPERS)
def test_wrappers_calls_and_files(tmp_path, call, error, words):
    _check(lambda: call(tmp_path), error, words)


# --- Data loading ---------------------------------------------------------------

def test_dataloader_without_options():
    _check(lambda: poptorch.DataLoader(DS, batch_size=2), AssertionError,
           r"poptorch.DataLoader takes the options first, then the dataset, "
           r"and got a TensorDataset without options: call poptorch."
           r"DataLoader\(poptorch.Options\(\), dataset, batch_size=...\)")


def _async(dataset, **async_options):
    return list(poptorch.DataLoader(
        poptorch.Options(), dataset, batch_size=2,
        mode=poptorch.DataLoaderMode.Async, async_options=async_options))


ASYNC = [
    (lambda: _async(DS, buffer_size=0), ValueError,
     "buffer_size must be a positive integer, got 0"),
    (lambda: _async(Unpicklable()), poptorch.Error,
     "could not start its worker process with SharingStrategy.ForkServer: "
     "Can't pickle local object.*make it picklable .*SharingStrategy.Fork"),
    (lambda: _async(WithNames()), poptorch.Error,
     r"LayoutError: The first element holds a value of type str at \[1\]\[0\]"
     r".*only transfers tensors.*Convert the value to a tensor"),
    (lambda: _async(Ragged()), poptorch.Error,
     "stack expects each tensor to be equal size.*while loading batch 0 of "
     "the DataLoader"),
    (lambda: _async(Growing()), poptorch.Error,
     r"An error occurred in the data fetcher: .*LayoutError: Tensor 0 of the "
     r"element at batch 1 of the DataLoader has shape \(2, 3\).*pad the "
     r"elements to a fixed size"),
]


@pytest.mark.parametrize("placement", ["inline", "worker"])
@pytest.mark.parametrize("call, error, words", ASYNC)
def test_async_loading_refuses_the_same_in_both_placements(
        monkeypatch, placement, call, error, words):
    """A script must behave the same on a machine where Async loads in a
    worker process and on one where it loads in this process."""
    monkeypatch.setenv("POPTORCH_ASYNC_PLACEMENT", placement)
    _check(call, error, words)


def test_async_picklability_check_skips_tensor_data():
    """The check runs where Async loads in this process, once per loader:
    it pickles everything but the tensors' data."""
    from poptorch_core.data import _process
    big = torch.utils.data.TensorDataset(torch.zeros(2**20, 16))  # 64 MiB
    written = io.BytesIO()
    _process._PicklerWithoutTensors(written).dump(big)
    assert len(written.getvalue()) < 10_000
    _process.check_picklable(big, poptorch.SharingStrategy.ForkServer)
    # The reference: plain pickle refuses the dataset as the worker would.
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(Unpicklable())
    with pytest.raises(poptorch.Error, match="Can't pickle local object"):
        _process.check_picklable(Unpicklable(),
                                 poptorch.SharingStrategy.ForkServer)
    # Fork pickles nothing.
    _process.check_picklable(Unpicklable(), poptorch.SharingStrategy.Fork)


def _first_error_within(accessor, seconds):
    start = time.monotonic()
    with pytest.raises(poptorch.Error) as info:
        for _ in accessor:
            assert time.monotonic() - start < seconds
    return info.value, time.monotonic() - start


def test_a_stopped_worker_is_reported_within_seconds():
    # The timeout stays long (as a slow worker needs): only the stopped
    # state ends the wait early.
    accessor = poptorch.AsynchronousDataAccessor(Slow(), timeout=20.0)
    iterator = iter(accessor)
    next(iterator)
    pid = accessor._worker.pid  # pylint: disable=protected-access
    os.kill(pid, signal.SIGSTOP)
    try:
        error, elapsed = _first_error_within(iterator, 15.0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        accessor.terminate()
    assert elapsed < 5.0, elapsed
    assert "has been stopped (SIGSTOP)" in str(error)
    assert "resume a stopped one (kill -CONT <pid>)" in str(error)
    assert "larger timeout" not in str(error)


def test_a_zombie_worker_is_reported_within_seconds():
    accessor = poptorch.AsynchronousDataAccessor(
        DiesLeavingAChild(), timeout=20.0,
        sharing_strategy=poptorch.SharingStrategy.Fork)
    try:
        error, elapsed = _first_error_within(iter(accessor), 15.0)
    finally:
        accessor.terminate()
    assert elapsed < 5.0, elapsed
    assert "exited with code 1. No more data can be loaded" in str(error)


# --- Two processes with one rank ------------------------------------------------

def _rank_zero_process(port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      RANK="0", WORLD_SIZE="2")
    for var in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "TORCHELASTIC_USE_AGENT_STORE"):
        os.environ.pop(var, None)
    opts = poptorch.Options()
    opts.Simulator.distributedTimeout(3)
    try:
        poptorch.trainingModel(SumLoss(2, 1), opts)(torch.ones(2, 2))
        results.put((os.getpid(), "no error"))
    except Exception as error:  # pylint: disable=broad-except
        results.put((os.getpid(), f"{type(error).__name__}: {error}"))


def test_two_processes_with_the_same_rank_are_told_so():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    first = context.Process(target=_rank_zero_process, args=(port, results))
    first.start()
    time.sleep(1.0)  # the first one hosts the run's store
    second = context.Process(target=_rank_zero_process, args=(port, results))
    second.start()
    reports = {}
    try:
        deadline = time.monotonic() + 60
        while second.pid not in reports and time.monotonic() < deadline:
            pid, message = results.get(timeout=deadline - time.monotonic())
            reports[pid] = message
    finally:
        for process in (first, second):
            process.kill()
            process.join(10)
    message = reports[second.pid]
    assert f"pid {first.pid} on {socket.gethostname()} already joined the " \
        "run" in message
    assert "as rank 0: two processes were given the same rank" in message
    assert "Each of the 2 processes needs its own rank, 0 to 1" in message
    assert "EADDRINUSE" not in message


# --- Warnings where PopTorch runs it ------------------------------------------

def _warnings(caplog, run):
    caplog.clear()
    with caplog.at_level("WARNING", logger="poptorch::python"):
        run()
    return [r.getMessage() for r in caplog.records]


def test_float64_beyond_float32_warns_once_naming_the_input(caplog):
    model = poptorch.inferenceModel(Energies())
    x = torch.tensor([1e300, 1.0], dtype=torch.float64)
    messages = _warnings(caplog, lambda: (model(x), model(x)))
    assert torch.isinf(model(x)[0])   # the IPU's value, as PopTorch's
    overflow = [m for m in messages if "float32's range" in m]
    assert len(overflow) == 1, messages
    assert "The input 'energies' of dtype torch.float64 holds 1e+300" in \
        overflow[0] and "Scale the values" in overflow[0]
    in_range = poptorch.inferenceModel(Energies())
    assert not _warnings(caplog, lambda: in_range(
        torch.tensor([1e30], dtype=torch.float64)))


def test_host_weight_edits_warn_once_naming_copy_weights_to_device(caplog):
    model = Features()
    ipu_model = _compiled(model, torch.ones(2, 4))
    reference = model(torch.ones(2, 4)).detach()
    with torch.no_grad():
        model.fc.weight.fill_(0.0)
    messages = _warnings(caplog, lambda: [ipu_model(torch.ones(2, 4))
                                          for _ in range(2)])
    # Semantics unchanged: the device keeps the weights it had.
    torch.testing.assert_close(ipu_model(torch.ones(2, 4)), reference)
    edits = [m for m in messages if "host copy of" in m]
    assert len(edits) == 1, messages
    assert "fc.weight changed after the model was compiled" in edits[0]
    assert "Call model.copyWeightsToDevice()" in edits[0]
    ipu_model.copyWeightsToDevice()
    assert not _warnings(caplog, lambda: ipu_model(torch.ones(2, 4)))


def test_lr_edits_without_set_optimizer_warn_once(caplog):
    model = SumLoss(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    training = poptorch.trainingModel(model, optimizer=optimizer)
    x = torch.ones(2, 2)
    training(x)
    optimizer.param_groups[0]["lr"] = 0.5
    messages = _warnings(caplog, lambda: (training(x), training(x)))
    edits = [m for m in messages if "param_groups" in m]
    assert len(edits) == 1, messages
    assert "param_groups[0]['lr'] changed from 0.1 to 0.5" in edits[0]
    assert "training_model.setOptimizer(optimizer)" in edits[0]
    training.setOptimizer(optimizer)
    assert not _warnings(caplog, lambda: training(x))


def test_load_executable_of_another_models_file_warns(tmp_path, caplog):
    path = str(tmp_path / "linear.poptorch")
    _compiled(torch.nn.Linear(4, 2), torch.ones(2, 4)).save(path)
    other = poptorch.inferenceModel(torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)))
    messages = _warnings(caplog, lambda: other.loadExecutable(path))
    assert any("the file was saved from a torch.nn.modules.linear.Linear" in m
               and "poptorch.load(" in m for m in messages), messages
    same = poptorch.inferenceModel(torch.nn.Linear(4, 2))
    assert not _warnings(caplog, lambda: same.loadExecutable(path))


def test_a_changed_class_that_still_traces_warns(tmp_path, caplog):
    changed = _NET.replace("return self.fc(x)", "return self.fc(x).relu()")
    messages = _warnings(caplog, lambda: _load_after_class_change(
        tmp_path, changed))
    assert any("changing_model.Net changed since it was saved (its source "
               "code changed)" in m for m in messages), messages


def test_an_unknown_backend_option_is_stored_with_a_warning(caplog):
    opts = poptorch.Options()
    messages = _warnings(caplog, lambda: opts._Popart.set("myBackendKnob", 1))
    assert opts._Popart.options["myBackendKnob"] == 1
    assert any("'myBackendKnob' is not a PopART session option" in m
               for m in messages), messages
    # Dotted names set a field of a known structured option.
    assert not _warnings(caplog, lambda: opts._Popart.set(
        "automaticLossScalingSettings.enabled", True))


# --- Tracebacks -------------------------------------------------------------------

def test_full_tracebacks_flag_keeps_poptorch_frames(monkeypatch):
    def refusal():
        poptorch.inferenceModel(Features())(torch.ones(3, 4, dtype=torch.int64))

    with pytest.raises(poptorch.Error) as short:
        refusal()
    monkeypatch.setenv(poptorch_core.errors.FULL_TRACEBACKS_ENV, "1")
    with pytest.raises(poptorch.Error) as full:
        refusal()
    assert len(_poptorch_frames(short.value)) == 1
    # The executor, the compiler and the capture are all there again.
    names = {f.name for f in _poptorch_frames(full.value)}
    assert {"build_program", "capture_module"} <= names, names


def test_errors_of_the_users_own_code_keep_their_frames():
    class Broken(torch.nn.Module):
        def forward(self, x):
            return x + undefined_name  # noqa: F821

    with pytest.raises(NameError) as info:
        poptorch.inferenceModel(Broken())(torch.ones(2))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "forward" and frames[-1].filename == __file__
