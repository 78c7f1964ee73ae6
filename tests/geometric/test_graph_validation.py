"""Graphs are checked where it is cheap: an edge_index entry outside its
own graph, and graphs with different attribute sets, raise naming the
graph and the value, in both collation paths and from a dataset's
storage, instead of giving a batch that silently joins graphs."""
import pytest
import torch
from torch_geometric.data import Data, HeteroData

import poptorch_geometric as pyg_ipu
from poptorch_geometric import FixedSizeCollater, FixedSizeOptions

from ._graphs import InMemoryGraphs


def _graph(num_nodes, edges, **extra):
    return Data(x=torch.ones(num_nodes, 2),
                edge_index=torch.tensor(edges, dtype=torch.long).t(),
                **extra)


GOOD = [_graph(3, [[0, 1], [1, 2]]), _graph(2, [[0, 1]])]
OPTS = FixedSizeOptions(num_nodes=20, num_edges=20, num_graphs=4)


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("bad_edge, value", [([0, 2], 2), ([-1, 0], -1)])
def test_edge_outside_its_graph_raises(fast_path, bad_edge, value):
    graphs = GOOD + [_graph(2, [[0, 1], bad_edge])]
    collater = FixedSizeCollater(OPTS, fast_path=fast_path)
    with pytest.raises(ValueError, match=(
            rf"Graph 2 of the batch has an edge_index entry {value}, "
            r"outside its 2 node\(s\) \(valid: 0 to 1\)")):
        collater(graphs)
    collater(GOOD)  # the same collater takes good graphs


def test_hetero_edges_are_checked_per_node_type():
    def graph(dst_index):
        data = HeteroData()
        data["a"].x = torch.ones(3, 1)
        data["b"].x = torch.ones(2, 1)
        data["a", "to", "b"].edge_index = torch.tensor([[0, 2], [1, dst_index]])
        return data
    collater = FixedSizeCollater(FixedSizeOptions(num_nodes=12, num_edges=10,
                                                  num_graphs=3))
    collater([graph(0), graph(1)])
    with pytest.raises(ValueError, match=r"Graph 1 of the batch has an "
                       r"edge_index of \('a', 'to', 'b'\) entry 2, outside "
                       r"its 2 'b' node\(s\)"):
        collater([graph(0), graph(2)])


def test_graphs_with_different_attributes_raise():
    graphs = GOOD + [_graph(2, [[0, 1]], edge_attr=torch.ones(1, 3))]
    with pytest.raises(ValueError, match="Graph 2 of the batch has "
                       "'edge_attr', which graph 0 has not"):
        FixedSizeCollater(OPTS)(graphs)
    graphs = [_graph(2, [[0, 1]], y=torch.ones(1)), _graph(2, [[1, 0]])]
    with pytest.raises(ValueError, match="Graph 1 of the batch has no 'y', "
                       "which graph 0 has"):
        FixedSizeCollater(OPTS)(graphs)
    # A key the batch leaves out may differ.
    FixedSizeCollater(OPTS, exclude_keys=["y"])(graphs)


def test_storage_is_checked_once_with_the_dataset_index():
    graphs = [_graph(3, [[0, 1]]) for _ in range(5)]
    graphs[3] = _graph(2, [[0, 5]])
    with pytest.raises(ValueError, match=r"Graph 3 of the dataset has an "
                       r"edge_index entry 5, outside its 2 node"):
        pyg_ipu.FixedSizeDataLoader(InMemoryGraphs(graphs), batch_size=3,
                                    fixed_size_options=OPTS)
    # A view without the bad graph loads.
    loader = pyg_ipu.FixedSizeDataLoader(InMemoryGraphs(graphs)[:3],
                                         batch_size=4,
                                         fixed_size_options=OPTS)
    assert sum(int(b.graphs_mask.sum()) for b in loader) == 3
