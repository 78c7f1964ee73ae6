"""Host memory kept for reuse: the simulated IPU reserves its memory once.

glibc's ``malloc`` serves blocks above a dynamic threshold (128 KiB at
first) with ``mmap``, and gives the free memory at the top of its heap back
to the OS whenever that exceeds twice the threshold. A training step
allocates and frees the same few MiB of activations and gradients every
time, so by default many steps fault their pages back in, page by page:
about 1,200 page faults per step for the molecule GNN of the examples, a
fifth of its step time. Raising both thresholds keeps the memory in the
process for the next step, as the CUDA caching allocator does for GPU
memory and as the IPU does with its statically allocated memory.

The setting is process-wide, so it is made once, when the first program
built with ``Simulator.hostMemoryPool(True)`` (the default) is compiled,
and never undone. It is skipped where it cannot apply (a C library other
than glibc) and where the user has configured ``malloc`` already
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or
``GLIBC_TUNABLES`` in the environment).

Example::

    >>> keep_host_memory()   # True once configured (or already done)
    True
"""
import ctypes
import ctypes.util
import os
import platform
from typing import Optional

from ..._logging import logger

#: ``mallopt`` parameters (``<malloc.h>``).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: Blocks up to this size come from the heap (glibc's maximum on 64 bits).
MMAP_THRESHOLD = 32 << 20
#: Free memory kept at the top of the heap before any is returned.
TRIM_THRESHOLD = 1 << 30
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                  "GLIBC_TUNABLES")

_configured: Optional[bool] = None


def _mallopt():
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.mallopt
    except (OSError, AttributeError):
        return None


def keep_host_memory() -> bool:
    """Configures glibc's ``malloc`` to keep freed memory for reuse (once
    per process). Returns whether the process runs with the setting."""
    global _configured
    if _configured is not None:
        return _configured
    user = [name for name in _USER_SETTINGS if name in os.environ]
    mallopt = None if user else _mallopt()
    _configured = bool(mallopt) and \
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and \
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if user:
        logger.debug("Simulator.hostMemoryPool: leaving malloc as %s "
                     "configures it", user[0])
    elif _configured:
        logger.debug("Simulator.hostMemoryPool: malloc keeps freed host "
                     "memory for reuse (mmap threshold %d MiB, trim "
                     "threshold %d MiB)", MMAP_THRESHOLD >> 20,
                     TRIM_THRESHOLD >> 20)
    else:
        logger.debug("Simulator.hostMemoryPool: not glibc, nothing to do")
    return _configured
