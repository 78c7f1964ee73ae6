"""PyG's own functions and classes that need pyg-lib or torch-sparse, run
on the pure-Python backends (installed at import), against independent
references: brute-force neighbour searches (``_brute_force.py``), plain
PyTorch formulas of the layers, the B-spline recursion of the SplineCNN
paper, METIS called directly, and neighbour sampling replayed hop by hop
in plain Python."""
import math
from collections import defaultdict
from itertools import product

import numpy as np
import pymetis
import pytest
import torch
import torch_geometric
import torch_geometric.nn as pyg_nn
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import ClusterData, ClusterLoader, NeighborLoader

import poptorch_core as poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric import pure_backends
from poptorch_geometric._coverage.data import make_families
from poptorch_geometric._coverage.probe import run_case
from poptorch_geometric._coverage.table import all_rows
from poptorch_geometric._pure.spline import spline_basis, spline_weighting

from ._brute_force import interpolate, knn_pairs, radius_pairs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@st.composite
def point_batches(draw, max_points=12):
    """Integer points (exact distances, many ties) with a sorted batch
    vector whose ids may skip values."""
    n = draw(st.integers(1, max_points))
    coords = draw(st.lists(st.integers(-3, 3), min_size=2 * n,
                           max_size=2 * n))
    ids = sorted(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    return (torch.tensor(coords, dtype=torch.float).view(n, 2),
            torch.tensor(ids, dtype=torch.long))


def _found(rows, cols):
    """The brute force's pairs without its empty (-1) slots."""
    return [[r for r in rows if r >= 0], [c for c in cols if c >= 0]]


# --- knn, radius, nearest, knn_interpolate ------------------------------

@settings(max_examples=40, deadline=None)
@given(point_batches(), point_batches(), st.integers(1, 4), st.booleans())
def test_pyg_knn_equals_brute_force(points_x, points_y, k, cosine):
    (x, bx), (y, by) = points_x, points_y
    if cosine:  # the cosine distance of a zero vector is undefined
        x, y = x + 10, y + 10
    out = pyg_nn.knn(x, y, k, bx, by, cosine=cosine)
    expected = _found(*knn_pairs(x, y, k, bx, by, cosine=cosine))
    if not cosine:
        assert out.tolist() == expected
        return
    # Cosines of parallel points tie only up to rounding: compare each
    # pair's distance instead of the point chosen.
    def cos_distance(i, j):
        return 1 - float(torch.nn.functional.cosine_similarity(
            y[i], x[j], dim=0))
    assert out[0].tolist() == expected[0]
    for i, j, ref in zip(out[0].tolist(), out[1].tolist(), expected[1]):
        assert cos_distance(i, j) == pytest.approx(cos_distance(i, ref),
                                                   abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(point_batches(), st.integers(1, 4), st.booleans(),
       st.sampled_from(["source_to_target", "target_to_source"]))
def test_pyg_knn_graph_equals_brute_force(points, k, loop, flow):
    x, batch = points
    out = pyg_nn.knn_graph(x, k, batch, loop=loop, flow=flow)
    # PyG's rule without loops: k + 1 nearest, then the node itself out.
    rows, cols = _found(*knn_pairs(x, x, k if loop else k + 1, batch, batch))
    pairs = [(r, c) for r, c in zip(rows, cols) if loop or r != c]
    if flow == "source_to_target":
        pairs = [(c, r) for r, c in pairs]
    assert out.tolist() == [[a for a, _ in pairs], [b for _, b in pairs]]


@settings(max_examples=40, deadline=None)
@given(point_batches(), point_batches(), st.sampled_from([0.5, 1.5, 2.5]),
       st.integers(1, 5))
def test_pyg_radius_equals_brute_force(points_x, points_y, r, limit):
    (x, bx), (y, by) = points_x, points_y
    out = pyg_nn.radius(x, y, r, bx, by, max_num_neighbors=limit)
    assert out.tolist() == _found(*radius_pairs(x, y, r, bx, by, limit))


@settings(max_examples=40, deadline=None)
@given(point_batches(), st.sampled_from([0.5, 1.5, 2.5]), st.integers(1, 5),
       st.booleans())
def test_pyg_radius_graph_equals_brute_force(points, r, limit, loop):
    x, batch = points
    out = pyg_nn.radius_graph(x, r, batch, loop=loop,
                              max_num_neighbors=limit)
    rows, cols = _found(*radius_pairs(x, x, r, batch, batch, limit,
                                      exclude_self=not loop))
    assert out.tolist() == [cols, rows]


def test_large_examples_equal_brute_force(monkeypatch):
    """Rows longer than a whole sort takes (the k smallest first, ties
    still to the lower index), one example's queries in several blocks,
    and small examples grouped."""
    from poptorch_geometric._pure import neighbours
    monkeypatch.setattr(neighbours, "_GROUP_ENTRIES", 5000)
    monkeypatch.setattr(neighbours, "_BLOCK_ENTRIES", 20000)
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(-4, 5, (400, 2), generator=gen).float()   # many ties
    batch = torch.tensor([0] * 300 + [1] * 10 + [2] * 10 + [3] * 80)
    out = pyg_nn.knn_graph(x, 4, batch, loop=True, flow="target_to_source")
    assert out.tolist() == _found(*knn_pairs(x, x, 4, batch, batch))
    out = pyg_nn.radius_graph(x, 1.5, batch, max_num_neighbors=3,
                              flow="target_to_source")
    assert out.tolist() == _found(*radius_pairs(x, x, 1.5, batch, batch, 3,
                                                exclude_self=True))


def test_pyg_nearest_equals_brute_force():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (15, 2), generator=gen).float()
    y = torch.randint(-3, 4, (6, 2), generator=gen).float()
    bx = torch.tensor([0] * 8 + [1] * 7)
    by = torch.tensor([0, 0, 0, 1, 1, 1])
    expected = [knn_pairs(y, x, 1, by, bx)[1][i] for i in range(15)]
    assert pyg_nn.nearest(x, y, bx, by).tolist() == expected


def test_pyg_knn_interpolate_equals_brute_force():
    gen = torch.Generator().manual_seed(1)
    pos_x = torch.randn(9, 3, generator=gen)
    pos_y = torch.randn(5, 3, generator=gen)
    features = torch.randn(9, 4, generator=gen)
    bx = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1])  # example 0: 2 < k points
    by = torch.tensor([0, 0, 1, 1, 1])
    out = pyg_nn.knn_interpolate(features, pos_x, pos_y, bx, by, k=3)
    expected = interpolate(features, pos_x, pos_y, 3, bx, by)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5,
                               atol=1e-6)


def test_the_ops_refuse_to_be_traced():
    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.ops.pyg.knn(x, x, None, None, 2, False, 1)

    with pytest.raises(poptorch.Error, match="poptorch_geometric.ops.knn"):
        poptorch.inferenceModel(Model())(torch.randn(5, 2))


# --- Layers -------------------------------------------------------------

def _neighbours(points, batch, k):
    """Each node's k nearest nodes of its graph, itself included."""
    rows, cols = knn_pairs(points.detach(), points.detach(), k, batch,
                           batch)
    found = defaultdict(list)
    for r, c in zip(rows, cols):
        if r >= 0:
            found[r].append(c)
    return found


def test_dynamic_edge_conv_equals_its_formula():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU())
    conv = pyg_nn.DynamicEdgeConv(mlp, k=3)
    x, batch = torch.randn(9, 3), torch.tensor([0] * 7 + [1] * 2)
    nbrs = _neighbours(x, batch, 3)
    expected = torch.stack([torch.stack(
        [mlp(torch.cat([x[i], x[j] - x[i]])) for j in nbrs[i]]).max(0).values
        for i in range(9)])
    torch.testing.assert_close(conv(x, batch), expected)


def test_gravnet_conv_equals_its_formula():
    torch.manual_seed(0)
    conv = pyg_nn.GravNetConv(3, 4, space_dimensions=2,
                              propagate_dimensions=5, k=3)
    x, batch = torch.randn(9, 3), torch.tensor([0] * 7 + [1] * 2)
    s, h = conv.lin_s(x), conv.lin_h(x)
    nbrs = _neighbours(s, batch, 3)
    rows = []
    for i in range(9):
        msgs = torch.stack([h[j] * torch.exp(-10 * (s[j] - s[i]).pow(2).sum())
                            for j in nbrs[i]])
        rows.append(torch.cat([msgs.mean(0), msgs.max(0).values]))
    expected = conv.lin_out1(x) + conv.lin_out2(torch.stack(rows))
    torch.testing.assert_close(conv(x, batch), expected)


def _cardinal_bspline(u: float, degree: int) -> float:
    """The uniform B-spline of ``degree`` on [0, degree + 1], by the
    Cox-de Boor recursion."""
    if degree == 0:
        return 1.0 if 0 <= u < 1 else 0.0
    return (u * _cardinal_bspline(u, degree - 1) +
            (degree + 1 - u) * _cardinal_bspline(u - 1, degree - 1)) / degree


def _reference_basis(pseudo, kernel_size, is_open, degree):
    """SplineCNN's basis by loops: per edge, every combination of the
    degree + 1 pieces of each dimension (dimension 0 fastest)."""
    basis, index = [], []
    for p in pseudo.tolist():
        b_row, i_row = [], []
        for ks in product(range(degree + 1), repeat=len(p)):
            ks = ks[::-1]   # dimension 0 varies fastest
            value, weight, stride = 1.0, 0, 1
            for d, k in enumerate(ks):
                v = p[d] * (kernel_size[d] - degree * is_open[d])
                weight += (math.floor(v) + k) % kernel_size[d] * stride
                stride *= kernel_size[d]
                value *= _cardinal_bspline(v - math.floor(v) + degree - k,
                                           degree)
            b_row.append(value)
            i_row.append(weight)
        basis.append(b_row)
        index.append(i_row)
    return torch.tensor(basis, dtype=torch.float64), torch.tensor(index)


@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize("kernel_size, is_open",
                         [([5], [1]), ([3, 4], [1, 0]), ([2, 3, 4],
                                                         [0, 1, 1])])
def test_spline_basis_equals_the_b_spline_recursion(degree, kernel_size,
                                                    is_open):
    gen = torch.Generator().manual_seed(degree)
    pseudo = torch.rand(7, len(kernel_size), generator=gen,
                        dtype=torch.float64)
    pseudo[0] = 0.0   # knots
    pseudo[1] = 1.0
    basis, index = spline_basis(pseudo, torch.tensor(kernel_size),
                                torch.tensor(is_open, dtype=torch.uint8),
                                degree)
    ref_basis, ref_index = _reference_basis(pseudo, kernel_size, is_open,
                                            degree)
    torch.testing.assert_close(basis, ref_basis)
    assert torch.equal(index, ref_index)
    torch.testing.assert_close(basis.sum(1), torch.ones(7, dtype=basis.dtype))


def test_spline_basis_gradient_matches_finite_differences():
    pseudo = torch.rand(4, 2, dtype=torch.float64, requires_grad=True)
    kernel_size = torch.tensor([4, 3])
    is_open = torch.tensor([1, 0], dtype=torch.uint8)
    torch.autograd.gradcheck(
        lambda p: spline_basis(p, kernel_size, is_open, 3)[0], (pseudo, ))


def test_spline_conv_equals_its_formula():
    torch.manual_seed(0)
    conv = pyg_nn.SplineConv(3, 2, dim=2, kernel_size=[3, 4], degree=2,
                             is_open_spline=[True, False], aggr="mean")
    x = torch.randn(5, 3)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 0, 2], [1, 2, 0, 0, 0, 3, 3]])
    pseudo = torch.rand(7, 2)
    basis, index = _reference_basis(pseudo, [3, 4], [1, 0], 2)
    expected = conv.lin(x) + conv.bias
    for i in range(5):
        msgs = [sum(float(basis[e, s]) * x[j] @ conv.weight[index[e, s]]
                    for s in range(basis.size(1)))
                for e, j in enumerate(edge_index[0].tolist())
                if edge_index[1, e] == i]
        if msgs:
            expected[i] = expected[i] + torch.stack(msgs).mean(0)
    torch.testing.assert_close(conv(x, edge_index, pseudo), expected)
    # The weighting applies each edge's kernel weights as the formula does.
    out = spline_weighting(x[edge_index[0]], conv.weight,
                           basis.float(), index)
    torch.testing.assert_close(out[0], sum(
        float(basis[0, s]) * x[0] @ conv.weight[index[0, s]]
        for s in range(basis.size(1))))


@pytest.mark.parametrize("name, families", [
    ("DynamicEdgeConv", ["sparse"]), ("GravNetConv", ["sparse"]),
    ("SplineConv", ["sparse"]), ("XConv", ["plain"])])
def test_traced_layers_equal_eager_pyg(name, families):
    """Through trainingModel and inferenceModel on padded batches: the
    sparse family has graphs of fewer than k nodes (empty slots), XConv
    needs kernel_size points in every graph as in PyG."""
    (_, _, case, _), = all_rows([name])
    pairs = [p for p in make_families(seed=0) if p.name in families]
    row = run_case(case, pairs, compile_check=False)
    assert (row.traces, row.forward, row.gradients, row.reason) == \
        (True, True, True, "")


# --- ClusterData --------------------------------------------------------

def _graph(num_nodes=60, num_edges=240, seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    return Data(x=torch.randn(num_nodes, 3, generator=gen),
                edge_index=edge_index,
                edge_attr=torch.arange(num_edges).float().view(-1, 1),
                num_nodes=num_nodes)


def test_pyg_cluster_data_partitions_with_metis():
    data = _graph()
    clusters = ClusterData(data, num_parts=4, log=False)
    # METIS itself, on the graph's undirected, loop-free adjacency lists.
    adjacency = [set() for _ in range(data.num_nodes)]
    for u, v in data.edge_index.t().tolist():
        if u != v:
            adjacency[u].add(v)
            adjacency[v].add(u)
    _, parts = pymetis.part_graph(     # k-way, as PyG's recursive=False
        4, adjacency=[sorted(a) for a in adjacency], recursive=False,
        options=pymetis.Options(seed=0))
    parts = torch.tensor(parts)
    node_perm = clusters.partition.node_perm
    assert torch.equal(parts[node_perm], parts[node_perm].sort().values)
    edges = set(map(tuple, data.edge_index.t().tolist()))
    for c in range(len(clusters)):
        part = clusters[c]
        start = int(clusters.partition.partptr[c])
        nodes = node_perm[start:start + part.num_nodes]
        assert set(parts[nodes].tolist()) == {c}
        inside = {(u, v) for u, v in edges
                  if int(parts[u]) == c and int(parts[v]) == c}
        got = {(int(nodes[u]), int(nodes[v]))
               for u, v in part.edge_index.t().tolist()}
        assert got == inside
        # Edge attributes follow their edges.
        for (u, v), e in zip(part.edge_index.t().tolist(),
                             part.edge_attr.view(-1).long().tolist()):
            assert data.edge_index[:, e].tolist() == [int(nodes[u]),
                                                      int(nodes[v])]


def test_fixed_size_cluster_loader_takes_pyg_cluster_data():
    data = _graph()
    clusters = ClusterData(data, num_parts=6, log=False)
    loader = pyg_ipu.FixedSizeClusterLoader(
        clusters, pyg_ipu.FixedSizeOptions(num_nodes=40, num_edges=120),
        batch_size=2, options=poptorch.Options())
    plain = list(ClusterLoader(clusters, batch_size=2))
    batches = list(loader)
    assert len(batches) == len(plain) == 3
    for batch, reference in zip(batches, plain):
        real = int(batch.nodes_mask.sum())
        assert batch.x.shape[0] == 40 and real == reference.num_nodes
        assert torch.equal(batch.x[:real], reference.x)


# --- NeighborLoader -----------------------------------------------------

def _replay(edge_index, seeds, hops):
    """Directional sampling that takes every in-neighbour: the nodes first
    reached at each hop (as sets) and every sampled edge, as (source,
    target, edge id) in global ids."""
    seen, frontier, per_hop, sampled = set(seeds), list(seeds), [], set()
    for _ in range(hops):
        new = set()
        for e, (src, dst) in enumerate(edge_index.t().tolist()):
            if dst in frontier:
                sampled.add((src, dst, e))
                if src not in seen:
                    new.add(src)
        seen |= new
        per_hop.append(new)
        frontier = list(new)
    return per_hop, sampled


def _global_edges(batch):
    return {(int(batch.n_id[r]), int(batch.n_id[c]), int(e)) for r, c, e in
            zip(batch.edge_index[0], batch.edge_index[1], batch.e_id)}


def test_pyg_neighbor_loader_takes_every_neighbour_as_pyg_does():
    data = _graph(num_nodes=40, num_edges=90, seed=3)
    loader = NeighborLoader(data, num_neighbors=[-1, -1], batch_size=4,
                            input_nodes=torch.tensor([5, 9, 2, 30, 7, 1]))
    for batch, seeds in zip(loader, ([5, 9, 2, 30], [7, 1])):
        per_hop, sampled = _replay(data.edge_index, seeds, 2)
        n_id = batch.n_id.tolist()
        assert n_id[:len(seeds)] == seeds and batch.batch_size == len(seeds)
        counts = [len(seeds)] + [len(h) for h in per_hop]
        assert batch.num_sampled_nodes == counts
        start = len(seeds)
        for hop in per_hop:
            assert set(n_id[start:start + len(hop)]) == hop
            start += len(hop)
        assert _global_edges(batch) == sampled
        assert batch.edge_index.shape[1] == len(sampled)
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(batch.edge_attr.view(-1).long(), batch.e_id)


@pytest.mark.parametrize("replace", [False, True])
def test_pyg_neighbor_loader_fanouts_follow_the_rules(replace):
    torch.manual_seed(0)
    data = _graph(num_nodes=50, num_edges=400, seed=4)
    batch = next(iter(NeighborLoader(data, num_neighbors=[3, 2],
                                     batch_size=5, replace=replace)))
    edges = set(map(tuple, data.edge_index.t().tolist()))
    assert len(set(batch.n_id.tolist())) == batch.num_nodes  # no repeats
    in_degree = torch.bincount(data.edge_index[1], minlength=50)
    hop_of = torch.repeat_interleave(
        torch.arange(3), torch.tensor(batch.num_sampled_nodes))
    picks = torch.bincount(batch.edge_index[1], minlength=batch.num_nodes)
    for node in range(batch.num_nodes):
        if hop_of[node] < 2:
            fanout = (3, 2)[int(hop_of[node])]
            degree = int(in_degree[batch.n_id[node]])
            expected = fanout if replace and degree else min(fanout, degree)
            assert int(picks[node]) == expected
        else:
            assert int(picks[node]) == 0
    for src, dst, e in _global_edges(batch):
        assert (src, dst) in edges
        assert data.edge_index[:, e].tolist() == [src, dst]


def test_pyg_neighbor_loader_induced_subgraph_has_every_edge_between():
    data = _graph(num_nodes=40, num_edges=160, seed=5)
    batch = next(iter(NeighborLoader(data, num_neighbors=[2],
                                     batch_size=3, subgraph_type="induced")))
    nodes = set(batch.n_id.tolist())
    between = {(s, d, e) for e, (s, d) in
               enumerate(data.edge_index.t().tolist())
               if s in nodes and d in nodes}
    assert _global_edges(batch) == between


def test_pyg_hetero_neighbor_loader_takes_every_neighbour():
    data = HeteroData()
    data["a"].x = torch.randn(6, 2)
    data["b"].x = torch.randn(4, 2)
    data["a", "to", "b"].edge_index = torch.tensor([[0, 1, 2, 5],
                                                    [0, 0, 1, 3]])
    data["b", "to", "a"].edge_index = torch.tensor([[0, 1, 3], [4, 4, 2]])
    loader = NeighborLoader(data, num_neighbors=[-1, -1], batch_size=1,
                            input_nodes=("b", torch.tensor([0])))
    batch = next(iter(loader))
    # Hop 1: a0, a1 reach b0; hop 2: nothing reaches a0 or a1.
    assert batch["b"].n_id.tolist() == [0]
    assert sorted(batch["a"].n_id.tolist()) == [0, 1]
    edge = batch["a", "to", "b"]
    assert sorted(edge.e_id.tolist()) == [0, 1]
    assert batch["b", "to", "a"].edge_index.shape[1] == 0


def test_unsupported_sampling_says_it_needs_pyg_lib():
    data = _graph(num_nodes=20, num_edges=60)
    loader = NeighborLoader(data, num_neighbors=[2], batch_size=2,
                            disjoint=True)
    with pytest.raises(NotImplementedError, match="needs pyg-lib"):
        next(iter(loader))


def test_fixed_size_options_from_pyg_neighbor_loader():
    torch.manual_seed(0)
    data = _graph(num_nodes=60, num_edges=300, seed=6)
    loader = NeighborLoader(data, num_neighbors=[4, 2], batch_size=6)
    sizes = pyg_ipu.FixedSizeOptions.from_loader(loader, sample_limit=20)
    largest_nodes = max(b.num_nodes for b in loader)
    largest_edges = max(b.num_edges for b in loader)
    assert sizes.num_nodes >= largest_nodes + 1
    assert sizes.num_edges >= largest_edges + 1
    assert sizes.num_graphs == 2


# --- The switch ---------------------------------------------------------

def test_use_pure_python_backends_is_idempotent_and_undoes():
    assert pyg_ipu.use_pure_python_backends().changed == ()
    off = pyg_ipu.use_pure_python_backends(False)
    try:
        assert set(off.changed) == {"knn", "radius", "nearest", "spline",
                                    "metis", "neighbor_sampler"}
        assert off.active == ()
        x = torch.randn(4, 2)
        with pytest.raises(ImportError, match="pyg-lib"):
            pyg_nn.knn_graph(x, 2)
        with pytest.raises(ImportError):
            pyg_nn.SplineConv(2, 2, dim=1, kernel_size=2)
        with pytest.raises(ImportError):
            ClusterData(_graph(), 2, log=False)
        assert not hasattr(torch.ops.pyg, "knn")
        assert pyg_ipu.use_pure_python_backends(False).changed == ()
    finally:
        off.undo()
    assert torch_geometric.typing.WITH_KNN
    assert pyg_nn.knn_graph(torch.tensor([[0.], [1.]]), 1).tolist() == \
        [[1, 0], [0, 1]]


@pytest.mark.parametrize("value, expected", [
    (None, True), ("1", True), ("0", False), ("off", False)])
def test_the_environment_switch(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(pure_backends.ENV, raising=False)
    else:
        monkeypatch.setenv(pure_backends.ENV, value)
    assert pure_backends.enabled_by_environment() is expected


def test_a_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(pure_backends.ENV, "maybe")
    with pytest.raises(ValueError, match="POPTORCH_GEOMETRIC_PURE_BACKENDS"):
        pure_backends.enabled_by_environment()


def test_native_backends_are_never_replaced(monkeypatch):
    """Where PyG has a backend (flags as found at import), nothing is
    installed for it."""
    off = pyg_ipu.use_pure_python_backends(False)
    try:
        native = dict(pure_backends._NATIVE, WITH_KNN=True,
                      WITH_TORCH_SPARSE=True)
        monkeypatch.setattr(pure_backends, "_NATIVE", native)
        change = pyg_ipu.use_pure_python_backends()
        assert set(change.changed) == {"radius", "nearest", "spline"}
        change.undo()
    finally:
        monkeypatch.undo()
        off.undo()
    assert set(pyg_ipu.use_pure_python_backends().active) == {
        "knn", "radius", "nearest", "spline", "metis", "neighbor_sampler"}
