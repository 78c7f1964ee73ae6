"""Upstream PopTorch Geometric's module paths and texts: each op of
``poptorch_geometric.ops`` named by upstream is a module holding the
function of the same name, the package keeps exporting the functions, and
``to_dense_batch`` without a size raises the text of PyG's own
``disable_dynamic_shapes`` check."""
import importlib
import subprocess
import sys

import pytest
import torch
import torch_geometric
from torch_geometric.utils import to_dense_batch as pyg_to_dense_batch

import poptorch
from poptorch_geometric import ops

#: Upstream's layout: ``poptorch_geometric/ops/<name>.py`` defines <name>.
UPSTREAM_MODULES = ("knn", "knn_graph", "knn_interpolate", "radius",
                    "nearest", "to_dense_batch")


@pytest.mark.parametrize("name", UPSTREAM_MODULES)
def test_each_upstream_op_is_a_module_holding_its_function(name):
    module = importlib.import_module(f"poptorch_geometric.ops.{name}")
    function = getattr(module, name)
    assert callable(function) and function.__module__ == module.__name__
    # The package attribute stays the function, not the submodule that
    # importing it would otherwise leave there.
    assert getattr(ops, name) is function


def test_upstream_imports_in_a_fresh_interpreter():
    """Submodule imports in any order leave ``ops.<name>`` the function."""
    code = "\n".join(
        [f"import poptorch_geometric.ops.{name}" for name in
         reversed(UPSTREAM_MODULES)] +
        [f"from poptorch_geometric.ops.{name} import {name}" for name in
         UPSTREAM_MODULES] +
        ["import inspect, poptorch_geometric.ops as ops",
         f"bad = [n for n in {UPSTREAM_MODULES!r} "
         "if not inspect.isfunction(getattr(ops, n))]",
         "assert not bad, bad"])
    subprocess.run([sys.executable, "-c", code], check=True)


def _pyg_text(**sizes) -> str:
    """What PyG's own to_dense_batch raises with dynamic shapes off."""
    with torch_geometric.experimental_mode("disable_dynamic_shapes"):
        with pytest.raises(ValueError) as raised:
            pyg_to_dense_batch(torch.ones(3, 2), torch.tensor([0, 0, 1]),
                               **sizes)
    return str(raised.value)


@pytest.mark.parametrize("sizes", [{}, {"max_num_nodes": 2},
                                   {"batch_size": 2}])
def test_to_dense_batch_without_a_size_raises_pygs_text(sizes):
    expected = _pyg_text(**sizes)
    assert expected.startswith("Dynamic shapes disabled. Argument '")
    with pytest.raises(ValueError) as raised:
        ops.to_dense_batch(torch.ones(3, 2), torch.tensor([0, 0, 1]),
                           **sizes)
    assert str(raised.value) == expected


class _Dense(torch.nn.Module):
    def forward(self, x, batch):
        return pyg_to_dense_batch(x, batch, max_num_nodes=2)[0]


def test_to_dense_batch_in_a_traced_model_raises_pygs_text():
    with pytest.raises(ValueError) as raised:
        poptorch.inferenceModel(_Dense())(torch.ones(3, 2),
                                          torch.tensor([0, 0, 1]))
    assert str(raised.value) == _pyg_text(max_num_nodes=2)
