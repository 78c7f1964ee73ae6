"""Helpers shared by the op tests."""
import pytest
from torch.fx.experimental.proxy_tensor import make_fx

import poptorch_core as poptorch
from poptorch_core import _impl


def trace_ipu(fn, *args, training=False):
    """Captures ``fn`` as the simulated IPU would (real-mode make_fx)."""
    with _impl.ipu_tracing(training=training):
        return make_fx(fn, tracing_mode="real")(*args)


def targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def check_error(match, fn, *args, **kwargs):
    with pytest.raises(poptorch.Error, match=match):
        fn(*args, **kwargs)
