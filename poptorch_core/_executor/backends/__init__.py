"""How a captured graph runs on the host: the ``interpret`` and ``compile``
backends (``executable``), the graph passes that prepare a graph for them
(``passes/``) and the ``compile`` backend's tuning of inductor on the CPU
(``inductor/``); ``host_memory`` keeps freed host memory for the next step.
"""
from .executable import (BACKENDS, Executable, compilation_count,
                         prepare_backend)

__all__ = ["BACKENDS", "Executable", "compilation_count", "prepare_backend"]
