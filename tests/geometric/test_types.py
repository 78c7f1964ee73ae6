"""PyGArgsParser: flattening PyG objects for PopTorch and rebuilding them."""
import pytest
import torch
from torch_geometric.data import Batch, Data, HeteroData

from poptorch_core._args_parser import (flattenTensors, getCustomParser,
                                        rebuildStructure)
from poptorch_geometric import PyGArgsParser
from poptorch_geometric.common import DataBatch, HeteroDataBatch, call_once

from ._graphs import graph


def _hetero():
    data = HeteroData()
    data.y = torch.tensor([1.0])
    data.name = "h"
    data["a"].x = torch.ones(2, 3)
    data["b"].x = torch.zeros(3, 1)
    data["a", "r", "b"].edge_index = torch.tensor([[0, 1], [2, 0]])
    data["a", "r", "b"].kind = "bond"
    return data


def test_data_tensors_in_sorted_key_order():
    data = graph(3, 2, y=torch.ones(1), name="n")
    tensors = list(PyGArgsParser().yieldTensors(data))
    expected = [data.edge_attr, data.edge_index, data.x, data.y]
    assert len(tensors) == 4
    assert all(a is b for a, b in zip(tensors, expected))


def test_hetero_tensors_in_store_order():
    data = _hetero()
    tensors = list(PyGArgsParser().yieldTensors(data))
    expected = [data.y, data["a"].x, data["b"].x,
                data["a", "r", "b"].edge_index]
    assert all(a is b for a, b in zip(tensors, expected))
    assert len(tensors) == len(expected)


def test_data_round_trip_drops_non_tensors():
    data = graph(3, 2, name="n")
    parser = PyGArgsParser()
    rebuilt = parser.reconstruct(data, iter(parser.yieldTensors(data)))
    assert type(rebuilt) is Data
    assert set(rebuilt.keys()) == {"x", "edge_index", "edge_attr"}
    assert torch.equal(rebuilt.x, data.x)


def test_batch_round_trip_keeps_counts():
    batch = Batch.from_data_list([graph(3, 2), graph(2, 1)])
    parser = PyGArgsParser()
    doubled = [torch.cat([t, t]) for t in parser.yieldTensors(batch)]
    rebuilt = parser.reconstruct(batch, iter(doubled))
    assert type(rebuilt) is DataBatch
    assert rebuilt.num_graphs == 2
    assert rebuilt.num_nodes == 5 and rebuilt.num_edges == 3
    assert rebuilt.x.shape[0] == 10


def test_batch_rebuilt_like_pygs_constructor():
    # The rebuilt batch's store must be what ``Batch(**tensors,
    # _base_cls=Data)`` makes: the same keys in the same order (named
    # arguments of ``Data.__init__`` first), the same tensor objects.
    graphs = [graph(3, 2, y=torch.ones(1), pos=torch.zeros(3, 2),
                    a_mask=torch.ones(3, dtype=torch.bool), name="n"),
              graph(2, 1, y=torch.zeros(1), pos=torch.ones(2, 2),
                    a_mask=torch.zeros(2, dtype=torch.bool), name="m")]
    batch = Batch.from_data_list(graphs)
    parser = PyGArgsParser()
    tensors = list(parser.yieldTensors(batch))
    rebuilt = parser.reconstruct(batch, iter(tensors))
    keys = sorted(k for k, v in batch.items() if torch.is_tensor(v))
    reference = Batch(**dict(zip(keys, tensors)), _base_cls=Data)
    counts = ["num_nodes", "num_edges"]
    assert list(rebuilt._store._mapping) == \
        list(reference._store._mapping) + counts
    assert all(rebuilt[k] is reference[k] for k in keys)
    assert "name" not in rebuilt and rebuilt.num_graphs == 2


def test_hetero_batch_round_trip_keeps_counts_and_non_tensors():
    batch = Batch.from_data_list([_hetero(), _hetero()])
    parser = PyGArgsParser()
    doubled = [torch.cat([t, t]) for t in parser.yieldTensors(batch)]
    rebuilt = parser.reconstruct(batch, iter(doubled))
    assert type(rebuilt) is HeteroDataBatch
    assert rebuilt.num_nodes == 10 and rebuilt.num_edges == 4
    assert rebuilt["a"].x.shape == (8, 3)
    assert rebuilt["a", "r", "b"].kind == ["bond", "bond"]
    assert "num_nodes" not in rebuilt.node_types
    # Batches PyG builds keep PyG's counts.
    assert Batch.from_data_list([_hetero()]).num_nodes == 5


def test_plain_hetero_round_trip():
    data = _hetero()
    parser = PyGArgsParser()
    rebuilt = parser.reconstruct(data, iter(parser.yieldTensors(data)))
    assert type(rebuilt) is HeteroData
    assert rebuilt.name == "h"
    assert torch.equal(rebuilt["a", "r", "b"].edge_index,
                       data["a", "r", "b"].edge_index)


def test_registered_with_poptorch():
    batch = Batch.from_data_list([graph(3, 2)])
    for value in (graph(2, 1), batch, Batch.from_data_list([_hetero()])):
        assert isinstance(getCustomParser(value), PyGArgsParser)
    flat = flattenTensors((batch, torch.ones(1)))
    rebuilt, tensor = rebuildStructure((batch, torch.ones(1)), iter(flat))
    assert torch.equal(rebuilt.x, batch.x) and tensor.shape == (1,)


def test_unsupported_type():
    with pytest.raises(ValueError, match="Unsupported data type"):
        list(PyGArgsParser().yieldTensors([1, 2]))
    with pytest.raises(ValueError, match="Unsupported data type"):
        PyGArgsParser().reconstruct(3, iter([]))


def test_call_once():
    calls = []

    @call_once
    def f(x):
        calls.append(x)
        return x

    assert f(1) == 1 and f(2) is None and calls == [1]
    assert f.has_run
