"""Where ``DataLoaderMode.Async`` loads: a worker process, or this process.

A worker process pays off only where a core is free for it. The training
step's intra-op threads keep their cores busy between ops (OpenMP threads
spin rather than sleep), so a worker on one of those cores takes its time
from the step even at the lowest priority: where the step's threads take
every core, a worker slows the step by more than the loading it takes over
(receiving a batch is not free either; ``docs/design/data_loading.rst`` has
the measurements). So the loader chooses:

* ``worker`` when the CPUs this process may run on outnumber torch's
  intra-op threads (a core the step does not use), as PopTorch always does;
* ``inline`` otherwise: the loader iterates in this process, exactly as
  ``Sync`` does (same batches, same order rules, no worker process), and
  times its complete epochs (:class:`LoadingShare`). Once loading takes at
  least :data:`WORKER_LOADING_SHARE` of :data:`WORKER_LOADING_EPOCHS`
  complete epochs in a row, from the second step on (the first one
  compiles), the following epochs load in a worker: then the loading a
  worker takes over outweighs what it costs the step. The share varies
  from epoch to epoch with the machine's load, hence several epochs in a
  row: a single busy epoch must not move a loader to a worker for the
  rest of the run.

``POPTORCH_ASYNC_PLACEMENT`` overrides the choice: ``auto`` (default),
``worker`` or ``inline``. ``AsyncRebatched`` (and ``Async`` re-batching a
short final batch) always uses a worker: re-batching is the worker's job.

Example::

    >>> torch.set_num_threads(1)   # on a 2-CPU machine: one CPU free
    >>> async_placement()
    'worker'
"""
import os
import time
from typing import Any, Iterable, Iterator, Optional

import torch

__all__ = ["PLACEMENT_ENV", "WORKER_LOADING_EPOCHS", "WORKER_LOADING_SHARE",
           "LoadingShare", "async_placement", "available_cpus",
           "requested_placement"]

PLACEMENT_ENV = "POPTORCH_ASYNC_PLACEMENT"
_CHOICES = ("auto", "worker", "inline")

#: The share of an epoch spent loading from which an inline Async loader
#: moves to a worker process (see the module docstring)...
WORKER_LOADING_SHARE = 0.30
#: ... when that many complete epochs in a row reach it: one epoch slowed
#: down by something else on the machine does not decide.
WORKER_LOADING_EPOCHS = 2


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def requested_placement() -> str:
    """``"auto"``, ``"worker"`` or ``"inline"``: what
    ``POPTORCH_ASYNC_PLACEMENT`` asks for (``auto`` when unset)."""
    value = os.environ.get(PLACEMENT_ENV, "auto")
    choice = value.strip().lower() or "auto"
    if choice not in _CHOICES:
        raise ValueError(
            f"Environment variable {PLACEMENT_ENV}={value!r} is not one "
            f"of {', '.join(_CHOICES)}: use auto (a worker process when a "
            "CPU is free for it), worker or inline.")
    return choice


def async_placement() -> str:
    """``"worker"`` or ``"inline"``: where an Async loader built now starts
    loading (see the module docstring)."""
    choice = requested_placement()
    if choice != "auto":
        return choice
    return "worker" if available_cpus() > torch.get_num_threads() \
        else "inline"


class LoadingShare:
    """Which share of an epoch's wall time went into loading its batches,
    counted from the second batch on (before it, the first step compiles).

    :attr:`share` is None until an epoch of at least 3 batches has been
    iterated to its end (an epoch left early tells nothing).

    Example::

        >>> timer = LoadingShare()
        >>> for batch in timer.watch(range(4)):
        ...     pass
        >>> 0.0 <= timer.share <= 1.0
        True
    """

    def __init__(self) -> None:
        self.share: Optional[float] = None

    def watch(self, batches: Iterable[Any]) -> Iterator[Any]:
        """Yields ``batches``, timing how long each takes to arrive."""
        loading, start, count = 0.0, 0.0, 0
        iterator = iter(batches)
        while True:
            before = time.perf_counter()
            if count == 1:
                start = before
            try:
                batch = next(iterator)
            except StopIteration:
                break
            if count >= 1:
                loading += time.perf_counter() - before
            count += 1
            yield batch
        if count >= 3:
            elapsed = time.perf_counter() - start
            self.share = loading / elapsed if elapsed > 0 else 0.0
