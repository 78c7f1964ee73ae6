"""The machine's precompiled headers, built in the background.

Most of the ``compile`` backend's C++ build time is spent parsing the
headers that inductor's generated code includes (``cpp_prefix.h`` for the
kernels, ``cpp_wrapper/cpu.h`` for the wrapper). Inductor can precompile
them, once per machine, compiler and set of flags, into its machine-wide
directory (``<tmp>/torchinductor_<user>/precompiled_headers``, outside the
compilation cache, keyed by the preprocessed headers' hash, the command
line and the compiler version). With them the builds take about half as
long. But inductor builds a missing header inside the compilation that
needs it, one after the other, so a first run on a machine would take far
longer than without headers (``docs/design/compile_backend.rst``).

While the backend compiles (``inductor.background_builds``), a compilation
never waits for a header: :func:`build_later` starts a background compiler
process at the lowest priority (``nice 19``: it takes a core only when
nothing else wants it), which outlives the Python process if need be,
writes to a temporary file and renames it into place when complete, so
that no compilation ever sees half a header; one process per header at a
time (a ``.building`` marker, taken over when older than
:data:`STALE_AFTER_S`). The compilation that started it includes the
header as text (inductor passes ``-include`` of a file that includes it
either way), and so does every compilation until the header is there: a
first run on a machine takes as long as without headers.

Inductor also looks a header up (preprocessing it to hash it) before it
checks whether the library is built already; on a
warm start, where nothing is built, :func:`header_unless_built` skips that.
Where the library is to be built, it looks the kernels' header up in a
thread while inductor looks the wrapper's up: both are compiler and
``openssl`` processes, which leave the GIL and the second core free, so
the two lookups take the time of the longer one, not their sum.

``TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS=0`` turns precompiled headers
off, as for inductor itself.
"""
import concurrent.futures
import contextlib
import glob
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence

#: The suffix of the marker file next to a header being built.
BUILDING_SUFFIX = ".building"
#: A marker older than this belongs to a build that died: another
#: compilation takes the build over.
STALE_AFTER_S = 3600.0

# Runs the compiler (``$@``) at the lowest priority into ``$1``, moves it to
# ``$2`` if it succeeded, and removes ``$1`` and the marker ``$3`` in any
# case. The outer shell exits at once; the job carries on past the end of
# the Python process that started it, ignoring the terminal's interrupt
# (as a non-interactive shell's background job does) and hang-up. It stays
# in the session of that process: with the scheduler's autogroups (one per
# session), a new session would share the cores equally with the
# compilation, whatever its priority.
_JOB = ('tmp=$1 target=$2 marker=$3; shift 3; '
        '( trap "" HUP; '
        'if command -v nice >/dev/null 2>&1; then nice -n 19 "$@"; '
        'else "$@"; fi && mv -f "$tmp" "$target"; '
        'rm -f "$tmp" "$marker" ) </dev/null >/dev/null 2>&1 &')


def use_precompiled_headers() -> bool:
    """Whether compilations use precompiled headers: inductor's setting
    (``TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS``, on by default), where
    the ``openssl`` command that inductor hashes the headers with exists (a
    compilation fails without it)."""
    from torch._inductor import config
    return bool(getattr(config, "cpp_cache_precompile_headers", False)) \
        and shutil.which("openssl") is not None


def _lookup_key(args: Sequence[Any], kwargs: Dict[str, Any]) -> Hashable:
    return tuple(args), tuple(sorted(kwargs.items()))


def _next_lookup(caller: Dict[str, Any], args: Sequence[Any]
                 ) -> Optional[Hashable]:
    """The arguments of the kernels' header lookup that inductor's
    ``load_async`` (whose locals are ``caller``) makes right after this
    one (``args``), when this one is the wrapper's; None otherwise (also
    where that caller names its locals otherwise: another torch
    version)."""
    from torch._inductor import codecache
    command = caller.get("optimized_compile_command")
    if not (caller.get("optimized_code") and isinstance(command, dict) and
            len(args) >= 2 and args[1] == caller.get("main_cmd_line") and
            isinstance(caller.get("optimized_cmd_line"), str)):
        return None
    prefix = getattr(codecache, "_get_cpp_prefix_header", None)
    header = prefix(caller.get("device_type", "cpu")) if prefix else None
    if header is None:
        return None
    key = _lookup_key((header, caller["optimized_cmd_line"]), command)
    try:
        hash(key)  # inductor's lookup is cached: its arguments hash
    except TypeError:
        return None
    return key


def header_unless_built(lookup: Callable[..., str]) -> Callable[..., Any]:
    """Inductor's ``_precompile_header`` (``lookup``), except that it
    returns None (no header) when the library that its caller,
    ``CppCodeCache.load_async``, would build is on disk already: then
    nothing is compiled, and looking the header up would only cost time
    (a large share of a warm first step). The caller's ``main_path`` (its
    generated source) names the library; where it has none (another torch
    version), every header is looked up, as inductor does. Otherwise the
    wrapper's lookup starts the kernels' in a thread (see the module
    docstring), which the next call, the kernels' lookup, waits for."""
    started: Dict[Hashable, concurrent.futures.Future] = {}
    lock = threading.Lock()

    def look_up_in_thread(key: Hashable) -> None:
        args, kwargs = key
        future: concurrent.futures.Future = concurrent.futures.Future()
        with lock:
            if key in started:
                return
            started[key] = future

        def run() -> None:
            try:
                future.set_result(lookup(*args, **dict(kwargs)))
            except BaseException as error:  # noqa: BLE001  re-raised
                future.set_exception(error)  # by the call that waits
        threading.Thread(target=run, name="poptorch-header-lookup",
                         daemon=True).start()

    def header(*args: Any, **kwargs: Any) -> Optional[str]:
        caller = sys._getframe(1).f_locals
        source = caller.get("main_path")
        if isinstance(source, str) and \
                os.path.exists(os.path.splitext(source)[0] + ".so"):
            return None
        with lock:
            future = started.pop(_lookup_key(args, kwargs), None)
        if future is not None:
            return future.result()
        ahead = _next_lookup(caller, args)
        if ahead is not None:
            look_up_in_thread(ahead)
        return lookup(*args, **kwargs)

    return header


def is_header_build(builders: Sequence[Any]) -> bool:
    """Whether inductor's ``builders`` (one ``CppBuilder`` per compiler
    run) precompile a header: a single run making a ``.gch`` (GCC) or
    ``.pch`` (Clang)."""
    return len(builders) == 1 and \
        builders[0].get_target_file_path().endswith((".gch", ".pch"))


def _fresh(marker: str) -> bool:
    """Whether the build that left ``marker`` may still be running."""
    try:
        return time.time() - os.path.getmtime(marker) < STALE_AFTER_S
    except FileNotFoundError:
        return False


def _take_over(marker: str) -> None:
    """Removes a stale ``marker`` and what its dead build left behind."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(marker)
    for partial in glob.glob(glob.escape(marker[:-len(BUILDING_SUFFIX)])
                             + ".*.partial"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)


def _claim(marker: str) -> bool:
    """Takes ``marker`` for this build: False while another build that
    is not stale holds it, or where the directory cannot be written (the
    compilation then goes on without the header)."""
    for _ in range(2):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            if _fresh(marker):
                return False
            try:
                _take_over(marker)
            except OSError:
                return False
        except OSError:
            return False
    return False


def build_later(builder: Any) -> bool:
    """Starts building the header that inductor's ``builder`` precompiles,
    in the background (see the module docstring); returns whether a build
    started (not when the header exists, another build is under way, or
    the command does not name its output as expected)."""
    target = builder.get_target_file_path()
    command = shlex.split(builder.get_command_line())
    partial = f"{target}.{os.getpid()}.partial"
    if os.path.exists(target) or command.count(target) != 1:
        return False
    marker = target + BUILDING_SUFFIX
    if not _claim(marker):
        return False
    command[command.index(target)] = partial
    try:
        subprocess.run(["sh", "-c", _JOB, "sh", partial, target, marker,
                        *command], cwd=os.path.dirname(target) or None,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        with contextlib.suppress(OSError):
            os.remove(marker)
        return False
    return True


def header_builds_running(directory: str) -> List[str]:
    """The headers whose background builds are under way in
    ``directory`` (a ``precompiled_headers`` directory; markers older than
    :data:`STALE_AFTER_S` are not counted)."""
    return [marker[:-len(BUILDING_SUFFIX)] for marker in glob.glob(
        os.path.join(glob.escape(directory), "*" + BUILDING_SUFFIX))
        if _fresh(marker)]


def wait_for_header_builds(directory: Optional[str] = None,
                           timeout: float = 600.0) -> bool:
    """Waits until no header build runs in ``directory`` (by default
    inductor's machine-wide one), at most ``timeout`` seconds; returns
    whether none runs. Benchmarks call it so that a build started by a
    first compilation does not take a core from what they time next."""
    if directory is None:
        from torch._inductor.codecache import _HEADER_DIR
        directory = _HEADER_DIR
    deadline = time.monotonic() + timeout
    while header_builds_running(directory):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
