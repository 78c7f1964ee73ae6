"""AsynchronousDataAccessor: transfers, epochs, re-batching, failures and
clean shutdown. References are plain indexing of the dataset and plain
torch DataLoaders."""
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import poptorch_core as poptorch
from poptorch_core import AsynchronousDataAccessor, SharingStrategy

# Datasets live at module level: the default ForkServer strategy pickles the
# dataset, so the worker must be able to import its class.


class Squares(torch.utils.data.Dataset):
    """Element i is (i, [i, i^2]) in several container shapes."""

    def __init__(self, length=10, kind="tuple"):
        self.length = length
        self.kind = kind

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        x = torch.tensor([i, i * i], dtype=torch.float32)
        y = torch.tensor(i)
        if self.kind == "tensor":
            return x
        if self.kind == "list":
            return [x, y]
        if self.kind == "dict":
            return {"x": x, "y": y}
        return (x, y)


class Pair:
    """A user batch type, passed through a registered custom parser."""

    def __init__(self, a, b):
        self.a = a
        self.b = b


class PairParser(poptorch.ICustomArgParser):

    def yieldTensors(self, struct):
        yield struct.a
        yield struct.b

    def reconstruct(self, original_structure, tensor_iterator):
        return Pair(next(tensor_iterator), next(tensor_iterator))


# Module level, so the worker registers it too when it imports this module.
poptorch.registerCustomArgParser(Pair, PairParser())


class PairDataset(torch.utils.data.Dataset):

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return Pair(torch.full((3,), float(i)), torch.tensor([i, -i]))


class FailsAt(torch.utils.data.Dataset):

    def __init__(self, bad_index, length=10):
        self.bad_index = bad_index
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        if i == self.bad_index:
            raise KeyError(f"sample {i} is corrupt")
        return torch.full((2,), float(i))


class Recording(torch.utils.data.Dataset):
    """Marks each index it loads in a shared tensor the test can read."""

    def __init__(self, length=20):
        self.loaded = torch.zeros(length, dtype=torch.int32).share_memory_()

    def __len__(self):
        return len(self.loaded)

    def __getitem__(self, i):
        self.loaded[i] += 1
        return torch.tensor([i])


class Slow(torch.utils.data.Dataset):

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        time.sleep(0.02)
        return torch.tensor([i])


class StallsAfter(Squares):
    """Elements from ``first_stalled`` on take two minutes: a process
    loading one is stuck there, out of reach of torch's DataLoader watchdog
    (which a worker only consults between elements)."""

    def __init__(self, first_stalled, length=40):
        super().__init__(length)
        self.first_stalled = first_stalled

    def __getitem__(self, i):
        if i >= self.first_stalled:
            time.sleep(120)
        return super().__getitem__(i)


class Variable(torch.utils.data.Dataset):
    """Element 3 is longer than the first one: it cannot fit the ring."""

    def __len__(self):
        return 5

    def __getitem__(self, i):
        return torch.zeros(4 if i == 3 else 2)


class WithInt(torch.utils.data.Dataset):

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return (torch.tensor([i]), i)


class Wedged(torch.utils.data.Dataset):
    """Element 2 never finishes loading (a deadlock in __getitem__)."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 2:
            threading.Event().wait()
        return torch.full((2,), float(i))


class Empty(torch.utils.data.Dataset):

    def __len__(self):
        return 0

    def __getitem__(self, i):
        raise IndexError(i)


class Stream(torch.utils.data.IterableDataset):

    def __iter__(self):
        for i in range(7):
            yield torch.tensor([i, 10 * i])


def reference(dataset):
    return [dataset[i] for i in range(len(dataset))]


def clone(element):
    if isinstance(element, torch.Tensor):
        return element.clone()
    if isinstance(element, dict):
        return {k: clone(v) for k, v in element.items()}
    if isinstance(element, Pair):
        return Pair(element.a.clone(), element.b.clone())
    return type(element)(clone(v) for v in element)


def assert_same(actual, expected):
    assert type(actual) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype
        assert torch.equal(actual, expected)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    elif isinstance(expected, Pair):
        assert_same(actual.a, expected.a)
        assert_same(actual.b, expected.b)
    else:
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)


def assert_epoch(accessor, expected):
    got = [clone(element) for element in accessor]
    assert len(got) == len(expected)
    for actual, wanted in zip(got, expected):
        assert_same(actual, wanted)


def pid_exists(pid):
    """True while ``pid`` exists, zombie or not (a zombie was not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stat(pid):
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        # The command name, in parentheses, may contain spaces.
        return handle.read().rsplit(")", 1)[1].split()


def children_of(pid):
    children = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and int(_stat(entry)[1]) == pid:
                children.append(int(entry))
        except OSError:
            pass  # exited meanwhile
    return children


def eventually_gone(pid, timeout=60.0):
    """Waits for ``pid`` to stop running (a zombie counts as stopped: the
    orphans here are reaped by init, not by the test)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _stat(pid)[0] in ("Z", "X"):
                return True
        except OSError:
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("kind", ["tensor", "tuple", "list", "dict"])
def test_containers_two_epochs_and_reset(kind):
    dataset = Squares(kind=kind)
    expected = reference(dataset)
    with AsynchronousDataAccessor(dataset) as accessor:
        assert len(accessor) == len(dataset)
        assert_epoch(accessor, expected)
        assert_epoch(accessor, expected)  # second epoch, already preloaded
        # A partial epoch followed by iter() restarts from the beginning.
        partial = iter(accessor)
        for _ in range(4):
            next(partial)
        assert_epoch(accessor, expected)


def test_custom_parser_type():
    dataset = PairDataset()
    with AsynchronousDataAccessor(dataset, buffer_size=2) as accessor:
        assert_epoch(accessor, reference(dataset))


@pytest.mark.parametrize("strategy", list(SharingStrategy))
def test_sharing_strategies(strategy):
    dataset = Squares(length=5)
    with AsynchronousDataAccessor(dataset,
                                  sharing_strategy=strategy) as accessor:
        assert_epoch(accessor, reference(dataset))


def test_fork_accepts_unpicklable_dataset_forkserver_explains():
    loader = torch.utils.data.DataLoader(
        Squares(length=6), batch_size=2,
        collate_fn=lambda batch: torch.stack([x for x, _ in batch]))
    expected = [torch.stack([Squares()[j][0] for j in (i, i + 1)])
                for i in range(0, 6, 2)]
    with AsynchronousDataAccessor(
            loader, sharing_strategy=SharingStrategy.Fork) as accessor:
        assert_epoch(accessor, expected)
    with pytest.raises(poptorch.Error, match="make it picklable"):
        AsynchronousDataAccessor(loader)


def test_iterable_dataset_and_load_indefinitely_false():
    dataset = Stream()
    expected = list(dataset)
    with AsynchronousDataAccessor(dataset,
                                  load_indefinitely=False) as accessor:
        assert_epoch(accessor, expected)
        with pytest.raises(StopIteration):
            next(accessor)  # stays exhausted until iter()
        assert_epoch(accessor, expected)


def test_torch_loader_with_worker_processes():
    # The accessor's worker is not a daemon, so it may start its own.
    dataset = Squares(length=12)
    loader = torch.utils.data.DataLoader(dataset, batch_size=3, num_workers=2)
    expected = [clone(batch) for batch in loader]
    with AsynchronousDataAccessor(loader) as accessor:
        assert len(accessor) == 4
        assert_epoch(accessor, expected)
        assert_epoch(accessor, expected)


@pytest.mark.parametrize("drop_last", [False, True])
def test_rebatching_matches_flat_sequence(drop_last):
    dataset = Squares(length=11)
    loader = torch.utils.data.DataLoader(dataset, batch_size=3,
                                         drop_last=drop_last)
    flat_x = torch.cat([x for x, _ in loader])
    flat_y = torch.cat([y for _, y in loader])
    expected = [(flat_x[i:i + 4], flat_y[i:i + 4])
                for i in range(0, len(flat_x), 4)]
    if drop_last and len(expected[-1][0]) < 4:
        expected.pop()
    expected = [list(e) for e in expected]  # the loader yields lists
    with AsynchronousDataAccessor(loader, rebatched_size=4) as accessor:
        assert len(accessor) == len(expected)
        assert_epoch(accessor, expected)


@pytest.mark.parametrize("early_preload", [False, True])
def test_preloading(early_preload):
    dataset = Recording()
    buffer_size = 3
    with AsynchronousDataAccessor(dataset, buffer_size=buffer_size,
                                  early_preload=early_preload) as accessor:
        expected = buffer_size if early_preload else 1
        deadline = time.monotonic() + 120
        while int(dataset.loaded.sum()) < expected and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        # Room to (wrongly) load more. Nothing signals that a load did not
        # happen, so this one wait stays; a slow machine can only make it
        # miss an extra load, never fail a correct accessor.
        time.sleep(0.2)
        assert int(dataset.loaded.sum()) == expected
        assert [int(t) for t in accessor] == list(range(len(dataset)))


def test_loading_error_names_index_and_keeps_traceback():
    with AsynchronousDataAccessor(FailsAt(5)) as accessor:
        seen = []
        with pytest.raises(AssertionError,
                           match="An error occurred in the data fetcher") \
                as info:
            for element in accessor:
                seen.append(int(element[0]))
        assert seen == [0, 1, 2, 3, 4]
        error = info.value
        assert isinstance(error, poptorch.Error)
        assert "dataset index 5" in str(error)
        assert "sample 5 is corrupt" in str(error)
        # The worker's traceback, down to the line that raised.
        assert 'raise KeyError(f"sample {i} is corrupt")' in str(error)
        assert isinstance(error.__cause__, KeyError)
        # The accessor recovers: iter() reloads from the start.
        seen = []
        with pytest.raises(poptorch.Error, match="dataset index 5"):
            for element in accessor:
                seen.append(int(element[0]))
        assert seen == [0, 1, 2, 3, 4]


def test_setup_errors():
    with pytest.raises(poptorch.Error, match="The Dataset is empty"):
        AsynchronousDataAccessor(Empty())
    with pytest.raises(poptorch.Error,
                       match="(?s)worker thread failed to start.*"
                       "dataset index 0.*sample 0 is corrupt"):
        AsynchronousDataAccessor(FailsAt(0))
    with pytest.raises(poptorch.Error,
                       match="(?s)failed to start.*type int at \\[1\\]"):
        AsynchronousDataAccessor(WithInt())


def test_element_that_does_not_fit():
    with AsynchronousDataAccessor(Variable()) as accessor:
        with pytest.raises(poptorch.Error,
                           match="(?s)dataset index 3.*shape \\(4,\\).*"
                           "allocated for shape \\(2,\\)"):
            list(accessor)


def test_argument_validation():
    with pytest.raises(ValueError, match="buffer_size"):
        AsynchronousDataAccessor(Squares(), buffer_size=0)
    with pytest.raises(AssertionError, match="rebatched_size"):
        AsynchronousDataAccessor(Squares(), rebatched_size=1)
    with pytest.raises(ValueError, match="sharing_strategy"):
        AsynchronousDataAccessor(Squares(), sharing_strategy=7)


def test_killed_worker_raises_instead_of_hanging():
    accessor = AsynchronousDataAccessor(Slow())
    iterator = iter(accessor)
    next(iterator)
    pid = accessor._worker.pid  # pylint: disable=protected-access
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(AssertionError, match="(?s)data fetcher.*SIGKILL"):
        for _ in iterator:
            pass
    assert not pid_exists(pid)  # reaped, not a zombie
    with pytest.raises(poptorch.Error, match="SIGKILL"):
        iter(accessor)
    accessor.terminate()


def test_killed_worker_takes_its_loader_workers_with_it():
    # Batch 0 loads, then both loader workers are stuck in a stalled
    # element: only the accessor's sweep of the process group can end them
    # within the generous bound below.
    loader = torch.utils.data.DataLoader(StallsAfter(2), batch_size=2,
                                         num_workers=2,
                                         persistent_workers=True)
    accessor = AsynchronousDataAccessor(loader)
    next(iter(accessor))
    pid = accessor._worker.pid  # pylint: disable=protected-access
    loader_workers = children_of(pid)
    assert len(loader_workers) == 2
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(poptorch.Error, match="SIGKILL"):
        list(accessor)
    assert all(eventually_gone(p) for p in loader_workers)


def test_terminate_is_idempotent_and_reaps():
    accessor = AsynchronousDataAccessor(Slow())
    pid = accessor._worker.pid  # pylint: disable=protected-access
    assert int(next(iter(accessor))) == 0
    accessor.terminate()
    accessor.terminate()
    assert not pid_exists(pid)
    with pytest.raises(poptorch.Error, match="terminated"):
        next(accessor)


_SCRIPT = textwrap.dedent("""
    import signal, sys, time, torch
    import poptorch_core as poptorch
    # Ctrl-C raises KeyboardInterrupt, as in a terminal, even if the
    # process that started this one ignores SIGINT (its children inherit
    # that).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, {test_dir!r})
    from test_async_accessor import Slow
    poptorch.setLogLevel("DEBUG")
    accessor = poptorch.AsynchronousDataAccessor(
        Slow(), sharing_strategy=poptorch.SharingStrategy.Fork)
    print("ready", flush=True)
    if {iterate}:
        for i, _ in enumerate(accessor):
            if i == 0:
                print("looping", flush=True)
""")


def _run_script(iterate):
    script = _SCRIPT.format(test_dir=os.path.dirname(__file__),
                            iterate=iterate)
    return subprocess.Popen([sys.executable, "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _worker_pid(stderr):
    for line in stderr.splitlines():
        if "AsynchronousDataAccessor worker process:" in line:
            return int(line.rsplit(":", 1)[1])
    raise AssertionError(f"no worker pid logged in:\n{stderr}")


def test_interpreter_exit_stops_the_worker():
    process = _run_script(iterate=False)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert not pid_exists(_worker_pid(stderr))


def test_keyboard_interrupt_stops_the_worker():
    process = _run_script(iterate=True)
    assert process.stdout.readline().strip() == "ready"
    assert process.stdout.readline().strip() == "looping"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert "KeyboardInterrupt" in stderr, (process.returncode, stderr)
    assert not pid_exists(_worker_pid(stderr))


def test_kept_elements_are_never_overwritten():
    """The ring has 2 slots and the epoch 10 elements: every element the
    caller keeps must still hold its own values at the end."""
    dataset = Squares(10)
    with AsynchronousDataAccessor(dataset, buffer_size=2) as accessor:
        kept = list(accessor)
    assert len(kept) == len(dataset)
    for i, (x, y) in enumerate(kept):
        expected_x, expected_y = dataset[i]
        assert torch.equal(x, expected_x) and torch.equal(y, expected_y)


def test_async_loader_batches_equal_sync_ones_when_kept():
    opts = poptorch.Options().deviceIterations(2)
    sync = list(poptorch.DataLoader(opts, Squares(24), batch_size=3))
    loader = poptorch.DataLoader(opts, Squares(24), batch_size=3,
                                 mode=poptorch.DataLoaderMode.Async)
    kept = list(loader)
    loader.terminate()
    assert len(kept) == len(sync)
    for (x, y), (sx, sy) in zip(kept, sync):
        assert torch.equal(x, sx) and torch.equal(y, sy)


def test_wedged_worker_raises_naming_its_state():
    # Generous: the worker's start and first elements must not count as a
    # stall on a loaded machine.
    accessor = AsynchronousDataAccessor(Wedged(), timeout=10.0)
    iterator = iter(accessor)
    pid = accessor._worker.pid  # pylint: disable=protected-access
    assert [next(iterator)[0].item() for _ in range(2)] == [0.0, 1.0]
    with pytest.raises(poptorch.Error, match=(
            r"(?s)pid %d\) has sent nothing for 10 s; it is sleeping.*"
            r"larger timeout" % pid)):
        next(iterator)
    assert eventually_gone(pid, timeout=30.0)


def test_stopped_worker_raises_naming_its_state():
    accessor = AsynchronousDataAccessor(Slow(), timeout=10.0)
    iterator = iter(accessor)
    next(iterator)
    pid = accessor._worker.pid  # pylint: disable=protected-access
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(poptorch.Error, match="stopped .*SIGSTOP"):
            for _ in iterator:
                pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert eventually_gone(pid, timeout=30.0)


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        AsynchronousDataAccessor(Squares(), timeout=0)


def test_worker_yields_to_the_consumer():
    """The worker runs at a lower priority than the consumer (so that it
    does not slow the training step it feeds)."""
    from poptorch_core.data._worker import WORKER_NICENESS
    accessor = AsynchronousDataAccessor(Squares())
    next(iter(accessor))
    pid = accessor._worker.pid  # pylint: disable=protected-access
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(mine + WORKER_NICENESS,
                                                       19)
    accessor.terminate()
