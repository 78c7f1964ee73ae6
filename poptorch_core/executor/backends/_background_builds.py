"""The C++ builds of a CPU compilation run in the background, overlapping
the Python work that follows them.

With ``cpp_wrapper`` (``_cpu_inductor.FIRST_COMPILE_PATCHES``) inductor
builds one shared library per graph: the forward's, then the backward's. By
default each build blocks its compilation, and AOTAutograd compiles the
backward graph only at the first backward call, so on a first run nothing
overlaps, measured on the NCI GINE training step (2 cores, nothing
cached):

    forward codegen ~3.4 s | forward g++ ~5 s | backward codegen ~4.4 s |
    backward g++ ~5 s

:func:`background_cpp_builds` changes two things while a graph compiles:

* AOTAutograd compiles the backward graph right after the forward one
  (``force_non_lazy_backward_lowering``), as it does when exporting; a
  training program always runs its backward anyway;
* inductor's C++ wrapper libraries are built by a thread pool
  (``load_pybinding_async`` with a ``submit_fn``, inductor's own hook for
  asynchronous builds) and loaded on their first call. While the forward's
  ``g++`` runs (a subprocess, which leaves the GIL free), the backward's
  codegen runs in the compiling thread, and the two builds can use both
  cores.

A library whose build fails raises inductor's error on its first call,
which is the first forward or backward of the training step. On a cache
hit the libraries already exist and nothing is built.
"""
import concurrent.futures
import contextlib
import threading
from typing import Any, Callable, Iterator, Optional

from torch._functorch import config as functorch_config
from torch._inductor.codecache import CppWrapperCodeCache

__all__: list = []

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_pool_lock = threading.Lock()
#: Compilations inside :func:`background_cpp_builds` now, and what
#: AOTAutograd's lowering flag was before the first of them.
_active = 0
_saved_lowering = False
_state_lock = threading.Lock()


def _submit(fn: Callable[[], Any]) -> concurrent.futures.Future:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="poptorch-cpp-build")
    return _pool.submit(fn)


class _EntryOnFirstCall:
    """The library's entry function, loaded (after its build) on the first
    call."""

    def __init__(self, load: Callable[[], Callable]) -> None:
        self._load: Optional[Callable[[], Callable]] = load
        self._entry: Optional[Callable] = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        if self._entry is None:
            with self._lock:
                if self._entry is None:
                    self._entry = self._load()
                    self._load = None
        return self._entry(*args)


def _load_pybinding_in_background(*args: Any, **kwargs: Any) -> Callable:
    return _EntryOnFirstCall(CppWrapperCodeCache.load_pybinding_async(
        *args, submit_fn=_submit, **kwargs))


@contextlib.contextmanager
def background_cpp_builds() -> Iterator[None]:
    """While active, the graphs being compiled build their C++ wrapper
    libraries in the background, and a training graph's backward is
    compiled with its forward.

    Both settings are process-wide (inductor's and AOTAutograd's), so
    compilations in several threads share one activation: the first to
    enter installs them, the last to leave restores what was there."""
    global _active, _saved_lowering
    with _state_lock:
        if _active == 0:
            _saved_lowering = functorch_config.force_non_lazy_backward_lowering
            functorch_config.force_non_lazy_backward_lowering = True
            CppWrapperCodeCache.load_pybinding = _load_pybinding_in_background
        _active += 1
    try:
        yield
    finally:
        with _state_lock:
            _active -= 1
            if _active == 0:
                del CppWrapperCodeCache.load_pybinding
                functorch_config.force_non_lazy_backward_lowering = \
                    _saved_lowering
