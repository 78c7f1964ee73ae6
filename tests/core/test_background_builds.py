"""The ``compile`` backend's background C++ builds (``_background_builds``):
a training graph's backward is compiled with its forward, its libraries
load on their first call, and inductor is left as it was."""
import threading

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.codecache import CppWrapperCodeCache

from torch.fx.experimental.proxy_tensor import make_fx

from poptorch_core.executor.backends import _background_builds
from poptorch_core.executor.backends._executable import Executable


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
    with pytest.raises(RuntimeError, match="inside"):
        with _background_builds.background_cpp_builds():
            assert CppWrapperCodeCache.load_pybinding is not loader
            assert torch._functorch.config.force_non_lazy_backward_lowering
            raise RuntimeError("inside")
    assert CppWrapperCodeCache.load_pybinding == loader
    assert not torch._functorch.config.force_non_lazy_backward_lowering


def test_overlapping_compilations_share_one_activation():
    """Compilations in two threads overlap: the settings stay until the
    last one leaves, and then what was there before comes back."""
    loader = CppWrapperCodeCache.load_pybinding
    first, second = (_background_builds.background_cpp_builds()
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

    entry = _background_builds._EntryOnFirstCall(load)
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

    entry = _background_builds._EntryOnFirstCall(load)
    with pytest.raises(RuntimeError, match="g\\+\\+ failed"):
        entry()
