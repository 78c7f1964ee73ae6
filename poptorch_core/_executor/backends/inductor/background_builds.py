"""The C++ builds of a CPU compilation run in the background, overlapping
the Python work that follows them.

With ``cpp_wrapper`` (``inductor.cpu.FIRST_COMPILE_PATCHES``) inductor
builds one shared library per graph: the forward's, then the backward's. By
default each build blocks its compilation, and AOTAutograd compiles the
backward graph only at the first backward call, so on a first run nothing
overlaps: forward code generation, forward ``g++``, backward code
generation, backward ``g++``, one after the other
(``docs/design/compile_backend.rst`` has the timeline).

:func:`background_cpp_builds` changes two things while a graph compiles:

* AOTAutograd compiles the backward graph right after the forward one
  (``force_non_lazy_backward_lowering``), as it does when exporting; a
  training program always runs its backward anyway;
* inductor's C++ wrapper libraries are built by a thread pool
  (``load_pybinding_async`` with a ``submit_fn``, inductor's own hook for
  asynchronous builds) and loaded on their first call, or when the
  compilation asks for them (:meth:`_EntryOnFirstCall.load`, for each
  library the activation lists). While the forward's ``g++`` runs (a
  subprocess, which leaves the GIL free), the backward's codegen runs in
  the compiling thread, and the two builds can use both cores.

A training step on the CPU is one graph (``passes.training_step``), so
there is one library; it is built from two objects, the wrapper and the
kernels (``cpp_wrapper_build_separate``, ``inductor.cpu``), and the two
compiler runs go side by side (:func:`_compile_in_background_worker`), one
per core, before the link: inductor's own worker runs them one after the
other.

Missing precompiled headers are built in the background too, after the
compilation (:mod:`._precompiled_headers`), and none is looked up for a
library that is built already. One more swap shortens the code generation
that comes before the builds: inductor's vectorisation strides skip
``sympy.simplify`` for linear indices (:mod:`._linear_strides`).

A library whose build fails raises inductor's error when it is loaded.
On a cache hit the libraries already exist and nothing is built.
"""
import concurrent.futures
import contextlib
import os
import threading
from typing import Any, Callable, Iterator, List, Optional, Sequence

from torch._functorch import config as functorch_config
from torch._inductor import codecache
from torch._inductor.codecache import CppWrapperCodeCache
from torch._inductor.codegen import cpp as cpp_codegen

from . import linear_strides
from .precompiled_headers import (build_later, header_unless_built,
                                  is_header_build)

_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_pool_lock = threading.Lock()
#: Compilations inside :func:`background_cpp_builds` now, and what
#: AOTAutograd's lowering flag was before the first of them.
_active = 0
_saved_lowering = False
_state_lock = threading.Lock()
#: ``lists``: per thread, the lists of the entries its open activations
#: have made, innermost last.
_made = threading.local()


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

    def load(self) -> Callable:
        """The entry function, once the library is built and loaded."""
        if self._entry is None:
            with self._lock:
                if self._entry is None:
                    self._entry = self._load()
                    self._load = None
        return self._entry

    def __call__(self, *args: Any) -> Any:
        return (self._entry or self.load())(*args)


_serial_worker = codecache._worker_compile_cpp
# Inductor's header lookup (torch versions without precompiled headers
# have none: nothing to swap).
_header_lookup = getattr(codecache, "_precompile_header", None)
_header_unless_built = (header_unless_built(_header_lookup)
                        if _header_lookup is not None else None)
# Inductor's stride analysis (torch versions that name it otherwise keep
# theirs).
_vec_strides = getattr(cpp_codegen, "stride_at_vec_range", None)


def _compile_in_background_worker(lock_path: str,
                                  builders: Sequence[Any]) -> None:
    """Inductor's ``_worker_compile_cpp`` while a compilation is active: a
    missing precompiled header is built later, in the background
    (:mod:`._precompiled_headers`), and a library from separately compiled
    objects (``cpp_wrapper_build_separate``: the wrapper at -O1, the kernels
    at -O3, then the link) with the two compiler runs side by side."""
    if is_header_build(builders):
        build_later(builders[0])
        return
    if len(builders) != 3:
        _serial_worker(lock_path, builders)
        return
    from torch.utils._filelock import FileLock
    *objects, linker = builders
    with FileLock(lock_path, timeout=codecache.LOCK_TIMEOUT):
        pending = [b for b in objects
                   if not os.path.exists(b.get_target_file_path())]
        with concurrent.futures.ThreadPoolExecutor(len(pending) or 1) as pool:
            for future in [pool.submit(b.build) for b in pending]:
                future.result()
        if not os.path.exists(linker.get_target_file_path()):
            linker.build()


def _load_pybinding_in_background(*args: Any, **kwargs: Any) -> Callable:
    entry = _EntryOnFirstCall(CppWrapperCodeCache.load_pybinding_async(
        *args, submit_fn=_submit, **kwargs))
    lists = getattr(_made, "lists", None)
    if lists:
        lists[-1].append(entry)
    return entry


@contextlib.contextmanager
def background_cpp_builds() -> Iterator[List[_EntryOnFirstCall]]:
    """While active, the graphs being compiled build their C++ wrapper
    libraries in the background, and a training graph's backward is
    compiled with its forward (the other swaps of the module docstring
    apply too). Yields the list of the libraries that this thread's
    compilation makes (to :meth:`~_EntryOnFirstCall.load` them).

    These settings are process-wide (inductor's and AOTAutograd's), so
    compilations in several threads share one activation: the first to
    enter installs them, the last to leave restores what was there."""
    global _active, _saved_lowering
    libraries: List[_EntryOnFirstCall] = []
    if not hasattr(_made, "lists"):
        _made.lists = []
    _made.lists.append(libraries)
    with _state_lock:
        if _active == 0:
            _saved_lowering = functorch_config.force_non_lazy_backward_lowering
            functorch_config.force_non_lazy_backward_lowering = True
            CppWrapperCodeCache.load_pybinding = _load_pybinding_in_background
            codecache._worker_compile_cpp = _compile_in_background_worker
            if _header_lookup is not None:
                codecache._precompile_header = _header_unless_built
            if _vec_strides is not None:
                cpp_codegen.stride_at_vec_range = \
                    linear_strides.stride_at_vec_range
        _active += 1
    try:
        yield libraries
    finally:
        _made.lists = [made for made in _made.lists if made is not libraries]
        with _state_lock:
            _active -= 1
            if _active == 0:
                del CppWrapperCodeCache.load_pybinding
                codecache._worker_compile_cpp = _serial_worker
                if _header_lookup is not None:
                    codecache._precompile_header = _header_lookup
                if _vec_strides is not None:
                    cpp_codegen.stride_at_vec_range = _vec_strides
                functorch_config.force_non_lazy_backward_lowering = \
                    _saved_lowering
