"""The examples in module docstrings run and print what they say.

Examples are written for users, who have ``import torch`` and
``import poptorch`` at the top of their script: both names are given to
every example. Every module listed here has runnable examples; a module
whose examples are sketches (``model``, ``opts``, ``dataset`` defined
elsewhere) is not listed yet. Add a module once its examples run.
``executor._host_memory`` is left out on purpose: its example changes
``malloc`` for the whole process (its own test runs a subprocess).
"""
import doctest
import importlib

import pytest
import torch

import poptorch

MODULES = [
    "poptorch_core._files",
    "poptorch_core._impl",
    "poptorch_core.executor._ipu_count",
    "poptorch_core._logging",
    "poptorch_core.options._dict",
    "poptorch_core.options._progress",
    "poptorch_core.data._batching",
    "poptorch_core.data._layout",
    "poptorch_core.data._partition",
    "poptorch_core.errors",
    "poptorch_core.executor._executor",
    "poptorch_core.executor._wrappers",
    "poptorch_core.executor.backends._aliasing",
    "poptorch_core.executor.backends._cpu_inductor",
    "poptorch_core.executor.backends._wide_inputs",
    "poptorch_core.ops._registration",
    "poptorch_core.ops._tensor_format",
    "poptorch_core.ops.cluster",
    "poptorch_core.ops.control_flow",
    "poptorch_core.ops.ctc",
    "poptorch_core.ops.hints",
    "poptorch_core.ops.host",
    "poptorch_core.ops.losses",
    "poptorch_core.ops.printing",
    "poptorch_core.ops.slicing",
    "poptorch_core.optim._algorithms",
    "poptorch_core.optim._packed",
    "poptorch_core.ir._binding",
    "poptorch_geometric._padding.budget",
    "poptorch_geometric._padding.classify",
    "poptorch_geometric._padding.columns",
    "poptorch_geometric._fastpath.graph_cache",
    "poptorch_geometric._packing",
    "poptorch_geometric._padding.plan",
    "poptorch_geometric._padding.sizes",
    "poptorch_geometric._fastpath.storage",
    "poptorch_geometric._padding.trim",
    "poptorch_geometric.collate",
    "poptorch_geometric.common",
    "poptorch_geometric.dataloader",
    "poptorch_geometric.datasets.synthetic",
    "poptorch_geometric.efficiency",
    "poptorch_geometric.fixed_size_options",
    "poptorch_geometric.masker",
    "poptorch_geometric.pyg_collate",
    "poptorch_geometric.pyg_dataloader",
    "poptorch_geometric.stream_packing_sampler",
    "poptorch_geometric.types",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name),
                             extraglobs={"torch": torch, "poptorch": poptorch},
                             optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples any more"
    assert result.failed == 0, f"{result.failed} example(s) of {name} fail"
