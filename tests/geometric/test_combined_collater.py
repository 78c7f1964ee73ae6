"""CombinedBatchingCollater: chunk, collate, concatenate along dim 0."""
import re

import pytest
import torch
from torch_geometric.data import Batch, HeteroData

from poptorch_geometric import (CombinedBatchingCollater, FixedSizeCollater,
                                FixedSizeOptions)
from poptorch_geometric.pyg_collate import Collater

from ._graphs import graph


def _graphs(count, num_edges=4):
    return [graph(2 + i % 3, num_edges, seed=i, y=torch.tensor([float(i)]),
                  name=f"g{i}") for i in range(count)]


def test_plain_collater_layout():
    m, chunks, e = 16, 4, 4
    graphs = _graphs(m * chunks, e)
    batch = CombinedBatchingCollater(Collater(), mini_batch_size=m)(graphs)
    total_nodes = sum(g.num_nodes for g in graphs)
    assert batch.batch.shape == (total_nodes,)
    assert batch.ptr.shape == ((m + 1) * chunks,)
    assert batch.edge_index.shape == (2 * chunks, e * m)
    assert batch.x.shape[0] == total_nodes
    assert batch.edge_attr.shape[0] == e * m * chunks
    assert batch.y.shape[0] == m * chunks
    assert "name" not in batch  # non-tensors are dropped


def test_chunks_are_concatenated_without_offsets():
    graphs = _graphs(6)
    batch = CombinedBatchingCollater(Collater(), mini_batch_size=3)(graphs)
    first = Batch.from_data_list(graphs[:3])
    second = Batch.from_data_list(graphs[3:])
    assert torch.equal(batch.edge_index,
                       torch.cat([first.edge_index, second.edge_index]))
    assert torch.equal(batch.batch, torch.cat([first.batch, second.batch]))
    assert torch.equal(batch.ptr, torch.cat([first.ptr, second.ptr]))
    # Counts are those of one mini-batch.
    assert batch.num_graphs == 3
    assert batch.num_nodes == first.num_nodes
    assert batch.num_edges == first.num_edges


def test_fixed_size_chunks():
    opts = FixedSizeOptions(num_nodes=15, num_edges=20, num_graphs=4)
    graphs = _graphs(9)
    batch = CombinedBatchingCollater(
        FixedSizeCollater(opts, add_masks_to_batch=True),
        mini_batch_size=3)(graphs)
    assert batch.x.shape == (45, 2)
    assert batch.edge_index.shape == (6, 20)
    assert batch.graphs_mask.shape == (12,)
    assert batch.num_nodes == 15 and batch.num_graphs == 4
    assert batch.y[:3].tolist() == [0.0, 1.0, 2.0]
    assert batch.y[4:7].tolist() == [3.0, 4.0, 5.0]


def test_default_mini_batch_is_the_whole_list():
    graphs = _graphs(5)
    batch = CombinedBatchingCollater(Collater())(graphs)
    assert torch.equal(batch.x, Batch.from_data_list(graphs).x)


def test_invalid_batch_size():
    with pytest.raises(AssertionError, match="^Invalid batch size"):
        CombinedBatchingCollater(Collater(), mini_batch_size=4)(_graphs(6))


def _shares(total, parts):
    """``total`` split into ``parts`` as evenly as possible, larger shares
    first."""
    share, extra = divmod(total, parts)
    return [share + (i < extra) for i in range(parts)]


@pytest.mark.parametrize("with_num_nodes", [False, True])
def test_padding_batch_is_shaped_like_a_real_batch_and_all_padding(
        with_num_nodes):
    opts = FixedSizeOptions(num_nodes=15, num_edges=22, num_graphs=4,
                            node_pad_value=-1.0, edge_pad_value=-2.0,
                            graph_pad_value=-3.0)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 follow_batch=["x"])
    template = graph(3, 4, y=torch.tensor([1.0]))
    if with_num_nodes:
        template.num_nodes = 3
    real = collater([template])
    pad = collater.padding_batch(template)
    assert sorted(pad.keys()) == sorted(real.keys())
    for key, value in real.items():
        if torch.is_tensor(value):
            assert pad[key].shape == value.shape, key
            assert pad[key].dtype == value.dtype, key
    assert not pad.graphs_mask.any()
    assert not pad.nodes_mask.any() and not pad.edges_mask.any()
    assert (pad.x == -1.0).all() and (pad.edge_attr == -2.0).all()
    assert (pad.y == -3.0).all()
    counts = _shares(15, 4)
    assert pad.ptr.tolist() == [sum(counts[:i]) for i in range(5)]
    assert pad.batch.tolist() == [g for g, c in enumerate(counts)
                                  for _ in range(c)]
    assert torch.equal(pad.x_batch, pad.batch)
    # Padding edges are self-loops on their graph's first node.
    src, dst = pad.edge_index
    assert torch.equal(src, dst)
    assert set(src.tolist()) <= set(pad.ptr[:-1].tolist())


def test_padding_batch_without_masks():
    collater = FixedSizeCollater(FixedSizeOptions(10, 12, 3))
    pad = collater.padding_batch(graph(3, 4))
    assert "graphs_mask" not in pad and "nodes_mask" not in pad
    assert pad.x.shape == (10, 2) and pad.num_graphs == 3


def test_padding_batch_leaves_out_excluded_keys():
    collater = FixedSizeCollater(FixedSizeOptions(10, 12, 3),
                                 exclude_keys=["edge_attr"])
    template = graph(3, 4, y=torch.tensor([1.0]))
    assert sorted(collater.padding_batch(template).keys()) == \
        sorted(collater([template]).keys())
    assert "edge_attr" not in collater.padding_batch(template)


def test_padding_batch_of_hetero_graphs():
    data = HeteroData()
    data["a"].x = torch.ones(2, 1)
    data["b"].x = torch.ones(3, 1)
    data["a", "r", "b"].edge_index = torch.tensor([[0, 1], [2, 2]])
    collater = FixedSizeCollater(FixedSizeOptions(6, 4, 2),
                                 add_masks_to_batch=True)
    real = collater([data])
    pad = collater.padding_batch(data)
    for store in ("a", "b"):
        assert pad[store].x.shape == real[store].x.shape
        assert not pad[store].nodes_mask.any()
        assert pad[store].nodes_mask.shape == real[store].nodes_mask.shape
    relation = ("a", "r", "b")
    assert pad[relation].edge_index.shape == real[relation].edge_index.shape
    assert not pad[relation].edges_mask.any()
    assert pad.graphs_mask.tolist() == [False, False]


def test_short_list_is_made_up_with_padding_mini_batches():
    """The last combined batch of an epoch: 4 samples in mini-batches of 3,
    with 3 mini-batches wanted: a full one, one of a single graph, and one
    of padding only."""
    opts = FixedSizeOptions(num_nodes=15, num_edges=20, num_graphs=4)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True)
    graphs = _graphs(4)
    batch = CombinedBatchingCollater(collater, mini_batch_size=3,
                                     num_mini_batches=3)(graphs)
    parts = [collater(graphs[:3]), collater(graphs[3:]),
             collater.padding_batch(graphs[0])]
    for key in ("x", "edge_index", "y", "batch", "ptr", "graphs_mask",
                "nodes_mask", "edges_mask"):
        assert torch.equal(batch[key],
                           torch.cat([part[key] for part in parts])), key
    assert batch.graphs_mask.tolist() == \
        [True] * 3 + [False] + [True] + [False] * 3 + [False] * 4


def test_single_sample_is_made_up_with_padding_mini_batches():
    opts = FixedSizeOptions(num_nodes=15, num_edges=20, num_graphs=4)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True)
    batch = CombinedBatchingCollater(collater, mini_batch_size=2,
                                     num_mini_batches=2)(_graphs(1))
    assert batch.x.shape == (30, 2)
    assert batch.graphs_mask.tolist() == [True] + [False] * 7
    assert int(batch.nodes_mask.sum()) == _graphs(1)[0].num_nodes


def test_full_list_gets_no_padding_mini_batch():
    opts = FixedSizeOptions(num_nodes=15, num_edges=20, num_graphs=4)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True)
    batch = CombinedBatchingCollater(collater, mini_batch_size=3,
                                     num_mini_batches=2)(_graphs(6))
    assert batch.x.shape == (30, 2)
    assert int(batch.graphs_mask.sum()) == 6


def test_only_a_fixed_size_collater_makes_padding_mini_batches():
    with pytest.raises(ValueError, match=re.escape(
            "Collater cannot make padding-only mini-batches: only a "
            "FixedSizeCollater pads an incomplete combined batch.")):
        CombinedBatchingCollater(Collater(), mini_batch_size=2,
                                 num_mini_batches=3)(_graphs(4))
