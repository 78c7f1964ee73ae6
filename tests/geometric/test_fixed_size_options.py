"""FixedSizeOptions: defaults, hetero conversion, totals and the sizes
derived from datasets and loaders."""
import pytest
from torch_geometric import seed_everything
from torch_geometric.data import Batch
from torch_geometric.datasets import FakeDataset, FakeHeteroDataset
from torch_geometric.loader import DataLoader as PyGDataLoader

from poptorch_geometric import FixedSizeOptions

from ._graphs import graph


def test_defaults():
    opts = FixedSizeOptions(num_nodes=10)
    assert opts.num_edges == 90 and opts.num_graphs == 2
    assert (opts.node_pad_value, opts.edge_pad_value,
            opts.graph_pad_value) == (0.0, 0.0, 0.0)
    assert opts.pad_graph_defaults == {}
    assert FixedSizeOptions(num_nodes={"a": 3, "b": 2}).num_edges == 20


def test_validation():
    with pytest.raises(ValueError, match="at least 2"):
        FixedSizeOptions(num_nodes=10, num_graphs=1)
    with pytest.raises(ValueError, match="num_nodes must be a positive"):
        FixedSizeOptions(num_nodes=-1)
    with pytest.raises(ValueError, match="num_edges must be a positive"):
        FixedSizeOptions(num_nodes=3, num_edges={"a": -2})


def test_to_hetero_and_totals():
    opts = FixedSizeOptions(num_nodes=10, num_edges=20)
    assert not opts.is_hetero()
    assert opts.to_hetero(["a", "b"], [("a", "r", "b")]) is opts
    assert opts.num_nodes == {"a": 10, "b": 10}
    assert opts.num_edges == {("a", "r", "b"): 20}
    assert opts.is_hetero()
    assert opts.total_num_nodes == 20 and opts.total_num_edges == 20
    opts.num_nodes["c"] = 5  # totals follow later changes
    assert opts.total_num_nodes == 25
    kept = FixedSizeOptions(num_nodes={"a": 1}, num_edges=4)
    kept.to_hetero(["a", "b"], [("a", "r", "a")])
    assert kept.num_nodes == {"a": 1}


def test_repr():
    text = repr(FixedSizeOptions(num_nodes=10, num_edges=20, num_graphs=3))
    for field in ("num_nodes=10", "num_edges=20", "num_graphs=3",
                  "node_pad_value=0.0", "edge_pad_value=0.0",
                  "graph_pad_value=0.0", "pad_graph_defaults={}",
                  "reserved for padding"):
        assert field in text


def _worst_case(largest, batch_size):
    """Room for ``batch_size - 1`` of the largest graphs plus one padding
    node or edge."""
    return largest * (batch_size - 1) + 1


@pytest.mark.parametrize("batch_size", [2, 10])
def test_from_dataset(batch_size):
    seed_everything(42)
    ds = FakeDataset(num_graphs=100, avg_num_nodes=10)
    opts = FixedSizeOptions.from_dataset(ds, batch_size)
    assert opts.num_nodes == _worst_case(max(g.num_nodes for g in ds),
                                         batch_size)
    assert opts.num_edges == _worst_case(max(g.num_edges for g in ds),
                                         batch_size)
    assert opts.num_graphs == batch_size
    with pytest.raises(ValueError, match=r"num_graphs \(1\) must be at least "
                       "2: a fixed-size batch needs at least one real graph "
                       "and one padding graph"):
        FixedSizeOptions.from_dataset(ds, 1)


def test_from_dataset_hetero():
    seed_everything(1410)
    ds = FakeHeteroDataset(num_graphs=100, num_node_types=2,
                           num_edge_types=5, avg_num_nodes=50)
    opts = FixedSizeOptions.from_dataset(ds, 10)
    graphs = list(ds)
    assert opts.num_nodes == {
        t: _worst_case(max(g[t].num_nodes for g in graphs), 10)
        for t in ds[0].node_types}
    assert opts.num_edges == {
        t: _worst_case(max(g[t].num_edges for g in graphs), 10)
        for t in ds[0].edge_types}


def test_from_loader_replays_to_the_sample_limit():
    ds = [graph(2 + i, 3 * i, seed=i) for i in range(6)]
    loader = PyGDataLoader(ds, batch_size=4)  # 2 batches per epoch
    opts = FixedSizeOptions.from_loader(loader, sample_limit=5)
    batches = [Batch.from_data_list(ds[:4]), Batch.from_data_list(ds[4:])]
    assert opts.num_nodes == max(b.num_nodes for b in batches) + 1
    assert opts.num_edges == max(b.num_edges for b in batches) + 1
    assert opts.num_graphs == 5


def test_from_loader_of_plain_graphs():
    """A loader of single graphs: each is a batch of one."""
    graphs = [graph(3, 4), graph(5, 2)]
    opts = FixedSizeOptions.from_loader(graphs, 10)
    assert opts.num_nodes == max(g.num_nodes for g in graphs) + 1
    assert opts.num_edges == max(g.num_edges for g in graphs) + 1
    assert opts.num_graphs == 1 + 1


def test_from_loader_hetero():
    seed_everything(0)
    ds = FakeHeteroDataset(num_graphs=4, avg_num_nodes=5)
    opts = FixedSizeOptions.from_loader(PyGDataLoader(ds, batch_size=2), 2)
    batch = Batch.from_data_list(ds[:2])
    assert opts.num_nodes["v0"] >= batch["v0"].num_nodes + 1
    assert set(opts.num_nodes) == set(ds[0].node_types)


def test_from_loader_empty():
    with pytest.raises(ValueError, match="no batch"):
        FixedSizeOptions.from_loader([], 3)
