"""Memory per IPU of a compiled model, by category.

What each IPU holds (every replica's IPUs hold the same):

- ``parameters`` and ``buffers``: the tensors placed on it (a weight lives
  on the IPU of its first consumer), in their own dtype;
- ``gradients`` (training): one per trainable weight, in its dtype;
- ``accumulators`` (training, ``gradientAccumulation > 1``): one per
  trainable weight in the optimizer's ``accum_type``; SGD with
  ``use_combined_accum`` keeps its combined accumulator as optimizer state;
- ``optimizer_state``: the optimizer's slots in their accumulation types
  (SGD: velocity when ``momentum != 0``; Adam, AdamW, LAMB: two moments and
  a float32 step; RMSprop: the mean square, plus the mean gradient when
  centred and a momentum buffer when ``momentum > 0``);
- ``activations``: the peak of live values over the step, from the graph's
  liveness (:mod:`._liveness`). Training keeps what autograd saves for the
  backward until the end of the forward, then needs one op's gradients on
  top. In a stage with ``poptorch.recomputationCheckpoint`` only the
  checkpoints and the stage's inputs are kept; the rest is recomputed one
  segment at a time in the backward;
- ``stash`` (pipelined training): the kept values of each stage for every
  other micro-batch in flight, ``2 x (forward stages - 1 - stage)`` copies;
- ``temporaries``: the largest working memory of one matrix product or
  convolution, capped at ``availableMemoryProportion`` (default 0.6, per
  IPU with ``setAvailableMemoryProportion``, per op with
  ``poptorch.set_available_memory``) of the IPU's memory;
- ``io``: one micro-batch of inputs and outputs (the device iterations
  stream through the same buffers).

Phased execution keeps only the largest phase's weights and their state on
an IPU at once (the others wait in Streaming Memory).

Example::

    >>> mem = IpuMemory(0, capacity=100, breakdown={"parameters": 60,
    ...                                             "activations": 50})
    >>> mem.total, mem.fits
    (110, False)
"""
import dataclasses
from typing import Dict, List

__all__ = ["CATEGORIES", "Consumer", "IpuMemory"]

#: The categories of :attr:`IpuMemory.breakdown`, in report order.
CATEGORIES = ("parameters", "buffers", "gradients", "accumulators",
              "optimizer_state", "activations", "stash", "temporaries", "io")


@dataclasses.dataclass
class Consumer:
    """Memory attributed to one module on one IPU.

    Attributes:
        module: the module's qualified name (``"<model>"`` for the root).
        bytes: what it holds, all categories together.
        breakdown: bytes per category.
        location: ``file:line`` of the user code that uses it, or ``""``.
    """
    module: str
    bytes: int
    breakdown: Dict[str, int]
    location: str = ""

    def describe(self) -> str:
        """``module: 12.3 MB (parameters 8.0 MB, ...) at file:line``."""
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in
                          sorted(self.breakdown.items(),
                                 key=lambda kv: -kv[1]) if v)
        where = f" at {self.location}" if self.location else ""
        return f"{self.module}: {format_bytes(self.bytes)} ({parts}){where}"


@dataclasses.dataclass
class IpuMemory:
    """The memory estimate of one IPU."""
    ipu: int
    capacity: int
    breakdown: Dict[str, int]
    consumers: List[Consumer] = dataclasses.field(default_factory=list)

    @property
    def total(self) -> int:
        """Bytes needed, all categories together."""
        return sum(self.breakdown.values())

    @property
    def fits(self) -> bool:
        """Whether the estimate is within the IPU's memory."""
        return self.total <= self.capacity

    @property
    def utilisation(self) -> float:
        """Needed over available memory."""
        return self.total / self.capacity

    def to_dict(self) -> Dict[str, object]:
        """This IPU's figures as plain values (JSON-serialisable)."""
        return {"ipu": self.ipu, "capacity_bytes": self.capacity,
                "total_bytes": self.total, "fits": self.fits,
                "breakdown_bytes": {k: self.breakdown.get(k, 0)
                                    for k in CATEGORIES},
                "largest_consumers": [dataclasses.asdict(c)
                                      for c in self.consumers]}


def format_bytes(n: float) -> str:
    """Decimal units, as IPU memory is quoted: ``"900.0 MB"``."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"
