"""Graph builders, hypothesis strategies and an exact batch comparison shared
by the geometric tests."""
import contextlib
from typing import Any, Iterator, List, Optional
from unittest import mock

import torch
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data, HeteroData, InMemoryDataset


def graph(num_nodes: int, num_edges: int, num_features: int = 2,
          edge_dim: Optional[int] = 1, y: Optional[torch.Tensor] = None,
          seed: int = 0, **extra: Any) -> Data:
    """A random graph with ``x`` [n, F], ``edge_index`` [2, e] and, unless
    ``edge_dim`` is None, ``edge_attr`` [e, edge_dim]."""
    gen = torch.Generator().manual_seed(seed)
    data = Data(
        x=torch.randn(num_nodes, num_features, generator=gen),
        edge_index=torch.randint(0, max(num_nodes, 1), (2, num_edges),
                                 generator=gen))
    if edge_dim is not None:
        data.edge_attr = torch.randn(num_edges, edge_dim, generator=gen)
    if y is not None:
        data.y = y
    for key, value in extra.items():
        data[key] = value
    return data


class InMemoryGraphs(InMemoryDataset):
    """An in-memory dataset of the given graphs, in PyG's own storage."""

    def __init__(self, graphs: List[Any], transform: Any = None) -> None:
        super().__init__(transform=transform)
        self._data, self.slices = self.collate(graphs)


@contextlib.contextmanager
def fast_path_only() -> Iterator[None]:
    """Fails any call of PyG's batching, which only the reference path
    makes."""
    with mock.patch.object(Batch, "from_data_list",
                           side_effect=AssertionError("reference path")):
        yield


def assert_batches_identical(actual: Batch, expected: Batch) -> None:
    """Same class, keys in the same order, every value bit for bit (dtype
    and shape included), and the same ``_num_graphs``, ``_slice_dict`` and
    ``_inc_dict``."""
    assert type(actual) is type(expected)
    assert actual._num_graphs == expected._num_graphs
    for a_store, e_store in zip(actual.stores, expected.stores):
        assert list(a_store.keys()) == list(e_store.keys())
        for key in e_store.keys():
            _assert_same(a_store[key], e_store[key], key)
        assert getattr(a_store, "_num_nodes", None) == \
            getattr(e_store, "_num_nodes", None)
    _assert_same(actual._slice_dict, expected._slice_dict, "_slice_dict")
    _assert_same(actual._inc_dict, expected._inc_dict, "_inc_dict")


def _assert_same(a: Any, e: Any, where: str) -> None:
    if isinstance(e, torch.Tensor):
        assert isinstance(a, torch.Tensor), where
        assert a.dtype == e.dtype, (where, a.dtype, e.dtype)
        assert a.shape == e.shape, (where, a.shape, e.shape)
        assert torch.equal(a, e), (where, a, e)
    elif isinstance(e, dict):
        assert list(a.keys()) == list(e.keys()), where
        for k in e:
            _assert_same(a[k], e[k], f"{where}[{k}]")
    elif isinstance(e, (list, tuple)):
        assert len(a) == len(e), where
        for i, (x, y) in enumerate(zip(a, e)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == e, (where, a, e)


# -- hypothesis strategies ------------------------------------------------

@st.composite
def homogeneous_graphs(draw: Any, max_graphs: int = 6) -> List[Data]:
    """Random lists of Data with the same attribute layout: node features,
    edges with an edge attribute of random trailing shape, graph-level or
    node-level labels, and optionally an int, a str and a 0-dim attribute.
    """
    num_graphs = draw(st.integers(1, max_graphs))
    num_features = draw(st.integers(1, 3))
    edge_shape = draw(st.sampled_from([None, (), (2,), (2, 3)]))
    label = draw(st.sampled_from([None, "graph", "node"]))
    with_int = draw(st.booleans())
    with_str = draw(st.booleans())
    with_scalar = draw(st.booleans())
    int_x = draw(st.booleans())
    graphs = []
    for i in range(num_graphs):
        n = draw(st.integers(1, 6))
        e = draw(st.integers(0, 8))
        gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
        x = torch.randint(0, 50, (n, num_features), generator=gen) if int_x \
            else torch.randn(n, num_features, generator=gen)
        data = Data(x=x, edge_index=torch.randint(0, n, (2, e),
                                                  generator=gen))
        if edge_shape is not None:
            data.edge_attr = torch.randn((e, *edge_shape), generator=gen)
        if label == "graph":
            data.y = torch.randn(1, 2, generator=gen)
        elif label == "node":
            data.y = torch.randint(0, 3, (n,), generator=gen)
        if with_int:
            data.count = i + 3
        if with_str:
            data.name = f"g{i}"
        if with_scalar:
            data.weight = torch.tensor(float(i))
        graphs.append(data)
    return graphs


@st.composite
def hetero_graphs(draw: Any, max_graphs: int = 4) -> List[HeteroData]:
    """Random lists of HeteroData with node types ``a`` and ``b`` and edge
    types ``a->a``, ``a->b`` (with an edge attribute) and ``b->a``, plus a
    graph-level label on the global store."""
    num_graphs = draw(st.integers(1, max_graphs))
    graphs = []
    for _ in range(num_graphs):
        gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
        data = HeteroData()
        sizes = {"a": draw(st.integers(1, 5)), "b": draw(st.integers(1, 5))}
        data["a"].x = torch.randn(sizes["a"], 3, generator=gen)
        data["b"].x = torch.randn(sizes["b"], 2, generator=gen)
        for src, dst in (("a", "a"), ("a", "b"), ("b", "a")):
            e = draw(st.integers(0, 6))
            store = data[src, "to", dst]
            store.edge_index = torch.stack([
                torch.randint(0, sizes[src], (e,), generator=gen),
                torch.randint(0, sizes[dst], (e,), generator=gen)])
            if (src, dst) == ("a", "b"):
                store.edge_attr = torch.randn(e, 4, generator=gen)
        data.y = torch.randn(1, generator=gen)
        graphs.append(data)
    return graphs
