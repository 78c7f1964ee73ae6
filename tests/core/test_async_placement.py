"""Where ``DataLoaderMode.Async`` loads
(``poptorch_core.data._load_placement``):
a worker process where a CPU is free for it, else this process, with the
same batches either way (checked against torch's own DataLoader)."""
import logging
import os

import pytest
import torch

import poptorch_core as poptorch
from poptorch_core import DataLoader, DataLoaderMode
from poptorch_core.data import _load_placement

from .test_dataloader import Indices

ENV = "POPTORCH_ASYNC_PLACEMENT"


@pytest.fixture
def cpus(monkeypatch):
    """Sets how many CPUs the process may run on, and torch's threads."""
    threads = torch.get_num_threads()

    def set_cpus(available: int, torch_threads: int) -> None:
        monkeypatch.setattr(_load_placement, "available_cpus",
                            lambda: available)
        torch.set_num_threads(torch_threads)

    yield set_cpus
    torch.set_num_threads(threads)


@pytest.mark.parametrize("available,threads,expected", [
    (2, 2, "inline"), (2, 1, "worker"), (1, 1, "inline"), (8, 4, "worker"),
    (4, 8, "inline")])
def test_auto_uses_a_worker_only_where_a_cpu_is_free(
        monkeypatch, cpus, available, threads, expected):
    monkeypatch.setenv(ENV, "auto")
    cpus(available, threads)
    assert _load_placement.async_placement() == expected


@pytest.mark.parametrize("value,expected", [
    ("worker", "worker"), ("inline", "inline"), (" Worker ", "worker"),
    ("", "inline")])
def test_the_variable_overrides_the_choice(monkeypatch, cpus, value,
                                           expected):
    cpus(2, 2)  # auto would choose inline
    monkeypatch.setenv(ENV, value)
    assert _load_placement.async_placement() == expected


def test_an_unknown_value_names_the_valid_ones(monkeypatch):
    monkeypatch.setenv(ENV, "thread")
    with pytest.raises(ValueError) as info:
        _load_placement.async_placement()
    assert str(info.value) == (
        "Environment variable POPTORCH_ASYNC_PLACEMENT='thread' is not one "
        "of auto, worker, inline: use auto (a worker process when a CPU is "
        "free for it), worker or inline.")


def test_available_cpus_is_the_affinity_mask():
    assert _load_placement.available_cpus() == len(os.sched_getaffinity(0))


def _torch_batches(length, batch_size):
    loader = torch.utils.data.DataLoader(Indices(length),
                                         batch_size=batch_size,
                                         drop_last=True)
    return [batch.clone() for batch in loader]


@pytest.mark.parametrize("placement", ["inline", "worker"])
def test_async_yields_torch_s_batches_in_either_place(monkeypatch,
                                                      placement):
    monkeypatch.setenv(ENV, placement)
    opts = poptorch.Options().deviceIterations(2)
    loader = DataLoader(opts, Indices(29), batch_size=3,
                        mode=DataLoaderMode.Async)
    try:
        assert (loader._accessor is None) == (placement == "inline")
        expected = _torch_batches(29, 6)
        for _ in range(2):  # two epochs
            got = [batch.clone() for batch in loader]
            assert len(got) == len(expected) == len(loader)
            for actual, wanted in zip(got, expected):
                assert torch.equal(actual, wanted)
    finally:
        loader.terminate()


@pytest.mark.parametrize("mode,drop_last", [
    (DataLoaderMode.AsyncRebatched, True), (DataLoaderMode.Async, False)])
def test_rebatching_keeps_its_worker(monkeypatch, mode, drop_last):
    monkeypatch.setenv(ENV, "inline")
    loader = DataLoader(poptorch.Options().deviceIterations(2), Indices(29),
                        batch_size=3, mode=mode, drop_last=drop_last)
    try:
        assert loader._accessor is not None
    finally:
        loader.terminate()


def test_inline_async_logs_why_and_how_to_change_it(monkeypatch, cpus,
                                                    log_records):
    monkeypatch.setenv(ENV, "auto")
    cpus(2, 2)
    level = poptorch.logger.level
    poptorch.logger.setLevel(logging.INFO)
    try:
        DataLoader(poptorch.Options(), Indices(8), batch_size=2,
                   mode=DataLoaderMode.Async)
    finally:
        poptorch.logger.setLevel(level)
    assert [r.getMessage() for r in log_records
            if "Async" in r.getMessage()] == [
        "DataLoaderMode.Async loads in this process, as Sync does: torch's "
        "2 intra-op thread(s) leave none of the 2 CPU(s) this process may "
        "run on free for a worker process. A worker takes over if loading "
        "turns out to take 30% or more of 2 epochs in a row. Set "
        "POPTORCH_ASYNC_PLACEMENT=worker to use one anyway."]


def test_inline_async_still_checks_the_accessor_options(monkeypatch):
    monkeypatch.setenv(ENV, "inline")
    with pytest.raises(TypeError, match="buffer_sise"):
        DataLoader(poptorch.Options(), Indices(8), batch_size=2,
                   mode=DataLoaderMode.Async,
                   async_options={"buffer_sise": 4})


def test_wrapping_an_inline_async_loader_is_refused_as_upstream(monkeypatch):
    monkeypatch.setenv(ENV, "inline")
    loader = DataLoader(poptorch.Options(), Indices(8), batch_size=2,
                        mode=DataLoaderMode.Async)
    with pytest.raises(poptorch.Error,
                       match="already uses an AsynchronousDataAccessor"):
        poptorch.AsynchronousDataAccessor(loader)


class _Clock:
    """A fake ``time.perf_counter`` that only moves when told to."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_loading_share_counts_from_the_second_batch(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(_load_placement.time, "perf_counter", clock)
    loading = [7.0, 1.0, 2.0, 3.0]  # seconds to load batch 0, 1, 2, 3
    stepping = [50.0, 4.0, 4.0, 4.0]  # seconds the consumer takes per batch

    def batches():
        for seconds in loading:
            clock.now += seconds
            yield seconds

    timer = _load_placement.LoadingShare()
    for i, _ in enumerate(timer.watch(batches())):
        clock.now += stepping[i]
    # From the request of batch 1 to the end: loads 1 + 2 + 3 = 6 s of
    # 6 + 3 x 4 = 18 s (batch 0 and the first step are left out).
    assert timer.share == pytest.approx(6.0 / 18.0)


@pytest.mark.parametrize("length", [0, 1, 2])
def test_loading_share_needs_three_batches(length):
    timer = _load_placement.LoadingShare()
    list(timer.watch(range(length)))
    assert timer.share is None


def test_loading_share_ignores_an_epoch_left_early():
    timer = _load_placement.LoadingShare()
    for i in timer.watch(range(10)):
        if i == 5:
            break
    assert timer.share is None


def _fixed_share(*shares):
    """A ``LoadingShare`` whose epochs measure ``shares`` in turn (the last
    one from then on)."""
    measured = iter(shares)

    class FixedShare(_load_placement.LoadingShare):
        def watch(self, batches):
            yield from batches
            self.share = next(measured, shares[-1])
    return FixedShare


def _inline_loader(monkeypatch, *shares, env="auto"):
    from poptorch_core.data import loader as loader_module
    monkeypatch.setenv(ENV, env)
    monkeypatch.setattr(_load_placement, "available_cpus",
                        lambda: torch.get_num_threads())  # none free
    monkeypatch.setattr(loader_module, "LoadingShare", _fixed_share(*shares))
    return DataLoader(poptorch.Options().deviceIterations(2), Indices(29),
                      batch_size=3, mode=DataLoaderMode.Async)


@pytest.mark.parametrize("share,moves", [(0.10, False), (0.299, False),
                                         (0.30, True), (0.60, True)])
def test_a_large_loading_share_moves_loading_to_a_worker(monkeypatch, share,
                                                         moves):
    loader = _inline_loader(monkeypatch, share)
    expected = _torch_batches(29, 6)
    try:
        for epoch in range(4):
            got = [batch.clone() for batch in loader]
            assert len(got) == len(expected)
            for actual, wanted in zip(got, expected):
                assert torch.equal(actual, wanted)
            # Two heavy epochs in a row decide: the second one moves.
            assert (loader._accessor is not None) == (moves and epoch >= 1), \
                epoch
    finally:
        loader.terminate()


def test_heavy_epochs_must_come_in_a_row(monkeypatch):
    # A busy machine can make one epoch's loading look heavy: alone, it
    # moves nothing; two in a row do.
    loader = _inline_loader(monkeypatch, 0.9, 0.1, 0.9, 0.2, 0.5, 0.5)
    try:
        moved = []
        for _ in range(6):
            list(loader)
            moved.append(loader._accessor is not None)
        assert moved == [False] * 5 + [True]
    finally:
        loader.terminate()


def test_two_epochs_iterated_at_once_start_one_worker(monkeypatch):
    loader = _inline_loader(monkeypatch, 0.9)
    started = []
    real = poptorch.AsynchronousDataAccessor._for_loader

    def counting(*args, **kwargs):
        started.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(poptorch.AsynchronousDataAccessor, "_for_loader",
                        counting)
    try:
        first, second = iter(loader), iter(loader)
        for a, b in zip(first, second):
            assert torch.equal(a, b)
        assert list(first) == list(second) == []  # both run to their end
        assert started == [True]
    finally:
        loader.terminate()


def test_inline_asked_for_stays_inline(monkeypatch):
    loader = _inline_loader(monkeypatch, 0.9, env="inline")
    for _ in range(2):
        list(loader)
    assert loader._accessor is None


def test_an_epoch_left_early_moves_nothing(monkeypatch):
    loader = _inline_loader(monkeypatch, 0.9)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    list(loader)  # one heavy epoch: the one left early did not count
    assert loader._accessor is None


def test_a_worker_that_cannot_start_keeps_loading_here(monkeypatch,
                                                       log_records):
    loader = _inline_loader(monkeypatch, 0.9)

    def refuse(*args, **kwargs):
        raise poptorch.Error("no worker today")

    monkeypatch.setattr(poptorch.AsynchronousDataAccessor, "_for_loader",
                        refuse)
    expected = _torch_batches(29, 6)
    for _ in range(2):
        got = [batch.clone() for batch in loader]
        assert [b.tolist() for b in got] == [b.tolist() for b in expected]
    assert loader._accessor is None
    warnings = [r.getMessage() for r in log_records
                if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "DataLoaderMode.Async: loading took 90% of the last epoch, but no "
        "worker process could take it over (")
    assert "no worker today" in warnings[0]
