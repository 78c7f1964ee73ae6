"""What happens to the graphs that do not fill a last combined batch.

A PopTorch model takes ``deviceIterations x replicas x gradientAccumulation``
fixed-size mini-batches per call. The PopTorch-side loaders follow
PopTorch's ``drop_last=True`` default but say how many graphs each epoch
drops; with ``drop_last=False`` the last combined batch is completed with
padding-only mini-batches (every mask False), so every graph is seen once
per epoch and every batch keeps its shape. A data set smaller than one
combined batch gives one padded batch instead of none.

Example::

    >>> import poptorch
    >>> mini_batches_per_step(poptorch.Options().deviceIterations(3))
    3
    >>> policy = LastBatch(drop_last=True, num_mini_batches=4)
    >>> policy.keeps_small_split(num_samples=19, samples_per_step=20)
    True
"""
import dataclasses
from typing import Any, Callable, Iterator, List, Optional

from torch_geometric.data import Batch

import poptorch_core as poptorch
from poptorch_core import logger


def mini_batches_per_step(options: poptorch.Options) -> int:
    """Mini-batches a PopTorch model consumes per call (PopTorch's
    ``D * (R // input_group_size) * G``)."""
    return (options.device_iterations *
            (options.replication_factor // options.input_group_size) *
            options.Training.gradient_accumulation)


def real_graphs(batch: Any) -> Optional[int]:
    """Real graphs of a (combined) fixed-size batch, by its
    ``graphs_mask``; None without masks."""
    mask = getattr(batch, "graphs_mask", None)
    return None if mask is None else int(mask.sum())


@dataclasses.dataclass
class LastBatch:
    """The last-batch policy of one loader."""
    drop_last: bool
    num_mini_batches: int
    epochs_logged: int = 0

    def keeps_small_split(self, num_samples: int,
                          samples_per_step: int) -> bool:
        """Whether a data set smaller than one combined batch is given one
        padded batch instead of none (only drop_last would drop it)."""
        return self.drop_last and 0 < num_samples < samples_per_step

    def log_dropped(self, dropped: Optional[int], what: str) -> None:
        """Logs this epoch's dropped graphs: a warning the first epoch,
        then at info level (the count is the same every epoch)."""
        if not dropped:
            return
        log = logger.warning if self.epochs_logged == 0 else logger.info
        self.epochs_logged += 1
        log("FixedSizeDataLoader drops %s this epoch: they do not fill a "
            "whole combined batch (%d mini-batch(es) per step) and "
            "drop_last=True (PopTorch's default). Pass drop_last=False to "
            "keep every graph: the last combined batch is then completed "
            "with padding-only mini-batches.", what if dropped is None else
            f"{dropped} graph(s) ({what})", self.num_mini_batches)

    def combine(self, batches: Iterator[Batch],
                concat: Callable[[List[Batch]], Batch],
                padding: Callable[[int], List[Batch]]) -> Iterator[Batch]:
        """Joins each group of ``num_mini_batches`` mini-batches with
        ``concat``; a final incomplete group is dropped (and logged) or,
        without drop_last or when it is the epoch's only group, completed
        with ``padding(count)`` mini-batches. The mini-batches arrive as
        ``concat`` makes them (the loader's ``CombinedBatchingCollater``),
        so a group of one is yielded as it is: joining it again would
        rebuild the same batch on every step."""
        group: List[Batch] = []
        yielded = 0
        for batch in batches:
            group.append(batch)
            if len(group) == self.num_mini_batches:
                yield batch if len(group) == 1 else concat(group)
                yielded += 1
                group = []
        if not group:
            return
        if self.drop_last and yielded:
            counts = [real_graphs(b) for b in group]
            dropped = None if None in counts else sum(counts)
            self.log_dropped(dropped, f"{len(group)} packed mini-batch(es)")
            return
        yield concat(group + padding(self.num_mini_batches - len(group)))
