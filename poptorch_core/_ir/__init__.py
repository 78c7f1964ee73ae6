"""The PopXL-style intermediate representation of a compiled model.

``Ir`` owns a main graph (the captured model) and subgraphs built with
``Ir.create_graph``; ``traceModel`` captures a model into one. The capture
itself is the job of :mod:`poptorch_core._tracing`; this package only holds
and describes its result.
"""
from .ir import *  # noqa: F401,F403
from .trace_model import *  # noqa: F401,F403
from . import ir, trace_model

__all__ = ir.__all__ + trace_model.__all__
