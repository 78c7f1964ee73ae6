"""Where ``DataLoaderMode.Async`` loads: a worker process, or this process.

A worker process pays off only where a core is free for it. The training
step's intra-op threads keep their cores busy between ops (OpenMP threads
spin rather than sleep), so a worker on one of those cores takes its time
from the step even at the lowest priority: on 2 cores with torch's 2
threads, Async loading in a worker measured 6-10% slower than Sync (the
collation it takes over is about 10% of a step, and receiving a batch still
costs a third of that). So the loader chooses:

* ``worker`` when the CPUs this process may run on outnumber torch's
  intra-op threads (a core the step does not use), as PopTorch always does;
* ``inline`` otherwise: the loader iterates in this process, exactly as
  ``Sync`` does (same batches, same order rules, no worker process).

``POPTORCH_ASYNC_PLACEMENT`` overrides the choice: ``auto`` (default),
``worker`` or ``inline``. ``AsyncRebatched`` (and ``Async`` re-batching a
short final batch) always uses a worker: re-batching is the worker's job.

Example::

    >>> torch.set_num_threads(1)   # on a 2-CPU machine: one CPU free
    >>> async_placement()
    'worker'
"""
import os

import torch

__all__ = ["PLACEMENT_ENV", "async_placement", "available_cpus"]

PLACEMENT_ENV = "POPTORCH_ASYNC_PLACEMENT"
_CHOICES = ("auto", "worker", "inline")


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def async_placement() -> str:
    """``"worker"`` or ``"inline"``: where an Async loader built now loads
    (see the module docstring)."""
    value = os.environ.get(PLACEMENT_ENV, "auto")
    choice = value.strip().lower() or "auto"
    if choice not in _CHOICES:
        raise ValueError(
            f"Environment variable {PLACEMENT_ENV}={value!r} is not one "
            f"of {', '.join(_CHOICES)}: use auto (a worker process when a "
            "CPU is free for it), worker or inline.")
    if choice != "auto":
        return choice
    return "worker" if available_cpus() > torch.get_num_threads() \
        else "inline"
