"""Per-graph counts and columns the collaters read instead of PyG's own
walk through each graph: ``node_count``/``edge_count``, ``Columns`` and the
storage-backed ``StorageColumns``.

Every value is compared with what PyG itself says (``Data.num_nodes``,
``Data.num_edges``, ``Data.__cat_dim__``, ``torch.cat`` of the graphs the
dataset hands out). Where the fast answers are a promise (plain graphs are
counted without PyG's walk, storage keys are read from the storage), the
tests also check that they are given.
"""
from typing import Callable, List

import numpy as np
import pytest
import torch
from torch.nn import Parameter
from torch_geometric.data import Data, HeteroData

from poptorch_geometric._fastpath.storage import GraphStorage
from poptorch_geometric._fastpath.storage_columns import StorageColumns
from poptorch_geometric._padding.columns import Columns, cat_dim
from poptorch_geometric._padding.sizes import (edge_count, hetero_counts,
                                               homogeneous_counts, node_count)

from ._graphs import InMemoryGraphs, graph


def _pyg_nodes(data: Data):
    return data.num_nodes or 0


def _edges(n: int) -> torch.Tensor:
    return torch.zeros(2, n, dtype=torch.long)


# Lists of graphs, and whether Columns must count them without PyG
# (nodes, edges).
CASES = {
    "x_and_edges": (lambda: [graph(3, 4), graph(5, 2), graph(1, 0)],
                    True, True),
    "explicit_num_nodes": (
        lambda: [Data(num_nodes=n, edge_index=_edges(n + 1))
                 for n in (2, 7)], True, True),
    # An explicit count wins over the size of x.
    "explicit_num_nodes_over_x": (
        lambda: [Data(x=torch.ones(n, 1), num_nodes=n + 2,
                      edge_index=_edges(1)) for n in (2, 7)], True, True),
    "explicit_num_edges": (
        lambda: [Data(x=torch.ones(n, 1), edge_index=_edges(n),
                      num_edges=n + 3) for n in (2, 4)], True, True),
    # A tensor count is PyG's answer too, but not an int list.
    "tensor_num_nodes": (
        lambda: [Data(num_nodes=torch.tensor(n), edge_index=_edges(1))
                 for n in (2, 3)], False, True),
    "x_and_pos_agree": (
        lambda: [Data(x=torch.ones(n, 2), pos=torch.ones(n, 3),
                      edge_index=_edges(n), edge_attr=torch.ones(n, 4))
                 for n in (2, 5)], True, True),
    # PyG takes the first well-known key in store order: pos here.
    "pos_first_and_disagreeing": (
        lambda: [Data(pos=torch.ones(n + 1, 3), x=torch.ones(n, 2),
                      edge_attr=torch.ones(n + 2, 1), edge_index=_edges(n))
                 for n in (2, 5)], False, False),
    "x_first_and_disagreeing": (
        lambda: [Data(x=torch.ones(n, 2), pos=torch.ones(n + 1, 3),
                      edge_index=_edges(n), edge_attr=torch.ones(n + 2, 1))
                 for n in (2, 5)], False, False),
    "different_keys": (
        lambda: [Data(x=torch.ones(2, 1), edge_index=_edges(1)),
                 Data(x=torch.ones(3, 1), pos=torch.ones(3, 2),
                      edge_index=_edges(2))], False, False),
    "one_dim_x": (lambda: [Data(x=torch.arange(n), edge_index=_edges(n))
                           for n in (3, 4)], True, True),
    "x_with_gradients": (
        lambda: [Data(x=torch.ones(n, 2, requires_grad=True),
                      edge_index=_edges(2)) for n in (3, 4)], False, True),
    "no_node_attribute": (
        lambda: [Data(edge_index=torch.tensor([[0, n], [n, 0]]))
                 for n in (2, 6)], False, True),
    "no_edges_at_all": (lambda: [Data(x=torch.ones(n, 1)) for n in (1, 2)],
                        True, False),
}


@pytest.mark.filterwarnings("ignore:Unable to accurately infer")
@pytest.mark.parametrize("case", sorted(CASES))
def test_counts_are_pyg_counts(case):
    make, fast_nodes, fast_edges = CASES[case]
    graphs: List[Data] = make()
    nodes = [_pyg_nodes(g) for g in graphs]
    edges = [g.num_edges for g in graphs]
    assert [node_count(g) for g in graphs] == nodes
    assert [edge_count(g) for g in graphs] == edges
    assert homogeneous_counts(graphs, Columns.of(graphs)) == (nodes, edges)
    assert homogeneous_counts(graphs, None) == (nodes, edges)
    cols = Columns(graphs)
    for counts, expected, fast in ((cols.node_counts(), nodes, fast_nodes),
                                   (cols.edge_counts(), edges, fast_edges)):
        if fast:
            assert counts == expected
        else:
            assert counts is None  # left to PyG's walk
    # Asked again, the same answer (the key check is cached).
    assert cols.node_counts() == (nodes if fast_nodes else None)


def test_counts_follow_pyg_beyond_plain_tensors():
    # PyG counts numpy arrays, and a subclass may define its own counts.
    g = Data(x=np.zeros((4, 2)), edge_attr=np.zeros((3, 1)))
    assert (node_count(g), edge_count(g)) == (4, 3) == (g.num_nodes,
                                                        g.num_edges)

    class Fixed(Data):
        @property
        def num_nodes(self):
            return 9

    f = Fixed(x=torch.ones(2, 1), edge_index=_edges(1))
    assert node_count(f) == 9
    assert Columns.of([f]) is None


def test_hetero_counts_are_per_type_pyg_counts():
    graphs = []
    for n in (2, 3):
        g = HeteroData()
        g["a"].x = torch.ones(n, 1)
        g["b"].num_nodes = 0
        g["a", "to", "a"].edge_index = _edges(n + 1)
        graphs.append(g)
    nodes, edges = hetero_counts(graphs)
    assert nodes == {"a": [2, 3], "b": [0, 0]}
    assert edges == {("a", "to", "a"): [3, 4]}


@pytest.mark.parametrize("key", ["x", "pos", "edge_index", "face",
                                 "adj_index", "edge_attr", "y"])
def test_cat_dim_is_pyg_cat_dim(key):
    assert cat_dim(key) == Data().__cat_dim__(key, torch.zeros(2, 2))


PLAIN = {
    "dense": ([torch.ones(2), torch.ones(3)], True),
    "first_not_a_tensor": ([[1.0], torch.ones(1)], False),
    "first_sparse": ([torch.eye(2).to_sparse(), torch.ones(2, 2)], False),
    "other_not_a_tensor": ([torch.ones(1), [1.0]], False),
    "parameter": ([torch.ones(1), Parameter(torch.ones(1),
                                            requires_grad=False)], False),
    "mixed_dtypes": ([torch.ones(1), torch.ones(1, dtype=torch.float64)],
                     False),
    "gradients": ([torch.ones(1), torch.ones(1, requires_grad=True)], False),
}


@pytest.mark.parametrize("case", sorted(PLAIN))
def test_plain_tensors_are_what_the_fast_path_can_concatenate(case):
    values, plain = PLAIN[case]
    cols = Columns([Data(v=v) for v in values])
    assert cols.plain_tensors("v") is plain
    assert cols.plain_tensors("v") is plain


def test_columns_read_each_graph_once():
    graphs = [graph(3, 2), graph(1, 4)]
    cols = Columns(graphs)
    assert cols.column("x") is cols.column("x")
    assert cols.sizes("edge_index", -1) == [2, 4]
    assert cols.sizes("edge_index", 1) is cols.sizes("edge_index", -1)
    assert cols.leading_sizes("x") == [3, 1]
    assert Columns([Data(v=torch.tensor(1.0))]).leading_sizes("v") is None
    out = torch.empty(2, 6, dtype=torch.long)
    cols.concat("edge_index", 1, out)
    assert torch.equal(out, torch.cat([g.edge_index for g in graphs], 1))


def _storage_columns(corrupt: Callable[[torch.Tensor], torch.Tensor]):
    """StorageColumns of graphs 4, 1 and 6 of a dataset, built over copies
    of those graphs whose storage keys were replaced by ``corrupt(value)``
    and which carry a key the storage lacks (``extra``): whatever is read
    from the graphs instead of the storage shows."""
    ds = InMemoryGraphs([graph(2 + i % 3, 3 + i % 4,
                               y=torch.tensor([float(i)]), seed=i)
                         for i in range(7)])
    order = [4, 1, 6]
    truth = [ds[i] for i in order]
    data_list = []
    for i, g in zip(order, truth):
        copy = Data(**{k: corrupt(v) for k, v in g.items()})
        copy.extra = torch.ones(i + 1, 2)
        data_list.append(copy)
        g.extra = copy.extra
    storage = GraphStorage.of(ds)
    cols = StorageColumns(data_list, storage, storage.positions(order))
    return cols, truth


def _shrunk(value: torch.Tensor) -> torch.Tensor:
    # One row or column fewer along the cat dim, other dims intact.
    dim = -1 if value.dim() == 2 and value.shape[0] == 2 and \
        value.dtype == torch.long else 0
    return value.narrow(dim, 0, max(value.shape[dim] - 1, 0))


def test_storage_columns_read_storage_keys_from_the_storage():
    cols, truth = _storage_columns(_shrunk)
    for key in ("x", "edge_index", "edge_attr", "y"):
        dim = cat_dim(key)
        expected = [g[key].shape[dim] for g in truth]
        assert cols.sizes(key, dim) == expected, key
        assert cols.plain_tensors(key)
        out = torch.empty(torch.cat([g[key] for g in truth], dim).shape,
                          dtype=truth[0][key].dtype)
        cols.concat(key, dim, out)
        assert torch.equal(out, torch.cat([g[key] for g in truth], dim)), key
    assert cols.leading_sizes("x") == [g.x.shape[0] for g in truth]
    # Along another dim, and for keys the storage lacks: the graphs.
    assert cols.sizes("x", 1) == [g.x.shape[1] for g in truth]
    assert cols.sizes("extra", 0) == cols.leading_sizes("extra") == \
        [g.extra.shape[0] for g in truth]
    assert cols.plain_tensors("extra")
    out = torch.empty(sum(g.extra.shape[0] for g in truth), 2)
    cols.concat("extra", 0, out)
    assert torch.equal(out, torch.cat([g.extra for g in truth]))
    # The storage sizes are made once per batch.
    assert cols.sizes("edge_attr", 0) is cols.sizes("edge_index", 1)


def test_storage_columns_do_not_look_at_the_graphs_storage_values():
    # 0-dim copies in the graphs: only the storage can give the sizes.
    cols, truth = _storage_columns(lambda v: v.reshape(-1)[0])
    assert cols.leading_sizes("x") == [g.x.shape[0] for g in truth]
    assert cols.leading_sizes("extra") == [g.extra.shape[0] for g in truth]
    assert cols.plain_tensors("x")
