"""Property tests of FixedSizeCollater over random graph lists: shapes, the
real part against PyG's own batching, inert padding, exact masks, and the
fast path against the reference path bit for bit."""
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch

from poptorch_geometric import FixedSizeCollater, FixedSizeOptions

from ._graphs import (assert_batches_identical, fast_path_only,
                      hetero_graphs, homogeneous_graphs)

NODE_PAD, EDGE_PAD, GRAPH_PAD = -1.0, -2.0, -3.0
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _options(num_nodes, num_edges, num_graphs):
    return FixedSizeOptions(num_nodes=num_nodes, num_edges=num_edges,
                            num_graphs=num_graphs, node_pad_value=NODE_PAD,
                            edge_pad_value=EDGE_PAD,
                            graph_pad_value=GRAPH_PAD)


def _collate(opts, graphs, fast, **kwargs):
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 fast_path=fast, **kwargs)
    if not fast:
        return collater(graphs)
    with fast_path_only():  # no silent fallback to the reference path
        return collater(graphs)


def _prefix_mask(length, num_true):
    return torch.tensor([True] * num_true + [False] * (length - num_true))


@SETTINGS
@given(graphs=homogeneous_graphs(), extra_nodes=st.integers(0, 6),
       extra_edges=st.integers(0, 9), extra_graphs=st.integers(1, 3),
       follow=st.booleans())
def test_homogeneous_batches(graphs, extra_nodes, extra_edges, extra_graphs,
                             follow):
    real_nodes = sum(g.num_nodes for g in graphs)
    real_edges = sum(g.num_edges for g in graphs)
    num_nodes, num_edges = real_nodes + extra_nodes, real_edges + extra_edges
    assume(num_edges > 0)
    num_graphs = len(graphs) + extra_graphs
    opts = _options(num_nodes, num_edges, num_graphs)
    follow_batch = ["x", "name"] if follow else None

    if "y" in graphs[0] and all(g.num_nodes == 1 for g in graphs):
        with pytest.raises(AssertionError, match="Incorrect input data"):
            FixedSizeCollater(opts)(graphs)
        return
    if extra_nodes == 0 and extra_edges > 0:
        with pytest.raises(RuntimeError, match="no padding node"):
            FixedSizeCollater(opts)(graphs)
        return

    batch = _collate(opts, graphs, fast=True, follow_batch=follow_batch)
    reference = _collate(opts, graphs, fast=False, follow_batch=follow_batch)
    assert_batches_identical(batch, reference)

    real = Batch.from_data_list(graphs, follow_batch=follow_batch)
    k = len(graphs)
    # Exact shapes.
    assert batch.num_graphs == num_graphs
    assert batch.num_nodes == num_nodes
    assert batch.x.shape == (num_nodes, graphs[0].x.shape[1])
    assert batch.edge_index.shape == (2, num_edges)
    assert batch.batch.shape == (num_nodes,)
    assert batch.ptr.shape == (num_graphs + 1,)
    # The real part is PyG's batch of the real graphs.
    assert torch.equal(batch.x[:real_nodes], real.x)
    assert torch.equal(batch.edge_index[:, :real_edges], real.edge_index)
    assert torch.equal(batch.batch[:real_nodes], real.batch)
    assert torch.equal(batch.ptr[:k + 1], real.ptr)
    assert batch.ptr[-1] == num_nodes
    # Padding is inert: padding nodes belong to padding graphs, padding
    # edges are self-loops on the first node of a padding graph.
    assert (batch.x[real_nodes:] == NODE_PAD).all()
    assert (batch.batch[real_nodes:] >= k).all()
    pad_edges = batch.edge_index[:, real_edges:]
    assert torch.equal(pad_edges[0], pad_edges[1])
    assert ((pad_edges >= real_nodes) & (pad_edges < num_nodes)).all()
    owners = batch.batch[pad_edges[0]]
    assert torch.equal(batch.ptr[owners], pad_edges[0])
    if "edge_attr" in graphs[0]:
        assert batch.edge_attr.shape[0] == num_edges
        assert torch.equal(batch.edge_attr[:real_edges], real.edge_attr)
        assert (batch.edge_attr[real_edges:] == EDGE_PAD).all()
    if "y" in graphs[0]:
        node_level = graphs[0].y.dim() == 1
        cut = real_nodes if node_level else k
        assert batch.y.shape[0] == (num_nodes if node_level else num_graphs)
        assert torch.equal(batch.y[:cut], real.y)
        pad = NODE_PAD if node_level else GRAPH_PAD
        assert (batch.y[cut:] == int(pad) if node_level
                else batch.y[cut:] == pad).all()
    if "count" in graphs[0]:
        assert batch.count.tolist() == real.count.tolist() + \
            [graphs[0].count] * extra_graphs
    if "name" in graphs[0]:
        assert batch.name == real.name + [graphs[0].name] * extra_graphs
    if "weight" in graphs[0]:
        assert torch.equal(batch.weight[:k], real.weight)
        assert (batch.weight[k:] == GRAPH_PAD).all()
    if follow:
        assert torch.equal(batch.x_batch, batch.batch)
        assert torch.equal(batch.x_ptr, batch.ptr)
    # Masks are exact.
    assert torch.equal(batch.graphs_mask, _prefix_mask(num_graphs, k))
    assert torch.equal(batch.nodes_mask, _prefix_mask(num_nodes, real_nodes))
    assert torch.equal(batch.edges_mask, _prefix_mask(num_edges, real_edges))
    # Batches of the fast path can be taken apart again.
    for original, example in zip(graphs, batch.to_data_list()):
        assert torch.equal(original.x, example.x)
        assert torch.equal(original.edge_index, example.edge_index)


@SETTINGS
@given(graphs=hetero_graphs(), extra_nodes=st.integers(1, 4),
       extra_edges=st.integers(0, 5), extra_graphs=st.integers(1, 3))
def test_hetero_batches(graphs, extra_nodes, extra_edges, extra_graphs):
    first = graphs[0]
    real_nodes = {t: sum(g[t].num_nodes for g in graphs)
                  for t in first.node_types}
    real_edges = {t: sum(g[t].num_edges for g in graphs)
                  for t in first.edge_types}
    num_nodes = {t: n + extra_nodes for t, n in real_nodes.items()}
    num_edges = {t: e + extra_edges for t, e in real_edges.items()}
    assume(all(num_edges.values()))
    num_graphs = len(graphs) + extra_graphs
    opts = _options(num_nodes, num_edges, num_graphs)

    batch = _collate(opts, graphs, fast=False)
    # HeteroData takes the reference path even when the fast one is on.
    assert_batches_identical(
        FixedSizeCollater(opts, add_masks_to_batch=True)(graphs), batch)
    real = Batch.from_data_list(graphs)
    k = len(graphs)
    assert batch.num_graphs == num_graphs
    assert batch.y.shape == (num_graphs,)
    assert torch.equal(batch.y[:k], real.y)
    assert (batch.y[k:] == GRAPH_PAD).all()
    assert torch.equal(batch.graphs_mask, _prefix_mask(num_graphs, k))
    for t in first.node_types:
        store, n = batch[t], real_nodes[t]
        assert store.x.shape[0] == num_nodes[t]
        assert torch.equal(store.x[:n], real[t].x)
        assert (store.x[n:] == NODE_PAD).all()
        assert torch.equal(store.batch[:n], real[t].batch)
        assert (store.batch[n:] >= k).all()
        assert store.ptr.shape == (num_graphs + 1,)
        assert torch.equal(store.nodes_mask, _prefix_mask(num_nodes[t], n))
    for src, rel, dst in first.edge_types:
        store, e = batch[src, rel, dst], real_edges[src, rel, dst]
        assert store.edge_index.shape == (2, num_edges[src, rel, dst])
        assert torch.equal(store.edge_index[:, :e],
                           real[src, rel, dst].edge_index)
        assert torch.equal(store.edges_mask,
                           _prefix_mask(num_edges[src, rel, dst], e))
        # Padding edges join the first src and dst nodes of one padding
        # graph.
        pad_src, pad_dst = store.edge_index[:, e:]
        graph_of = batch[src].batch[pad_src]
        assert (graph_of >= k).all()
        assert torch.equal(batch[dst].batch[pad_dst], graph_of)
        assert torch.equal(batch[src].ptr[graph_of], pad_src)
        assert torch.equal(batch[dst].ptr[graph_of], pad_dst)
        if "edge_attr" in store:
            assert torch.equal(store.edge_attr[:e],
                               real[src, rel, dst].edge_attr)
            assert (store.edge_attr[e:] == EDGE_PAD).all()


@SETTINGS
@given(graphs=homogeneous_graphs(), extra_graphs=st.integers(1, 3))
def test_exact_fill_keeps_graph_level_shapes(graphs, extra_graphs):
    """Real graphs filling the node and edge budgets exactly: no padding
    nodes or edges, but graph-level tensors keep num_graphs entries."""
    real_nodes = sum(g.num_nodes for g in graphs)
    real_edges = sum(g.num_edges for g in graphs)
    assume(real_edges > 0)
    assume(not ("y" in graphs[0] and all(g.num_nodes == 1 for g in graphs)))
    num_graphs = len(graphs) + extra_graphs
    opts = _options(real_nodes, real_edges, num_graphs)
    batch = _collate(opts, graphs, fast=True)
    assert_batches_identical(batch, _collate(opts, graphs, fast=False))
    real = Batch.from_data_list(graphs)
    assert torch.equal(batch.x, real.x)
    assert torch.equal(batch.edge_index, real.edge_index)
    assert batch.num_graphs == num_graphs
    assert batch.ptr.tolist() == real.ptr.tolist() + \
        [real_nodes] * extra_graphs
    assert batch.graphs_mask.shape == (num_graphs,)
    assert batch.nodes_mask.all() and batch.edges_mask.all()
    if "y" in graphs[0] and graphs[0].y.dim() == 2:
        assert batch.y.shape[0] == num_graphs
