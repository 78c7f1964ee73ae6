"""The simulated IPU itself: chip models, memory per IPU, step-time
estimates and the report.

The executor builds a :class:`StepSpec` after tracing a model and asks
:func:`simulate` for a :class:`SimulationReport`; ``memoryCheck`` decides
what an out-of-memory estimate does (:func:`check_memory`). Users get the
report from ``poptorch_model.simulationReport()``.

Example::

    >>> from poptorch_core.device import chip_model
    >>> chip_model(21).name
    'Bow IPU'
"""
from ._oom import check_memory
from ._simulate import simulate
from ._spec import ParamSpec, StepSpec
from .chips import CHIPS, ChipModel, chip_model
from .memory import CATEGORIES, Consumer, IpuMemory
from .report import SimulationReport
from .timing import StageTime

__all__ = ["SimulationReport", "ChipModel", "CHIPS", "chip_model",
           "IpuMemory", "Consumer", "CATEGORIES", "StageTime", "StepSpec",
           "ParamSpec", "simulate", "check_memory"]
