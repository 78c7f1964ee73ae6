"""Inductor's CPU vector-ISA check, run ahead of the first compilation.

Before it generates the first CPU kernel, inductor checks which vector ISAs
(AVX-512 VNNI, AVX-512, AVX2 on x86) the C++ compiler can build and load:
one ``g++`` run and one Python subprocess per ISA the CPU reports, on the
critical path of the first step. Inductor then uses the first ISA of that
list. These changes take most of it off the critical path
(``docs/design/compile_backend.rst`` has their effect):

* **Early.** Nothing in the check depends on the model, so the ``compile``
  backend starts it in a background thread when a CPU model is wrapped
  (:func:`start_vec_isa_probe`); the first call's tracing runs in
  parallel with it.
* **Waited for only when needed.** While a probe is pending, inductor's
  ``valid_vec_isa_list`` (which ``pick_vec_isa`` calls) first waits for
  it (:func:`wait_for_vec_isa_probe`), so AOTAutograd's tracing and
  partitioning of a first compilation also run in parallel with the
  check: inductor first asks for its ISA when it generates the first
  kernel (on a cache hit, when it loads the cached ones). The wrapper
  puts inductor's own function back once the list is settled.
* **Only the ISA inductor will use.** The thread runs inductor's own
  build-and-load check (``bool(isa)``) for the first ISA the CPU reports.
  When that passes, :func:`wait_for_vec_isa_probe` fills inductor's ISA
  list with the ISAs the CPU reports, without building the lower ones or
  their optional extras: inductor takes the first, which was checked.
  When it fails, or when the user chose the ISA (``ATEN_CPU_CAPABILITY``,
  ``cpp.simdlen``, ``cpp.vec_isa_ok``), or the platform is not x86-64
  Linux, inductor's full check runs unchanged.

Invariants:

* The ISA inductor compiles for is the one its own check would choose, and
  it has passed that check.
* At most one probe thread per process. Waiting when none was started is
  a no-op, and a probe that fails is silent here: inductor runs the full
  check when it needs the answer and reports what goes wrong there.
* Inductor's configuration is only changed inside
  :func:`wait_for_vec_isa_probe`, by one thread at a time, and restored
  before it returns, so the compilation's cache key is the same with and
  without this module.
"""
import contextlib
import os
import platform
import sys
import threading
from typing import Any, Iterator, Optional

__all__ = ["start_vec_isa_probe", "wait_for_vec_isa_probe"]

_lock = threading.Lock()
#: One thread at a time fills inductor's list (under a config patch).
_fill_lock = threading.Lock()
_probe: Optional[threading.Thread] = None
#: The ISA inductor will pick, once it has passed inductor's check.
_checked_isa: Any = None


def _isa_inductor_picks() -> Any:
    """The ISA ``pick_vec_isa()`` returns when every check passes (the first
    of inductor's candidates whose flags the CPU reports), or None where
    the choice is the user's or the platform's rules differ."""
    from torch._inductor import config, cpu_vec_isa
    if os.environ.get("ATEN_CPU_CAPABILITY") or \
            config.cpp.simdlen is not None or \
            config.cpp.vec_isa_ok is not None or config.is_fbcode() or \
            sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    flags = cpu_vec_isa.x86_isa_checker()
    return next((isa for isa in cpu_vec_isa.supported_vec_isa_list
                 if all(flag in flags for flag in str(isa).split())), None)


def _check_vec_isa() -> None:
    global _checked_isa
    try:
        isa = _isa_inductor_picks()
        if isa is not None and bool(isa):  # inductor's build-and-load check
            _checked_isa = isa
    except Exception:  # pylint: disable=broad-except
        # Inductor runs its full check on the compiling thread and raises
        # there.
        pass


def start_vec_isa_probe() -> None:
    """Starts the ISA check in a daemon thread, once per process, and makes
    inductor's first request for its ISA list wait for it.

    Example::

        >>> start_vec_isa_probe()
        >>> wait_for_vec_isa_probe()  # returns once the check has run
    """
    global _probe
    with _lock:
        if _probe is None:
            _import_path_mutators()
            _probe = threading.Thread(target=_check_vec_isa, daemon=True,
                                      name="poptorch-vec-isa-probe")
            _wait_on_first_request()
            _probe.start()


def _import_path_mutators() -> None:
    """Imports, on the calling thread, what the check would first import in
    the probe thread and that edits ``sys.meta_path`` when it does.

    Inductor's build check imports ``torch.utils.cpp_extension``, and with
    it setuptools, whose first import puts its distutils finder at the head
    of ``sys.meta_path`` and takes it out again. An import running on
    another thread at that moment iterates that list: the removal shifts
    it, the finder after the removed one (the path finder) is skipped, and
    a module that exists is not found. That happened to a first step's
    tracing (``No module named 'torch.utils._runtime_estimation'``); a
    thread that inserted and removed the finder in a loop made imports on
    the main thread fail. Imported here, setuptools does that on the thread
    that wraps the model, before the probe thread exists."""
    try:
        import torch.utils.cpp_extension  # noqa: F401 pylint: disable=W0611
    except ImportError:  # inductor's check reports it where it needs it
        pass


def _inductor_list() -> Any:
    """Inductor's own ``valid_vec_isa_list`` (cached per process)."""
    from torch._inductor import cpu_vec_isa
    current = cpu_vec_isa.valid_vec_isa_list
    return getattr(current, "_poptorch_inductor_list", current)


def _wait_on_first_request() -> None:
    """Puts a wrapper in place of inductor's ``valid_vec_isa_list`` that
    waits for the probe first; the wrapper keeps the cache's
    ``cache_info``/``cache_clear``."""
    from torch._inductor import cpu_vec_isa
    inductor_list = _inductor_list()

    def valid_vec_isa_list_after_probe() -> Any:
        wait_for_vec_isa_probe()
        return inductor_list()

    wrapper: Any = valid_vec_isa_list_after_probe
    wrapper._poptorch_inductor_list = inductor_list
    for name in ("cache_info", "cache_clear"):
        if hasattr(inductor_list, name):
            setattr(wrapper, name, getattr(inductor_list, name))
    cpu_vec_isa.valid_vec_isa_list = wrapper


def _restore_inductor_list() -> None:
    from torch._inductor import cpu_vec_isa
    cpu_vec_isa.valid_vec_isa_list = _inductor_list()


def wait_for_vec_isa_probe() -> None:
    """Blocks until a started ISA check has finished (no-op otherwise);
    when it passed, gives inductor its list of ISAs without building the
    ones below the checked one."""
    with _lock:
        probe = _probe
    if probe is None or probe is threading.current_thread():
        return
    probe.join()
    with _fill_lock:
        _settle_inductor_list()
        _restore_inductor_list()


@contextlib.contextmanager
def _optional_checks_fail() -> Iterator[None]:
    """Inductor's build checks (``VecISA.check_build``) fail without
    building while the list is filled. Only ISAs below the checked one
    still run them then, for optional extras: a lower ISA is never picked
    while the checked one is in the list, which comes first for every
    selection rule (capability name, bit width), so the answer only drops
    extras (or an AVX-512 VNNI entry under AMX) that nothing would use."""
    from torch._inductor import cpu_vec_isa
    check_build = cpu_vec_isa.VecISA.check_build
    cpu_vec_isa.VecISA.check_build = lambda self, code: False
    try:
        yield
    finally:
        cpu_vec_isa.VecISA.check_build = check_build


def _settle_inductor_list() -> None:
    if _checked_isa is None:
        return
    from torch._inductor import config
    inductor_list = _inductor_list()
    if inductor_list.cache_info().currsize:
        return  # inductor has already made its list
    # Every ISA counts as passing while the list is made (cached for the
    # process): the first, the one inductor uses, passed above. The lower
    # ones' optional extras (AVX-512 BF16, VNNI) would still be built for,
    # one compiler run each on the compiling thread; they count as missing.
    with config.patch({"cpp.vec_isa_ok": True}), _optional_checks_fail():
        isas = inductor_list()
    if not isas or isas[0] is not _checked_isa:
        # Not the ISA that was checked: make inductor check them all.
        inductor_list.cache_clear()
