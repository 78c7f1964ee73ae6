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
from torch_geometric.data import Batch, Data
from torch_geometric.utils import to_dense_batch as pyg_to_dense_batch

import poptorch
from poptorch_geometric import (FixedSizeCollater, FixedSizeOptions,
                                OverSizeStrategy, ops)
from poptorch_geometric.pyg_dataloader import FixedSizeDataLoader

from ._graphs import graph

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
        # The module attribute: the name the override substitutes.
        return torch_geometric.utils.to_dense_batch(x, batch,
                                                    max_num_nodes=2)[0]


def test_to_dense_batch_in_a_traced_model_raises_pygs_text():
    with pytest.raises(ValueError) as raised:
        poptorch.inferenceModel(_Dense())(torch.ones(3, 2),
                                          torch.tensor([0, 0, 1]))
    assert str(raised.value) == _pyg_text(max_num_nodes=2)


# -- trimming leaves room for the padding graph ------------------------------

def _kept_nodes(original: Data, batch: Batch, num_real: int) -> torch.Tensor:
    """The original nodes whose features the batch's real rows hold, in
    order (the features are distinct random rows)."""
    same = (batch.x[:num_real, None, :] == original.x[None]).all(-1)
    assert bool((same.sum(1) == 1).all())
    return same.float().argmax(1)


@pytest.mark.parametrize("strategy", ["trim_edges", "trim_nodes"])
def test_trimming_makes_room_for_padding_edges(strategy, poptorch_log):
    """Real nodes that fill the node budget exactly while edges need
    padding: with any trimming on, one real node goes so that the padding
    graph has a node to hold the padding edges; the real part is PyG's
    subgraph of the nodes kept."""
    molecule = graph(10, 12, seed=3)
    opts = FixedSizeOptions(num_nodes=10, num_edges=20, num_graphs=2)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 **{strategy: True})
    batch = collater([molecule])
    num_real = int(batch.nodes_mask.sum())
    assert num_real == 9 and batch.x.shape[0] == 10
    assert bool((batch.edge_index < 10).all())
    kept = _kept_nodes(molecule, batch, num_real)
    mask = torch.zeros(10, dtype=torch.bool)
    mask[kept] = True
    assert torch.equal(kept, kept.sort().values)
    expected = molecule.subgraph(mask)
    real_edges = int(batch.edges_mask.sum())
    assert torch.equal(batch.edge_index[:, :real_edges], expected.edge_index)
    assert torch.equal(batch.edge_attr[:real_edges], expected.edge_attr)
    assert bool((batch.edge_index[:, real_edges:] == 9).all())
    assert (collater.trimmed.graphs, collater.trimmed.nodes,
            collater.trimmed.edges) == (1, 1, 12 - real_edges)
    assert f"trimmed 1 node(s) and {12 - real_edges} edge(s)" in \
        poptorch_log.text


def test_trimming_edges_only_still_refuses_when_no_node_can_go():
    """One node per graph and no node slot left: trimming cannot free a
    node without emptying a graph, and the error says so."""
    with pytest.raises(RuntimeError) as raised:
        FixedSizeCollater(FixedSizeOptions(2, 4, 3), trim_edges=True)(
            [graph(1, 1), graph(1, 1)])
    assert str(raised.value).endswith(
        "(trimming cannot free one: every graph keeps at least one node).")
    assert "Cannot pad 2 edges" in str(raised.value)


def test_trim_edges_loader_batches_a_graph_that_fills_the_node_budget():
    """Upstream's valid arguments: a loader with OverSizeStrategy.TrimEdges
    whose node budget one graph fills exactly batches it instead of
    refusing."""
    molecule = graph(10, 12, seed=4)
    loader = FixedSizeDataLoader(
        [molecule, molecule], batch_size=2,
        fixed_size_options=FixedSizeOptions(10, 20, 2),
        over_size_strategy=OverSizeStrategy.TrimEdges)
    batches = list(loader)
    assert len(batches) == 2
    for batch in batches:
        assert batch.x.shape[0] == 10 and batch.edge_index.shape[1] == 20
        assert bool((batch.edge_index < 10).all())
        assert int(batch.nodes_mask.sum()) == 9
