"""The PyG op substitutions: active exactly while PopTorch traces a model,
restored afterwards (also when tracing fails), and what they make work."""
import sys
import types

import pytest
import torch
import torch_geometric
import torch_geometric.nn as pyg_nn
import torch_geometric.utils as pyg_utils
from torch_geometric.experimental import is_experimental_mode_enabled
from torch_geometric.nn import knn_graph

import poptorch
import poptorch_core
from poptorch_geometric import ops, set_aggregation_dim_size
from poptorch_geometric.override import _TorchGeometricOpsSubstitutionManager

from ._brute_force import knn_pairs


def _state():
    """What the manager swaps: a sample of functions, bindings, methods
    and flags."""
    conv_module = sys.modules[pyg_nn.GCNConv.__module__]
    norm_module = sys.modules["torch_geometric.nn.conv.gcn_conv"]
    return {
        "remove_self_loops": pyg_utils.remove_self_loops,
        "gcn binding": conv_module.add_remaining_self_loops,
        "gcn_norm binding": norm_module.add_remaining_self_loops,
        "knn_graph here": knn_graph,
        "pool.knn": torch_geometric.nn.pool.knn,
        "ClusterGCNConv.forward": pyg_nn.ClusterGCNConv.forward,
        "assert_sorted_index":
            pyg_nn.aggr.Aggregation.assert_sorted_index,
        "dynamic shapes disabled":
            is_experimental_mode_enabled("disable_dynamic_shapes"),
        "WITH_TORCH_SCATTER": torch_geometric.typing.WITH_TORCH_SCATTER,
        "use_segment_matmul": torch_geometric.backend.use_segment_matmul,
    }


SEEN = []


class Recorder(torch.nn.Module):
    """Records the substitution state while traced (in SEEN: PopTorch runs
    a copy of the model), then fails if told."""

    def __init__(self, fail=False):
        super().__init__()
        self.fail = fail
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        SEEN.append(_state())
        if self.fail:
            raise RuntimeError("forward failed")
        return x * self.scale


def test_registered_with_the_core_at_import():
    assert _TorchGeometricOpsSubstitutionManager in \
        poptorch_core._OverwriteContextManager._subsitution_manager_types


def test_active_while_traced_and_restored_after():
    before = _state()
    SEEN.clear()
    poptorch.inferenceModel(Recorder())(torch.ones(2))
    seen = SEEN[-1]
    for key, value in seen.items():
        if isinstance(value, bool) or value is None:
            continue
        assert value is not before[key], key
    assert seen["dynamic shapes disabled"] is True
    assert seen["WITH_TORCH_SCATTER"] is False
    assert seen["use_segment_matmul"] is False
    assert _state() == before
    # Eager calls outside tracing are PyG's own.
    assert pyg_utils.to_dense_batch(torch.ones(2, 1),
                                    torch.tensor([0, 1]))[0].shape == (2, 1, 1)


def test_restored_when_tracing_fails():
    before = _state()
    with pytest.raises(Exception, match="forward failed"):
        poptorch.trainingModel(Recorder(fail=True))(torch.ones(2))
    assert _state() == before


def test_restore_puts_back_the_previous_dynamic_shape_setting():
    torch_geometric.experimental.set_experimental_mode(
        True, "disable_dynamic_shapes")
    try:
        with _TorchGeometricOpsSubstitutionManager():
            pass
        assert is_experimental_mode_enabled("disable_dynamic_shapes")
    finally:
        torch_geometric.experimental.set_experimental_mode(
            False, "disable_dynamic_shapes")


def test_nested_managers_restore_in_order():
    before = _state()
    with _TorchGeometricOpsSubstitutionManager():
        with _TorchGeometricOpsSubstitutionManager():
            pass
        assert pyg_utils.remove_self_loops is not before["remove_self_loops"]
    assert _state() == before


class DenseModel(torch.nn.Module):
    def forward(self, x, batch):
        return pyg_utils.to_dense_batch(x, batch)[0]


def test_to_dense_batch_without_sizes_raises_pygs_text_while_traced():
    with pytest.raises(ValueError, match="^Dynamic shapes disabled. Argument "
                       "'batch_size' needs to be set$"):
        poptorch.inferenceModel(DenseModel())(torch.ones(4, 2),
                                              torch.tensor([0, 0, 1, 1]))


class ScatterWithoutSize(torch.nn.Module):
    def forward(self, x, index):
        return pyg_utils.scatter(x, index, 0)  # SIZE READ HERE


def test_a_size_read_from_values_is_the_core_error_at_the_users_line():
    """The override leaves such reads to the core's rule, which names the
    line that made the call."""
    with pytest.raises(poptorch.Error, match=r"int\(tensor\)") as info:
        poptorch.inferenceModel(ScatterWithoutSize())(
            torch.ones(3, 2), torch.tensor([0, 1, 1]))
    assert "# SIZE READ HERE" in info.value.message


class KnnModel(torch.nn.Module):
    """Builds its graph with PyG's knn_graph (bound in this module) and
    torch_geometric.nn.knn_graph inside forward."""

    def forward(self, pos, batch):
        a = knn_graph(pos, 2, batch, loop=True)
        b = torch_geometric.nn.knn_graph(pos, 2, batch, loop=False)
        return a, b


def test_pyg_knn_graph_traces_with_the_fixed_shape_version():
    gen = torch.Generator().manual_seed(0)
    pos = torch.randint(-3, 3, (7, 2), generator=gen).float()
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    # Eagerly, PyG's own result (the pure-Python backends: no empty slots;
    # graph 2 has one node, so it gets its only neighbour, itself).
    eager = knn_graph(pos, 2, batch, loop=True)
    rows, cols = knn_pairs(pos, pos, 2, batch, batch)
    assert eager.tolist() == [[c for c in cols if c >= 0],
                              [r for r in rows if r >= 0]]
    a, b = poptorch.inferenceModel(KnnModel())(pos, batch)
    for out, exclude_self in ((a, False), (b, True)):
        expected = torch.tensor(knn_pairs(pos, pos, 2, batch, batch,
                                          exclude_self=exclude_self))
        assert torch.equal(out.long(), expected.flip([0]))


def test_set_aggregation_dim_size_sets_the_output_rows():
    conv = pyg_nn.GraphConv(3, 2)
    x, edge_index = torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])
    expected = conv(x, edge_index)
    set_aggregation_dim_size(conv, 6)
    set_aggregation_dim_size(conv, 6)   # hooks stack
    assert len(conv._aggregate_forward_pre_hooks) == 2
    # The aggregated rows are padded to 6; lin_root adds x's 4 rows, so
    # compare the aggregation itself.
    aggregated = conv.propagate(edge_index, x=(x, x), edge_weight=None,
                                size=None)
    assert aggregated.shape == (6, 3)
    torch.testing.assert_close(conv.lin_rel(aggregated[:4]) +
                               conv.lin_root(x), expected)


# --- torch_scatter -----------------------------------------------------------

def _fake_torch_scatter():
    """A stand-in for the compiled package: its functions cannot run while
    traced, so the test fails unless the override replaces them."""
    module = types.ModuleType("torch_scatter")

    def compiled(*args, **kwargs):
        raise AssertionError("the compiled torch_scatter kernel was called")
    for name in ops.torch_scatter.__all__:
        fn = compiled.__class__(compiled.__code__, compiled.__globals__,
                                name, None, compiled.__closure__)
        setattr(module, name, fn)
    return module


class ScatterModel(torch.nn.Module):
    def forward(self, src, index):
        import torch_scatter
        best, arg = torch_scatter.scatter_max(src, index, dim=0, dim_size=4)
        return best, arg, torch_scatter.scatter_mean(src, index, 0,
                                                     dim_size=4)


def test_torch_scatter_functions_are_replaced_while_traced(monkeypatch):
    fake = _fake_torch_scatter()
    monkeypatch.setitem(sys.modules, "torch_scatter", fake)
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SCATTER", True)
    originals = dict(vars(fake))
    src = torch.tensor([[1., 4.], [3., 2.], [0., 5.]])
    index = torch.tensor([0, 0, 2])
    best, arg, mean = poptorch.inferenceModel(ScatterModel())(src, index)
    assert best.tolist() == [[3., 4.], [0., 0.], [0., 5.], [0., 0.]]
    assert arg.tolist() == [[1, 0], [3, 3], [2, 2], [3, 3]]
    torch.testing.assert_close(mean, torch.tensor(
        [[2., 3.], [0., 0.], [0., 5.], [0., 0.]]))
    assert dict(vars(fake)) == originals
    assert torch_geometric.typing.WITH_TORCH_SCATTER is True


def test_real_torch_scatter_traces_and_equals_eager():
    torch_scatter = pytest.importorskip(
        "torch_scatter",
        reason="torch_scatter (the optional [scatter] extra) is not "
               "installed")
    src = torch.randn(6, 3)
    index = torch.tensor([0, 0, 2, 2, 2, 3])
    best, arg, mean = poptorch.inferenceModel(ScatterModel())(src, index)
    ref_best, ref_arg = torch_scatter.scatter_max(src, index, 0, dim_size=4)
    torch.testing.assert_close(best, ref_best)
    assert torch.equal(arg.long(), ref_arg)
    torch.testing.assert_close(
        mean, torch_scatter.scatter_mean(src, index, 0, dim_size=4))
