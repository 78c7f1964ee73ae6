"""Dispatch tracing: capture a model into an ATen-level ``torch.fx`` graph,
check it against IPU rules, and hold it in a PopXL-style :class:`Ir`."""
from .ir import *  # noqa: F401,F403
from ._trace_model import *  # noqa: F401,F403
