"""The fixed-shape neighbour searches of poptorch_geometric.ops against a
brute-force reference: exact pairs, in order (the tie-break rule: equal
distances go to the lower index), with padding graphs, empty graphs and
graphs smaller than k."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from poptorch_geometric import FixedSizeCollater, FixedSizeOptions, ops
from torch_geometric.data import Data

from ._brute_force import interpolate, knn_pairs, radius_pairs


@st.composite
def point_batches(draw, max_points=14):
    """Integer points (exact distances, many ties) with a sorted batch
    vector whose ids may skip values (empty graphs)."""
    n = draw(st.integers(0, max_points))
    dim = draw(st.integers(1, 3))
    coords = draw(st.lists(st.integers(-3, 3), min_size=n * dim,
                           max_size=n * dim))
    ids = sorted(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)))
    return (torch.tensor(coords, dtype=torch.float).view(n, dim),
            torch.tensor(ids, dtype=torch.long))


def _as_tensor(pairs):
    return torch.tensor(pairs, dtype=torch.long).view(2, -1)


@settings(max_examples=60, deadline=None)
@given(point_batches(), point_batches(), st.integers(1, 5))
def test_knn_equals_brute_force(points_x, points_y, k):
    (x, bx), (y, by) = points_x, points_y
    if x.size(1) != y.size(1):
        y = y[:, :1].expand(-1, x.size(1)).contiguous()
    out = ops.knn(x, y, k, bx, by)
    assert out.shape == (2, y.size(0) * k)
    assert torch.equal(out, _as_tensor(knn_pairs(x, y, k, bx, by)))


@settings(max_examples=60, deadline=None)
@given(point_batches(), st.integers(1, 5), st.booleans(),
       st.sampled_from(["source_to_target", "target_to_source"]))
def test_knn_graph_equals_brute_force(points, k, loop, flow):
    x, batch = points
    expected = _as_tensor(knn_pairs(x, x, k, batch, batch,
                                    exclude_self=not loop))
    if flow == "source_to_target":
        expected = expected.flip([0])
    out = ops.knn_graph(x, k, batch, loop=loop, flow=flow)
    assert torch.equal(out, expected)


@settings(max_examples=60, deadline=None)
@given(point_batches(), st.sampled_from([0.5, 1.5, 2.5]),
       st.integers(1, 6), st.booleans())
def test_radius_graph_equals_brute_force(points, r, max_num_neighbors, loop):
    x, batch = points
    expected = _as_tensor(radius_pairs(x, x, r, batch, batch,
                                       max_num_neighbors,
                                       exclude_self=not loop))
    out = ops.radius_graph(x, r, batch, loop=loop,
                           max_num_neighbors=max_num_neighbors)
    assert torch.equal(out, expected.flip([0]))


@settings(max_examples=40, deadline=None)
@given(point_batches(), point_batches(), st.sampled_from([1.0, 2.5]))
def test_radius_equals_brute_force(points_x, points_y, r):
    (x, bx), (y, by) = points_x, points_y
    y = y[:, :1].expand(-1, x.size(1)).contiguous()
    out = ops.radius(x, y, r, bx, by, max_num_neighbors=4)
    assert torch.equal(out, _as_tensor(radius_pairs(x, y, r, bx, by, 4)))


def test_ties_go_to_the_lower_index():
    # Points 1, 2 and 3 are all at distance 1 from the query.
    x = torch.tensor([[5.], [1.], [-1.], [1.]])
    out = ops.knn(x, torch.tensor([[0.]]), 2)
    assert out.tolist() == [[0, 0], [1, 2]]
    out = ops.radius(x, torch.tensor([[0.]]), 1.5, max_num_neighbors=2)
    assert out.tolist() == [[0, 0], [1, 2]]


def test_radius_excludes_points_exactly_at_r():
    x = torch.tensor([[0.], [1.], [2.]])
    out = ops.radius(x, torch.tensor([[0.]]), 1.0)
    assert out.tolist() == [[0, -1, -1], [0, -1, -1]]


def test_no_neighbour_in_padding_graphs():
    """Real nodes of a padded batch only find real nodes of their graph;
    padding nodes (all at the origin) only padding nodes."""
    graphs = [Data(pos=torch.tensor([[0., 0.], [1., 0.], [0., 2.]]),
                   edge_index=torch.tensor([[0], [1]])),
              Data(pos=torch.tensor([[0.1, 0.]]),
                   edge_index=torch.zeros(2, 0, dtype=torch.long))]
    batch = FixedSizeCollater(FixedSizeOptions(8, 6, 4))(graphs)
    edges = ops.knn_graph(batch.pos, 3, batch.batch, loop=False)
    src, dst = edges
    valid = src >= 0
    assert torch.equal(batch.batch[src[valid]], batch.batch[dst[valid]])
    # Graph 0 has 2 candidates per node, graph 1 none: one empty slot
    # per node of graph 0, all three of the single node of graph 1.
    real = batch.batch[torch.arange(8).repeat_interleave(3)] < 2
    assert int((~valid & real).sum()) == 3 * 1 + 3
    expected = knn_pairs(batch.pos, batch.pos, 3, batch.batch, batch.batch,
                         exclude_self=True)
    assert torch.equal(edges, _as_tensor(expected).flip([0]))


def test_cosine_distance():
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(9, 3, generator=gen), torch.randn(4, 3, generator=gen)
    out = ops.knn(x, y, 3, cosine=True)
    assert torch.equal(out, _as_tensor(knn_pairs(x, y, 3, cosine=True)))


def test_empty_inputs_keep_their_shapes():
    x = torch.zeros(0, 2)
    assert ops.knn(x, torch.ones(3, 2), 2).tolist() == [[-1] * 6, [-1] * 6]
    assert ops.knn_graph(x, 2).shape == (2, 0)
    assert ops.radius_graph(x, 1.0).shape == (2, 0)
    assert ops.nearest(torch.ones(2, 2), x).tolist() == [-1, -1]


@settings(max_examples=40, deadline=None)
@given(point_batches(), point_batches(), st.integers(1, 4))
def test_knn_interpolate_equals_brute_force(points_x, points_y, k):
    (pos_x, bx), (pos_y, by) = points_x, points_y
    pos_y = pos_y[:, :1].expand(-1, pos_x.size(1)).contiguous() + 0.25
    x = torch.arange(pos_x.size(0) * 2, dtype=torch.float).view(-1, 2)
    out = ops.knn_interpolate(x, pos_x, pos_y, bx, by, k=k)
    expected = interpolate(x, pos_x, pos_y, k, bx, by)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_knn_interpolate_gradient_reaches_x():
    x = torch.randn(5, 2, requires_grad=True)
    pos_x, pos_y = torch.randn(5, 3), torch.randn(3, 3)
    ops.knn_interpolate(x, pos_x, pos_y, k=2).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


@settings(max_examples=40, deadline=None)
@given(point_batches(), point_batches())
def test_nearest_equals_brute_force(points_x, points_y):
    (x, bx), (y, by) = points_x, points_y
    y = y[:, :1].expand(-1, x.size(1)).contiguous()
    expected = []
    for i in range(x.size(0)):
        found = knn_pairs(y, x[i:i + 1], 1, by, bx[i:i + 1])[1]
        expected.append(found[0])
    assert ops.nearest(x, y, bx, by).tolist() == expected


@pytest.mark.parametrize("call, message", [
    (lambda: ops.knn(torch.ones(3, 2), torch.ones(2, 2), 0), "k must"),
    (lambda: ops.knn(torch.ones(3, 2), torch.ones(2, 3), 1), "features"),
    (lambda: ops.knn_graph(torch.ones(3, 2), 1, flow="up"), "flow"),
    (lambda: ops.knn_graph(torch.ones(3, 2), 1, torch.zeros(2).long()),
     "batch_x must be 1-D with one example index per point"),
    (lambda: ops.radius_graph(torch.ones(3, 2), 1.0, max_num_neighbors=0),
     "max_num_neighbors"),
    (lambda: ops.knn(torch.ones(3, 2, 2), torch.ones(2, 2), 1), "1-D or 2-D"),
])
def test_bad_arguments_raise_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
