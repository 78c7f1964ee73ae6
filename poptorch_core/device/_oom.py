"""What happens when a model does not fit: ``opts.Simulator.memoryCheck``.

``"error"`` raises :class:`poptorch.Error` at compile time, as an IPU
compilation runs out of memory; ``"warn"`` (the default) logs the same
message and the model runs on the host anyway; ``"off"`` says nothing.

Example::

    >>> from poptorch_core.device.memory import IpuMemory
    >>> print(out_of_memory_message([IpuMemory(0, 100, {"parameters": 150})],
    ...                             "Mk2 GC200"))  # doctest: +ELLIPSIS
    Out of memory on IPU0 (Mk2 GC200): the model needs 150 B but the IPU has 100 B...
"""
from typing import Sequence

from .._logging import logger
from ..errors import Error
from .memory import IpuMemory, format_bytes

_ADVICE = (
    "To fit, split the model over more IPUs (poptorch.BeginBlock or "
    "poptorch.Block with ipu_id, and a PipelinedExecution), use a smaller "
    "micro-batch, add poptorch.recomputationCheckpoint, or lower "
    "availableMemoryProportion. opts.Simulator.memoryCheck(\"warn\") runs "
    "it on the host anyway.")


def out_of_memory_message(memory: Sequence[IpuMemory], chip_name: str) -> str:
    """The message for the IPUs of ``memory`` that do not fit ("" when all
    fit)."""
    lines = []
    for ipu in memory:
        if ipu.fits:
            continue
        lines.append(
            f"Out of memory on IPU{ipu.ipu} ({chip_name}): the model needs "
            f"{format_bytes(ipu.total)} but the IPU has "
            f"{format_bytes(ipu.capacity)}. Largest consumers:")
        lines += [f"  {c.describe()}" for c in ipu.consumers]
    if not lines:
        return ""
    return "\n".join(lines + [_ADVICE])


def check_memory(report, mode: str) -> None:
    """Applies ``memoryCheck(mode)`` (``"error"``, ``"warn"`` or ``"off"``,
    validated by the options) to a :class:`SimulationReport`."""
    if mode == "off":
        return
    message = out_of_memory_message(report.memory, report.chip.name)
    if not message:
        return
    if mode == "error":
        raise Error(message)
    logger.warning("%s", message)
