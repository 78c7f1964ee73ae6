"""The fixed-shape layers and utilities of poptorch_geometric.ops equal
PyG's eager results (PyG's own forward on the same layer object, or a
brute-force loop), and keep every shape fixed."""
import copy

import pytest
import torch

import poptorch
import torch_geometric.nn as pyg_nn
import torch_geometric.utils as pyg_utils
from torch_geometric.nn import aggr

from poptorch_geometric import ops
from poptorch_geometric.override import _TorchGeometricOpsSubstitutionManager


def _graph(seed=0, num_nodes=7, num_edges=16, loops=(1, 4)):
    """Random edges without self-loops, then loops on the nodes ``loops``."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges, ), generator=gen)
    dst = (src + torch.randint(1, num_nodes, (num_edges, ),
                               generator=gen)) % num_nodes
    loop = torch.tensor(loops, dtype=torch.long)
    edge_index = torch.cat([torch.stack([src, dst]), loop.expand(2, -1)], 1)
    x = torch.randn(num_nodes, 6, generator=gen)
    weight = torch.rand(edge_index.size(1), generator=gen) + 0.5
    edge_type = torch.randint(0, 3, (edge_index.size(1), ), generator=gen)
    return x, edge_index, weight, edge_type


def test_instance_norm_equals_pyg_including_running_stats():
    x, _, _, _ = _graph()
    batch = torch.tensor([0, 0, 0, 2, 2, 2, 2])   # graph 1 is empty
    ours = ops.InstanceNorm(6, affine=True, track_running_stats=True)
    ref = copy.deepcopy(ours)
    out = ops.InstanceNorm.forward(ours, x, batch, batch_size=3)
    expected = pyg_nn.InstanceNorm.forward(ref, x, batch, batch_size=3)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(ours.running_mean, ref.running_mean)
    torch.testing.assert_close(ours.running_var, ref.running_var)
    ours.eval(), ref.eval()
    torch.testing.assert_close(ours(x, batch, batch_size=3),
                               ref.__class__.__base__.forward(
                                   ref, x, batch, batch_size=3))


def test_instance_norm_reads_batch_size_from_the_batch_eagerly_only():
    norm = pyg_nn.InstanceNorm(2)
    x, batch = torch.randn(5, 2), torch.tensor([0, 0, 1, 1, 1])
    torch.testing.assert_close(ops.InstanceNorm.forward(norm, x, batch),
                               norm(x, batch))

    class Model(torch.nn.Module):
        def forward(self, x, batch):
            return norm(x, batch)   # no batch_size
    with pytest.raises(poptorch.Error, match=r"int\(tensor\)"):
        poptorch.inferenceModel(Model())(x, batch)


def test_hetero_linear_equals_a_row_by_row_loop():
    lin = pyg_nn.HeteroLinear(6, 3, num_types=3)
    x, types = torch.randn(9, 6), torch.tensor([2, 0, 1, 1, 0, 2, 2, 0, 1])
    expected = torch.stack([x[i] @ lin.weight[t] + lin.bias[t]
                            for i, t in enumerate(types.tolist())])
    torch.testing.assert_close(ops.HeteroLinear.forward(lin, x, types),
                               expected)


@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
def test_mf_conv_equals_pyg(flow):
    x, edge_index, _, _ = _graph()
    conv = pyg_nn.MFConv(6, 4, max_degree=3, flow=flow)
    torch.testing.assert_close(ops.MFConv.forward(conv, x, edge_index),
                               conv(x, edge_index))


@pytest.mark.parametrize("diag_lambda", [0.0, 0.7])
def test_cluster_gcn_conv_equals_pyg_on_looped_nodes_too(diag_lambda):
    x, edge_index, _, _ = _graph()
    conv = pyg_nn.ClusterGCNConv(6, 4, diag_lambda=diag_lambda)
    torch.testing.assert_close(
        ops.ClusterGCNConv.forward(conv, x, edge_index),
        conv(x, edge_index))


@pytest.mark.parametrize("normalization", [None, "sym", "rw"])
def test_cheb_conv_under_the_override_equals_pyg(normalization):
    x, edge_index, weight, _ = _graph()
    conv = pyg_nn.ChebConv(6, 4, K=3, normalization=normalization)
    expected = conv(x, edge_index, weight, lambda_max=2.0)
    with _TorchGeometricOpsSubstitutionManager():
        out = conv(x, edge_index, weight, lambda_max=2.0)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("kwargs", [dict(aggr="mean"), dict(aggr="add"),
                                    dict(aggr="max"), dict(num_bases=2),
                                    dict(num_blocks=2)])
def test_rgcn_conv_equals_pyg(kwargs):
    x, edge_index, _, edge_type = _graph()
    conv = pyg_nn.RGCNConv(6, 4, num_relations=3, **kwargs)
    torch.testing.assert_close(
        ops.RGCNConv.forward(conv, x, edge_index, edge_type),
        conv(x, edge_index, edge_type))


@pytest.mark.parametrize("aggr_name", ["mean", "add", "max"])
def test_film_conv_equals_pyg(aggr_name):
    x, edge_index, _, edge_type = _graph()
    conv = pyg_nn.FiLMConv(6, 4, num_relations=3, aggr=aggr_name)
    torch.testing.assert_close(
        ops.FiLMConv.forward(conv, x, edge_index, edge_type),
        conv(x, edge_index, edge_type))


def test_gps_conv_equals_pyg():
    x, edge_index, _, _ = _graph()
    batch = torch.tensor([0, 0, 0, 1, 1, 3, 3])
    conv = pyg_nn.GPSConv(6, pyg_nn.GINConv(torch.nn.Linear(6, 6)), heads=2)
    conv.eval()   # the batch norms use their running statistics
    torch.testing.assert_close(
        ops.GPSConv.forward(conv, x, edge_index, batch),
        conv(x, edge_index, batch))


def test_mesh_cnn_conv_equals_pyg():
    conv = pyg_nn.MeshCNNConv(6, 4)
    x = torch.randn(5, 6)
    own = torch.arange(5).repeat_interleave(4)
    edge_index = torch.stack([own, (own + torch.arange(1, 5).repeat(5)) % 5])
    expected = conv(x, edge_index)
    with _TorchGeometricOpsSubstitutionManager():
        out = conv(x, edge_index)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("layer", [
    aggr.MedianAggregation(),
    aggr.QuantileAggregation([0.1, 0.5, 0.9]),
    aggr.QuantileAggregation(0.3, interpolation="midpoint"),
    aggr.QuantileAggregation(0.7, interpolation="nearest", fill_value=-1.0),
])
def test_quantile_aggregation_equals_pyg(layer):
    x = torch.randn(9, 3)
    index = torch.tensor([0, 0, 0, 0, 2, 2, 3, 3, 3])  # group 1 and 4 empty
    torch.testing.assert_close(
        ops.QuantileAggregation.forward(layer, x, index, dim_size=5),
        layer(x, index, dim_size=5))


def test_remove_self_loops_empties_loops_where_pyg_drops_them():
    _, edge_index, weight, _ = _graph()
    is_loop = edge_index[0] == edge_index[1]
    ei, w = ops.remove_self_loops(edge_index, weight)
    ref_ei, ref_w = pyg_utils.remove_self_loops(edge_index, weight)
    assert ei.shape == edge_index.shape
    assert torch.equal(w[~is_loop], ref_w) and torch.equal(ei[:, ~is_loop],
                                                           ref_ei)
    assert torch.all(ei[:, is_loop] == -1) and not w[is_loop].any()


@pytest.mark.parametrize("fill_value", [None, 2.0, "mean"])
def test_add_remaining_self_loops_keeps_pyg_edges_and_weights(fill_value):
    _, edge_index, weight, _ = _graph()
    ei, w = ops.add_remaining_self_loops(edge_index, weight, fill_value, 7)
    ref_ei, ref_w = pyg_utils.add_remaining_self_loops(
        edge_index, weight, fill_value, num_nodes=7)
    is_loop = edge_index[0] == edge_index[1]
    keep = torch.cat([~is_loop, torch.ones(7, dtype=torch.bool)])
    assert ei.shape == (2, edge_index.size(1) + 7)
    assert torch.equal(ei[:, keep], ref_ei)
    torch.testing.assert_close(w[keep], ref_w)
    assert torch.all(ei[:, :edge_index.size(1)][:, is_loop] == -1)
    assert not w[:edge_index.size(1)][is_loop].any()
    # So a weighted sum per node is PyG's exactly.
    torch.testing.assert_close(ops.empty_slots.scatter(w, ei[1], 0, 7),
                               pyg_utils.scatter(ref_w, ref_ei[1], 0, 7))


@pytest.mark.parametrize("sizes, missing", [
    ({}, "batch_size"), ({"max_num_nodes": 3}, "batch_size"),
    ({"batch_size": 2}, "max_num_nodes")])
def test_to_dense_batch_without_a_size_raises_pygs_text(sizes, missing):
    """The text of PyG's ``disable_dynamic_shapes``, which upstream
    PopTorch Geometric raises, ``batch_size`` checked first."""
    with pytest.raises(ValueError) as raised:
        ops.to_dense_batch(torch.ones(2, 1), torch.tensor([0, 1]), **sizes)
    assert str(raised.value) == \
        f"Dynamic shapes disabled. Argument '{missing}' needs to be set"


def test_to_dense_batch_with_sizes_equals_pyg():
    src = torch.randn(5, 2)
    dense, mask = ops.to_dense_batch(src, torch.tensor([0, 0, 1, 1, 1]),
                                     batch_size=3, max_num_nodes=4)
    ref, ref_mask = pyg_utils.to_dense_batch(
        src, torch.tensor([0, 0, 1, 1, 1]), batch_size=3, max_num_nodes=4)
    assert torch.equal(dense, ref) and torch.equal(mask, ref_mask)


def test_gcn_under_the_override_equals_pyg_on_looped_nodes_too():
    x, edge_index, weight, _ = _graph()
    conv = pyg_nn.GCNConv(6, 4)
    expected = conv(x, edge_index, weight)
    with _TorchGeometricOpsSubstitutionManager():
        out = conv(x, edge_index, weight)
    torch.testing.assert_close(out, expected)


def test_gat_under_the_override_equals_pyg_on_looped_nodes_too():
    x, edge_index, _, _ = _graph(loops=(1, 4))
    conv = pyg_nn.GATConv(6, 4, heads=2)
    expected = conv(x, edge_index)
    with _TorchGeometricOpsSubstitutionManager():
        out = conv(x, edge_index)
    torch.testing.assert_close(out, expected)
