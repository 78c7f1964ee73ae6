"""Precompiled headers built in the background: a compilation never builds
one itself, the background job only ever puts a complete header in place,
one job per header at a time, and a real ``g++`` header built this way is
the one the compiler then uses."""
import os
import shlex
import shutil
import subprocess
import threading
import time

import pytest

from poptorch_core._executor.backends.inductor import (background_builds,
                                                      precompiled_headers)
from poptorch_core._executor.backends.inductor.precompiled_headers import (
    BUILDING_SUFFIX, STALE_AFTER_S, build_later, header_builds_running,
    is_header_build, use_precompiled_headers, wait_for_header_builds)


class _Builder:
    """What ``build_later`` reads of inductor's ``CppBuilder``."""

    def __init__(self, target, command):
        self.target, self.command = str(target), command

    def get_target_file_path(self):
        return self.target

    def get_command_line(self):
        return self.command

    def build(self):
        raise AssertionError("the compilation built the header itself")


def _copy_into(target, source):
    return _Builder(target, shlex.join(["cp", str(source), str(target)]))


def _finished(target, timeout=60.0):
    """Waits for the job building ``target`` to end (its marker gone)."""
    deadline = time.monotonic() + timeout
    while os.path.exists(target + BUILDING_SUFFIX):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{target} is still being built")
        time.sleep(0.05)


def _leftovers(directory):
    return sorted(name for name in os.listdir(directory)
                  if name.endswith((".partial", BUILDING_SUFFIX)))


def test_only_a_single_header_precompilation_is_a_header_build(tmp_path):
    assert is_header_build([_Builder(tmp_path / "h.h.gch", "")])
    assert is_header_build([_Builder(tmp_path / "h.h.pch", "")])
    assert not is_header_build([_Builder(tmp_path / "k.o", "")])
    assert not is_header_build([_Builder(tmp_path / "h.h.gch", "")] * 2)


def test_the_header_appears_complete_and_nothing_is_left(tmp_path):
    source = tmp_path / "built"
    source.write_text("header")
    target = str(tmp_path / "h.h.gch")
    assert build_later(_copy_into(target, source))
    _finished(target)
    with open(target) as f:
        assert f.read() == "header"
    assert _leftovers(tmp_path) == []


def test_no_one_sees_half_a_header(tmp_path):
    target = str(tmp_path / "h.h.gch")
    # A "compiler" that writes its output in two halves, a moment apart.
    assert build_later(_Builder(target, shlex.join(
        ["sh", "-c", 'printf half > "$0"; sleep 0.5; printf half >> "$0"',
         target])))
    seen, deadline = set(), time.monotonic() + 60
    while os.path.exists(target + BUILDING_SUFFIX) and \
            time.monotonic() < deadline:
        if os.path.exists(target):
            with open(target) as f:
                seen.add(f.read())
        time.sleep(0.01)
    _finished(target)
    with open(target) as f:
        seen.add(f.read())
    assert seen == {"halfhalf"}


def test_a_failed_build_leaves_no_header_and_can_be_retried(tmp_path):
    target = str(tmp_path / "h.h.gch")
    assert build_later(_copy_into(target, tmp_path / "missing"))
    _finished(target)
    assert not os.path.exists(target)
    assert _leftovers(tmp_path) == []
    (tmp_path / "missing").write_text("header")
    assert build_later(_copy_into(target, tmp_path / "missing"))
    _finished(target)
    assert os.path.exists(target)


def test_an_existing_header_is_not_built_again(tmp_path):
    target = tmp_path / "h.h.gch"
    target.write_text("old")
    assert not build_later(_copy_into(target, tmp_path / "missing"))
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_one_build_per_header_until_its_marker_is_stale(tmp_path):
    source = tmp_path / "built"
    source.write_text("header")
    target = str(tmp_path / "h.h.gch")
    marker = target + BUILDING_SUFFIX
    open(marker, "w").close()
    # Another process is building it.
    assert not build_later(_copy_into(target, source))
    assert not os.path.exists(target)
    # That process died long ago, leaving half a header behind.
    partial = target + ".1234.partial"
    open(partial, "w").close()
    old = time.time() - STALE_AFTER_S - 1
    os.utime(marker, (old, old))
    assert build_later(_copy_into(target, source))
    _finished(target)
    assert os.path.exists(target)
    assert _leftovers(tmp_path) == []


def test_a_command_that_does_not_name_its_output_is_left_alone(tmp_path):
    target = str(tmp_path / "h.h.gch")
    assert not build_later(_Builder(target, "true"))
    assert _leftovers(tmp_path) == []


def test_the_compilation_worker_hands_headers_to_the_background(
        tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(background_builds, "build_later", started.append)
    header = _Builder(tmp_path / "h.h.gch", "")
    background_builds._compile_in_background_worker(
        str(tmp_path / "lock"), (header,))
    assert started == [header]


@pytest.mark.skipif(shutil.which("g++") is None,
                    reason="needs g++ (the compile backend's compiler)")
def test_a_real_header_built_this_way_is_used_by_gcc(tmp_path):
    header = tmp_path / "prefix.h"
    header.write_text("#pragma once\ninline int answer() { return 42; }\n")
    target = str(header) + ".gch"
    builder = _Builder(target, shlex.join(
        ["g++", "-x", "c++-header", str(header), "-o", target]))
    assert build_later(builder)
    _finished(target)
    assert _leftovers(tmp_path) == []
    source = tmp_path / "use.cpp"
    source.write_text("int main() { return answer() == 42 ? 0 : 1; }\n")
    # -H lists the headers read; a used precompiled header shows as "! ".
    result = subprocess.run(
        ["g++", "-H", "-Winvalid-pch", "-include", str(header),
         str(source), "-o", str(tmp_path / "use")],
        capture_output=True, text=True, check=True)
    assert f"! {target}" in result.stderr
    assert subprocess.run([str(tmp_path / "use")]).returncode == 0


def test_the_job_runs_at_the_lowest_priority(tmp_path):
    target = str(tmp_path / "h.h.gch")
    # The "compiler" writes its own niceness as the header.
    assert build_later(_Builder(target, shlex.join(
        ["sh", "-c", 'nice > "$0"', target])))
    _finished(target)
    with open(target) as f:
        assert int(f.read()) == min(os.nice(0) + 19, 19)


def test_running_builds_are_the_fresh_markers(tmp_path):
    fresh, stale = tmp_path / "a.h.gch", tmp_path / "b.h.gch"
    open(str(fresh) + BUILDING_SUFFIX, "w").close()
    open(str(stale) + BUILDING_SUFFIX, "w").close()
    old = time.time() - STALE_AFTER_S - 1
    os.utime(str(stale) + BUILDING_SUFFIX, (old, old))
    assert header_builds_running(str(tmp_path)) == [str(fresh)]
    assert not wait_for_header_builds(str(tmp_path), timeout=0.2)
    os.remove(str(fresh) + BUILDING_SUFFIX)
    assert wait_for_header_builds(str(tmp_path), timeout=0.2)


def test_headers_follow_inductor_and_need_openssl(monkeypatch):
    from torch._inductor import config

    def which(found):
        monkeypatch.setattr(precompiled_headers.shutil, "which",
                            lambda name: "/usr/bin/" + name if found else None)

    with config.patch(cpp_cache_precompile_headers=True):
        which(True)
        assert use_precompiled_headers()
        # Inductor hashes the preprocessed headers with openssl.
        which(False)
        assert not use_precompiled_headers()
    with config.patch(cpp_cache_precompile_headers=False):
        which(True)
        assert not use_precompiled_headers()


def test_an_unwritable_directory_means_no_build(tmp_path, monkeypatch):
    def refused(*args):
        raise PermissionError("read-only")

    monkeypatch.setattr(precompiled_headers.os, "open", refused)
    source = tmp_path / "built"
    source.write_text("header")
    assert not build_later(_copy_into(tmp_path / "h.h.gch", source))
    monkeypatch.undo()
    assert _leftovers(tmp_path) == []


def test_no_header_is_looked_up_for_a_library_already_built(tmp_path):
    looked_up = []
    header = precompiled_headers.header_unless_built(
        lambda *args, **kwargs: looked_up.append((args, kwargs)) or "h.h")

    def load_async(main_path):  # inductor's caller, reduced to its local
        return header("cpp_prefix.h", "g++ -O3", vec_isa="avx512")

    source = tmp_path / "c1.main.cpp"
    assert load_async(str(source)) == "h.h"  # nothing built yet
    assert looked_up == [(("cpp_prefix.h", "g++ -O3"),
                          {"vec_isa": "avx512"})]
    (tmp_path / "c1.main.so").write_text("built")
    assert load_async(str(source)) is None
    assert len(looked_up) == 1
    # A caller that does not name its source: looked up, as inductor does.
    assert header("cpp_prefix.h", "g++ -O3") == "h.h"
    assert len(looked_up) == 2


def _load_async(header, main_path, optimized_code="kernels"):
    """Inductor's ``load_async``, reduced to its locals and its two
    header lookups (the wrapper's, then the kernels')."""
    main_cmd_line, optimized_cmd_line = "g++ -O1", "g++ -O3"
    optimized_compile_command = {"vec_isa": "avx512"}
    device_type = "cpu"  # noqa: F841  read from this frame
    wrapper = header("cpu.h", main_cmd_line, min_optimize=True)
    kernels = header("torch/csrc/inductor/cpp_prefix.h", optimized_cmd_line,
                     **optimized_compile_command)
    return wrapper, kernels


def test_the_kernels_header_is_looked_up_beside_the_wrappers(tmp_path):
    """The kernels' lookup runs while the wrapper's does, and its result
    serves the second call; each header is looked up once."""
    kernels_started = threading.Event()
    looked_up = []

    def lookup(name, command, **kwargs):
        looked_up.append(name)
        if name == "cpu.h":  # returns only once the other one runs
            assert kernels_started.wait(timeout=10)
        else:
            kernels_started.set()
        return f"{name}@{command}"

    header = precompiled_headers.header_unless_built(lookup)
    assert _load_async(header, str(tmp_path / "c1.main.cpp")) == (
        "cpu.h@g++ -O1", "torch/csrc/inductor/cpp_prefix.h@g++ -O3")
    assert sorted(looked_up) == ["cpu.h", "torch/csrc/inductor/cpp_prefix.h"]


def test_a_failed_lookup_in_the_thread_raises_in_the_call(tmp_path):
    failed_in = []

    def lookup(name, command, **kwargs):
        if name != "cpu.h":
            failed_in.append(threading.current_thread())
            raise RuntimeError("g++ -E failed")
        return name

    header = precompiled_headers.header_unless_built(lookup)
    with pytest.raises(RuntimeError, match="g.. -E failed"):
        _load_async(header, str(tmp_path / "c1.main.cpp"))
    assert len(failed_in) == 1
    assert failed_in[0] is not threading.current_thread()


def test_nothing_is_looked_up_ahead_without_kernels(tmp_path):
    """A library without a kernels' source, or a lookup that is not the
    wrapper's, starts no thread: each call looks its header up itself."""
    threads = []
    header = precompiled_headers.header_unless_built(
        lambda name, command, **kwargs: threads.append(
            threading.current_thread()) or name)
    _load_async(header, str(tmp_path / "c1.main.cpp"), optimized_code="")
    assert threads == [threading.current_thread()] * 2
    threads.clear()
    main_cmd_line = "g++ -O1"  # noqa: F841  read from this frame
    optimized_code = "kernels"  # noqa: F841
    optimized_cmd_line = "g++ -O3"  # noqa: F841
    optimized_compile_command = {"vec_isa": "avx512"}  # noqa: F841
    assert header("cpu.h", "g++ -O2") == "cpu.h"
    assert threads == [threading.current_thread()]
