"""CombinedBatchingCollater: chunk, collate, concatenate along dim 0."""
import pytest
import torch
from torch_geometric.data import Batch

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
