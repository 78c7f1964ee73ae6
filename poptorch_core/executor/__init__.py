"""The simulated IPU executor: ``trainingModel``, ``inferenceModel``,
``PoplarExecutor`` and ``load``.

A call flows ``ArgsBinder`` (``_args``) -> ``Program.run`` (``_program``:
batching from ``_batching``, the graph run by a backend from ``backends/``,
the training step) -> outputs per output mode. ``_compile`` builds the
``Program``; ``_state`` holds what one wrapper knows; ``_host_sync``,
``_optimizer_link``, ``_anchors`` and ``_serialization`` keep the host side
in step with the device.
"""
from ._executor import PoplarExecutor
from ._wrappers import inferenceModel, load, trainingModel
from .backends import compilation_count

__all__ = ["PoplarExecutor", "trainingModel", "inferenceModel", "load"]
