"""The simulated IPU executor: ``trainingModel``, ``inferenceModel``,
``PoplarExecutor`` and ``load``.

A call flows ``ArgsBinder`` (``arguments``) -> ``Program.run`` (``program``:
batching from ``micro_batches``, the graph run by a backend from ``backends/``,
the training step) -> outputs per output mode. ``compile`` builds the
``Program``; ``state`` holds what one wrapper knows; ``host_sync``,
``optimizer_link``, ``anchors`` and ``serialization`` keep the host side
in step with the device.
"""
from .poplar_executor import PoplarExecutor
from .wrappers import inferenceModel, load, trainingModel
from .backends import compilation_count

__all__ = ["PoplarExecutor", "trainingModel", "inferenceModel", "load"]
