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
  ``Sync`` does (same batches, same order rules, no worker process), and
  times its complete epochs (:class:`LoadingShare`). Once loading takes at
  least :data:`WORKER_LOADING_SHARE` of :data:`WORKER_LOADING_EPOCHS`
  complete epochs in a row, from the second step on (the first one
  compiles), the following epochs load in a worker: then the loading a
  worker takes over outweighs what it costs the step.
  On 2 cores with torch's 2 threads a worker made the NCI training step,
  whose collation is 16-24% of an epoch with the ``compile`` backend, 0.93
  times as fast as loading inline (eight paired epochs), and a step whose
  loading (parsing SMILES) is 32-38% of it 1.03-1.07 times as fast. The
  NCI share varies from epoch to epoch with the machine's load: under the
  earlier rule (25% of one epoch) one busy epoch could move the benchmark's
  Async loader to a worker for the rest of the run (in one full run Async
  fell 7-10% behind Sync from the round after an outlier on).

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
