"""Messages between an AsynchronousDataAccessor and its worker process.

One duplex pipe carries small control messages both ways; the data itself
lives in shared-memory ring slots. Every message after set-up carries the
*generation* (the number of resets so far) so that messages from an
abandoned epoch are recognised and dropped.

Worker -> consumer::

    (BUFFERS, template, slots)          once, after the first element
    (EMPTY,)                            instead of BUFFERS: nothing to load
    (SETUP_FAILED, details)             instead of BUFFERS: loading failed
    (ITEM, gen, slot, lengths)          slot ``slot`` holds the next element
    (END, gen, slot)                    end of an epoch (uses a slot credit)
    (ERROR, gen, details, pickled)      loading failed; the worker idles
                                        (``pickled``: the exception, or None)

Consumer -> worker::

    (RELEASE, gen, slot)   the consumer no longer reads ``slot``
    (GO,)                  lift the single-slot preload limit
    (RESET, gen)           abandon the epoch, free every slot, restart
    (STOP,)                exit
"""
import dataclasses
from typing import Optional

BUFFERS, EMPTY, SETUP_FAILED, ITEM, END, ERROR = range(6)
RELEASE, GO, RESET, STOP = range(100, 104)


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What the worker process needs to know besides the dataset."""
    buffer_size: int
    load_indefinitely: bool
    early_preload: bool
    rebatched_size: Optional[int]
    #: Drop a final partial re-batch (the DataLoader's ``drop_last``).
    drop_last: bool
    #: torch sharing strategy for the ring tensors, None for torch's default.
    torch_sharing_strategy: Optional[str] = None
    #: The consumer's default start method. A spawned or fork-server child
    #: inherits its own start method as default, which would make a torch
    #: DataLoader in the worker start its processes differently (and far
    #: more slowly) than in the consumer.
    default_start_method: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class FailureDetails:
    """A loading failure, formatted in the worker."""
    #: What was being loaded, e.g. ``"dataset index 7"``.
    where: str
    #: ``"ValueError: bad sample"``.
    summary: str
    #: The original traceback, formatted in the worker process.
    traceback: str
    pid: int

    def describe(self) -> str:
        """The message for the user: what failed, while loading what, and
        the worker's traceback."""
        return (f"{self.summary} (while loading {self.where}).\n"
                f"Original traceback in the worker process (pid {self.pid}):"
                f"\n{self.traceback}")
