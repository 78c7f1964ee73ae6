"""The ``compile`` backend's background C++ builds
(``inductor.background_builds``):
a training graph's backward is compiled with its forward, its libraries
load on their first call, and inductor is left as it was."""
import threading

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor import codecache
from torch._inductor.codecache import CppWrapperCodeCache
from torch._inductor.codegen import cpp as cpp_codegen

from torch.fx.experimental.proxy_tensor import make_fx

from poptorch_core._executor.backends.inductor import (background_builds,
                                                      linear_strides)
from poptorch_core._executor.backends.executable import Executable


def _graphs_compiled() -> int:
    return (counters["inductor"]["fxgraph_cache_miss"] +
            counters["inductor"]["fxgraph_cache_hit"])


def test_the_backward_is_compiled_with_the_forward():
    """Both graphs exist once the forward has run, before any backward:
    what lets the forward's build overlap the backward's codegen (without
    it AOTAutograd compiles the backward at the first backward call). The
    gradients are those of eager autograd."""
    def loss_of(w, x):
        return ((x @ w).relu().sum(),)

    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(8, 4)
    counters.clear()
    executable = Executable(make_fx(loss_of)(w, x), "compile")
    (loss,) = executable.run([w, x])
    assert _graphs_compiled() == 2
    loss.backward()
    reference = w.detach().clone().requires_grad_()
    loss_of(reference, x)[0].backward()
    torch.testing.assert_close(loss, loss_of(reference, x)[0].detach())
    torch.testing.assert_close(w.grad, reference.grad)
    assert _graphs_compiled() == 2


def test_inductor_is_restored_after_the_compilation():
    loader = CppWrapperCodeCache.load_pybinding
    worker = codecache._worker_compile_cpp
    header = codecache._precompile_header
    strides = cpp_codegen.stride_at_vec_range
    with pytest.raises(RuntimeError, match="inside"):
        with background_builds.background_cpp_builds():
            assert CppWrapperCodeCache.load_pybinding is not loader
            assert codecache._worker_compile_cpp is \
                background_builds._compile_in_background_worker
            assert codecache._precompile_header is \
                background_builds._header_unless_built
            assert cpp_codegen.stride_at_vec_range is \
                linear_strides.stride_at_vec_range
            assert torch._functorch.config.force_non_lazy_backward_lowering
            raise RuntimeError("inside")
    assert CppWrapperCodeCache.load_pybinding == loader
    assert codecache._worker_compile_cpp is worker
    assert codecache._precompile_header is header
    assert cpp_codegen.stride_at_vec_range is strides
    assert not torch._functorch.config.force_non_lazy_backward_lowering


def test_overlapping_compilations_share_one_activation():
    """Compilations in two threads overlap: the settings stay until the
    last one leaves, and then what was there before comes back."""
    loader = CppWrapperCodeCache.load_pybinding
    first, second = (background_builds.background_cpp_builds()
                     for _ in range(2))
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert CppWrapperCodeCache.load_pybinding is not loader
    assert torch._functorch.config.force_non_lazy_backward_lowering
    second.__exit__(None, None, None)
    assert CppWrapperCodeCache.load_pybinding == loader
    assert not torch._functorch.config.force_non_lazy_backward_lowering


def test_a_library_is_loaded_once_on_its_first_call():
    loads = []
    release = threading.Event()

    def load():
        release.wait(5)
        loads.append(1)
        return lambda x: x + 1

    entry = background_builds._EntryOnFirstCall(load)
    assert loads == []
    results = []
    threads = [threading.Thread(target=lambda: results.append(entry(1)))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    release.set()
    for thread in threads:
        thread.join(5)
    assert results == [2] * 4 and loads == [1]
    assert entry(2) == 3 and loads == [1]


def test_a_failed_build_raises_on_the_first_call():
    def load():
        raise RuntimeError("g++ failed")

    entry = background_builds._EntryOnFirstCall(load)
    with pytest.raises(RuntimeError, match="g\\+\\+ failed"):
        entry()


class _FakeBuilder:
    """A compiler run that records when it starts and finishes."""

    def __init__(self, path, log):
        self.path, self.log = str(path), log

    def get_target_file_path(self):
        return self.path

    def build(self):
        self.log.append(("start", self.path))
        self._write()

    def _write(self):
        with open(self.path, "w") as f:
            f.write("built")
        self.log.append(("end", self.path))


def test_the_wrapper_and_kernel_objects_build_side_by_side(tmp_path):
    """Inductor's worker builds the wrapper object, the kernel object and
    the link one after the other; here the two objects build at once (each
    waits for the other to start) and the link comes after both."""
    log = []
    both_started = threading.Barrier(2)

    class Meeting(_FakeBuilder):
        def build(self):
            self.log.append(("start", self.path))
            both_started.wait(5)  # BrokenBarrierError if built one by one
            self._write()

    wrapper = Meeting(tmp_path / "main.o", log)
    kernels = Meeting(tmp_path / "kernels.o", log)
    linker = _FakeBuilder(tmp_path / "lib.so", log)
    background_builds._compile_in_background_worker(
        str(tmp_path / "lock"), (wrapper, kernels, linker))
    assert log[-2:] == [("start", linker.path), ("end", linker.path)]
    assert {p for event, p in log[:-2] if event == "end"} == \
        {wrapper.path, kernels.path}


def test_built_objects_and_libraries_are_not_built_again(tmp_path):
    log = []
    builders = [_FakeBuilder(tmp_path / name, log)
                for name in ("main.o", "kernels.o", "lib.so")]
    (tmp_path / "kernels.o").write_text("cached")
    background_builds._compile_in_background_worker(str(tmp_path / "lock"),
                                                    builders)
    assert [p for event, p in log if event == "start"] == \
        [builders[0].path, builders[2].path]
    log.clear()
    background_builds._compile_in_background_worker(str(tmp_path / "lock"),
                                                    builders)
    assert log == []


def test_a_single_object_library_keeps_inductors_worker(tmp_path):
    log = []
    only = _FakeBuilder(tmp_path / "lib.so", log)
    background_builds._compile_in_background_worker(str(tmp_path / "lock"),
                                                    (only,))
    assert log == [("start", only.path), ("end", only.path)]


def test_an_activation_lists_the_libraries_its_thread_makes(monkeypatch):
    """``_compile_with_inductor`` loads what its compilation made before it
    returns (a compilation that is timed, or done ahead by ``compile()``,
    ends with its build); libraries made by other threads, or after the
    activation, are not its own."""
    loads = []

    def fake_async(*args, submit_fn=None, **kwargs):
        return lambda: loads.append(args) or (lambda: "entry")

    monkeypatch.setattr(CppWrapperCodeCache, "load_pybinding_async",
                        fake_async)
    with background_builds.background_cpp_builds() as libraries:
        entry = CppWrapperCodeCache.load_pybinding("mine")
        other = []
        thread = threading.Thread(target=lambda: other.append(
            CppWrapperCodeCache.load_pybinding("another thread's")))
        thread.start()
        thread.join(5)
        with background_builds.background_cpp_builds() as inner:
            CppWrapperCodeCache.load_pybinding("inner")
        assert len(inner) == 1 and inner[0] is not entry
    assert libraries == [entry] and loads == []
    assert libraries[0].load()() == "entry" and loads == [("mine",)]
    assert entry is not other[0]
    assert libraries not in background_builds._made.lists
