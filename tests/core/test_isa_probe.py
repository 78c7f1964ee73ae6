"""The ``compile`` backend's early vector-ISA check (``inductor.isa_probe``)
makes
inductor compile for the ISA its own full check would choose.

Each case runs in a fresh process, because inductor caches its ISA list
per process; the reference is inductor's ``pick_vec_isa()`` in a process
that never imports poptorch.
"""
import importlib.util
import json
import os
import subprocess
import sys
import threading

import pytest

from poptorch_core._executor.backends.inductor import isa_probe

_REFERENCE = """
import json, platform, sys
from torch._inductor import cpu_vec_isa
picked = str(cpu_vec_isa.pick_vec_isa())
first = None
if sys.platform == "linux" and platform.machine() == "x86_64":
    flags = cpu_vec_isa.x86_isa_checker()
    first = next((str(isa) for isa in cpu_vec_isa.supported_vec_isa_list
                  if all(f in flags for f in str(isa).split())), None)
print(json.dumps({"picked": picked, "first_candidate": first}))
"""

_WITH_PROBE = """
import json, threading
from torch._inductor import cpu_vec_isa
from poptorch_core._executor.backends.inductor import isa_probe
check_build, built_here = cpu_vec_isa.VecISA.check_build, []
def counting_check_build(self, code):
    if threading.current_thread() is threading.main_thread():
        built_here.append(str(self))
    return check_build(self, code)
cpu_vec_isa.VecISA.check_build = counting_check_build
isa_probe.start_vec_isa_probe()
isa_probe.wait_for_vec_isa_probe()
filled = cpu_vec_isa.valid_vec_isa_list.cache_info().currsize == 1
print(json.dumps({"picked": str(cpu_vec_isa.pick_vec_isa()),
                  "checked": str(isa_probe._checked_isa),
                  "filled_by_probe": filled,
                  "built_on_the_compiling_thread": built_here}))
"""


_META_PATH_EDITS = """
import json, sys, threading
class RecordingList(list):
    edits = []
    def _note(self, op):
        self.edits.append([threading.current_thread().name, op])
    def insert(self, *args):
        self._note("insert"); super().insert(*args)
    def remove(self, *args):
        self._note("remove"); super().remove(*args)
    def append(self, *args):
        self._note("append"); super().append(*args)
    def pop(self, *args):
        self._note("pop"); return super().pop(*args)
sys.meta_path = RecordingList(sys.meta_path)
from poptorch_core._executor.backends.inductor import isa_probe
imported_before = "setuptools" in sys.modules
isa_probe.start_vec_isa_probe()
isa_probe.wait_for_vec_isa_probe()
print(json.dumps({"edits": RecordingList.edits,
                  "setuptools_imported_before": imported_before,
                  "main": threading.main_thread().name}))
"""


def _run(code: str, **env: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env=dict(os.environ, **env), timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_probe_picks_the_isa_inductor_picks():
    reference = _run(_REFERENCE)
    probed = _run(_WITH_PROBE)
    assert probed["picked"] == reference["picked"]
    # Where inductor's full check keeps the first ISA the CPU reports, the
    # shortcut applies, and the ISA used is the one that was checked.
    shortcut = reference["picked"] == reference["first_candidate"]
    assert probed["filled_by_probe"] == shortcut
    if shortcut:
        assert probed["checked"] == probed["picked"]
        # Filling the list builds nothing where the first step waits for
        # it, not even the lower ISAs' optional extras.
        assert probed["built_on_the_compiling_thread"] == []


def test_a_user_chosen_isa_gets_inductor_s_full_check():
    # With ATEN_CPU_CAPABILITY inductor may pick a lower ISA than the
    # first, which the shortcut does not check: it must stand aside.
    reference = _run(_REFERENCE, ATEN_CPU_CAPABILITY="default")
    probed = _run(_WITH_PROBE, ATEN_CPU_CAPABILITY="default")
    assert reference["picked"] != reference["first_candidate"]
    del probed["built_on_the_compiling_thread"]  # inductor's full check
    assert probed == {"picked": reference["picked"], "checked": "None",
                      "filled_by_probe": False}


class _FailingIsa:
    def __bool__(self) -> bool:
        return False


def test_a_failed_check_leaves_the_list_to_inductor(monkeypatch):
    from torch._inductor import cpu_vec_isa
    monkeypatch.setattr(isa_probe, "_probe", None)
    monkeypatch.setattr(isa_probe, "_checked_isa", None)
    monkeypatch.setattr(isa_probe, "_isa_inductor_picks",
                        lambda: _FailingIsa())
    calls = []
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list",
                        lambda: calls.append(1))
    isa_probe.start_vec_isa_probe()
    isa_probe.wait_for_vec_isa_probe()
    assert isa_probe._checked_isa is None
    assert calls == []  # not made here, so inductor makes (and checks) it


def test_inductor_s_first_request_for_its_list_waits_for_the_probe(
        monkeypatch):
    from torch._inductor import cpu_vec_isa
    monkeypatch.setattr(isa_probe, "_probe", None)
    monkeypatch.setattr(isa_probe, "_checked_isa", None)
    release, order = threading.Event(), []

    def slow_check():
        release.wait(timeout=60)
        order.append("probe")

    def inductor_list():
        order.append("list")
        return []

    monkeypatch.setattr(isa_probe, "_check_vec_isa", slow_check)
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", inductor_list)
    isa_probe.start_vec_isa_probe()
    timer = threading.Timer(0.2, release.set)
    timer.start()
    assert cpu_vec_isa.pick_vec_isa() is cpu_vec_isa.invalid_vec_isa
    timer.join()
    assert order == ["probe", "list"]
    # Inductor's own function is back once the list is settled.
    assert cpu_vec_isa.valid_vec_isa_list is inductor_list


def test_waiting_without_a_probe_does_nothing(monkeypatch):
    from torch._inductor import cpu_vec_isa
    monkeypatch.setattr(isa_probe, "_probe", None)
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list",
                        lambda: pytest.fail("the ISA list was made"))
    isa_probe.wait_for_vec_isa_probe()


def test_only_the_compile_backend_on_the_cpu_starts_a_probe(monkeypatch):
    from poptorch_core._executor.backends import prepare_backend
    started = []
    monkeypatch.setattr(
        "poptorch_core._executor.backends.executable.start_vec_isa_probe",
        lambda: started.append(True))
    prepare_backend("interpret", "cpu")
    prepare_backend("compile", "cuda")
    assert started == []
    prepare_backend("compile", "cpu")
    assert started == [True]


def test_the_probe_thread_leaves_sys_meta_path_alone():
    """setuptools' first import puts a finder at the head of
    ``sys.meta_path`` and removes it: from the probe thread, that could make
    an import on the main thread skip the path finder and fail."""
    out = _run(_META_PATH_EDITS)
    assert not out["setuptools_imported_before"]
    if importlib.util.find_spec("_distutils_hack") is not None:
        # setuptools with its distutils finder: the edits happened, and
        # the check below is not vacuous.
        assert out["edits"], "setuptools' import edits sys.meta_path"
    assert all(thread == out["main"] for thread, _ in out["edits"]), \
        out["edits"]
