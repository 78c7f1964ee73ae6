"""Simulator.hostMemoryPool: freed host memory is kept for the next step."""
import os
import platform
import subprocess
import sys
import textwrap

import pytest
import torch

import poptorch
from poptorch_core._executor import compile
from poptorch_core._executor.backends import host_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# Four 24 MiB blocks allocated and freed together. Without the setting glibc
# maps each one afresh or returns the 96 MiB to the OS (more than twice its
# largest dynamic threshold), unless a small block happens to pin the top of
# the heap; so only the configured side is deterministic: no page faults.
_FAULTS_PER_ROUND = textwrap.dedent("""
    import resource, torch
    from poptorch_core._executor.backends.host_memory import keep_host_memory

    configured = keep_host_memory()
    for _ in range(3):
        blocks = [torch.ones(6 << 20) for _ in range(4)]
        del blocks
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        blocks = [torch.ones(6 << 20) for _ in range(4)]
        del blocks
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print((after - before) / 10, configured)
""")


@pytest.mark.skipif(not GLIBC, reason="the setting applies to glibc malloc")
def test_freed_memory_is_reused_without_page_faults():
    env = {k: v for k, v in os.environ.items()
           if k not in host_memory._USER_SETTINGS}
    out = subprocess.run([sys.executable, "-c", _FAULTS_PER_ROUND], env=env,
                         capture_output=True, text=True, check=True)
    faults, configured = out.stdout.split()
    assert configured == "True"
    # 96 MiB is ~24,600 pages, faulted in again whenever memory is returned.
    assert float(faults) < 100


@pytest.fixture
def fresh_state(monkeypatch):
    """A process that has not configured malloc yet, with a recording
    ``mallopt`` (the real one is process-wide)."""
    calls = []
    monkeypatch.setattr(host_memory, "_configured", None)
    monkeypatch.setattr(host_memory, "_mallopt",
                        lambda: lambda *args: calls.append(args) or 1)
    for name in host_memory._USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    return calls


def test_both_thresholds_are_raised_once(fresh_state):
    assert host_memory.keep_host_memory()
    assert host_memory.keep_host_memory()
    assert fresh_state == [(host_memory.M_MMAP_THRESHOLD, 32 << 20),
                           (host_memory.M_TRIM_THRESHOLD, 1 << 30)]


@pytest.mark.parametrize("variable", ["MALLOC_TRIM_THRESHOLD_",
                                      "MALLOC_MMAP_THRESHOLD_",
                                      "GLIBC_TUNABLES"])
def test_user_malloc_settings_win(fresh_state, monkeypatch, variable):
    monkeypatch.setenv(variable, "1")
    assert not host_memory.keep_host_memory()
    assert fresh_state == []


def test_other_c_libraries_are_left_alone(fresh_state, monkeypatch):
    monkeypatch.setattr(host_memory, "_mallopt", lambda: None)
    assert not host_memory.keep_host_memory()


def test_option_default_and_validation():
    opts = poptorch.Options()
    assert opts.Simulator.host_memory_pool is True
    assert opts.Simulator.hostMemoryPool(False).host_memory_pool is False
    with pytest.raises(AssertionError, match="Unexpected type <class 'int'> "
                       "for option host_memory_pool. Expected <class 'bool'>"):
        opts.Simulator.hostMemoryPool(1)


@pytest.mark.parametrize("enabled", [True, False])
def test_compiling_a_model_applies_the_option(monkeypatch, enabled):
    calls = []
    monkeypatch.setattr(compile, "keep_host_memory",
                        lambda: calls.append(True))
    opts = poptorch.Options()
    opts.Simulator.hostMemoryPool(enabled)
    model = torch.nn.Linear(3, 2)
    poptorch.inferenceModel(model, opts)(torch.ones(4, 3))
    assert calls == ([True] if enabled else [])
