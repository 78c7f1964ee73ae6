"""Collation that reads an InMemoryDataset's storage (``_storage``): which
datasets and keys it serves, and batches bit-identical to PyG's batching of
the graph objects the dataset hands out."""
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch.utils.data import Subset, random_split
from torch_geometric.data import Data, HeteroData

from poptorch_geometric import (CombinedBatchingCollater, FixedSizeCollater,
                                FixedSizeDataLoader, FixedSizeOptions,
                                FixedSizeStrategy)
from poptorch_geometric._padding.columns import Columns
from poptorch_geometric._fastpath.storage_columns import StorageColumns
from poptorch_geometric._fastpath.graph_cache import (CachedGraphs, GraphList,
                                             cached_graphs)
from poptorch_geometric._fastpath.storage import GraphStorage

from ._graphs import InMemoryGraphs as Graphs
from ._graphs import (assert_batches_identical, fast_path_only, graph,
                      homogeneous_graphs)


class OwnGet(Graphs):
    def get(self, idx):
        data = super().get(idx)
        data.x = data.x + 1
        return data


def _graphs(n=6):
    return [graph(2 + i % 3, 3 + i % 4, y=torch.tensor([float(i)]), seed=i)
            for i in range(n)]


def test_storage_of_plain_in_memory_dataset():
    ds = Graphs(_graphs() + [graph(2, 2, y=torch.tensor([0.0]))])
    storage = GraphStorage.of(ds)
    for key in ("x", "edge_index", "edge_attr", "y"):
        assert storage.serves(key)
    assert storage.cat_dim("edge_index") == 1
    assert storage.serves("edge_index", -1) and \
        not storage.serves("edge_index", 0)
    # edge_index and edge_attr have equal slices: one gather index.
    assert storage.group("edge_attr") == storage.group("edge_index")
    rows = storage.positions([4, 1, 6])
    for key in ("x", "edge_index", "edge_attr", "y"):
        dim = storage.cat_dim(key)
        sizes = storage.sizes(key, rows)
        assert sizes.tolist() == [ds[i][key].shape[dim] for i in (4, 1, 6)]
        gathered = storage.gather(key, storage.gather_index(key, rows, sizes))
        assert torch.equal(gathered, torch.cat([ds[i][key] for i in (4, 1, 6)],
                                               dim=dim))


def test_storage_of_subset_maps_indices_to_rows():
    ds = Graphs(_graphs(8))
    subset = ds[torch.tensor([7, 2, 5])]
    storage = GraphStorage.of(subset)
    assert storage.positions([0, 2]).tolist() == [7, 5]


def test_storage_sees_through_subsets():
    """``random_split`` wraps datasets in ``Subset``: rows compose."""
    ds = Graphs(_graphs(8))[torch.tensor([7, 6, 5, 4, 3, 2])]
    inner = Subset(ds, [5, 0, 2, 3])
    outer = Subset(inner, [3, 1])
    storage = GraphStorage.of(outer)
    # outer[0] = inner[3] = ds[3] = row 4; outer[1] = inner[1] = ds[0] = 7
    assert storage.positions([0, 1]).tolist() == [4, 7]
    cached = cached_graphs(outer)
    assert isinstance(cached, CachedGraphs)
    fetched = cached.__getitems__([1, 0])
    assert isinstance(Columns.of(fetched), StorageColumns)
    assert torch.equal(fetched[0].x, ds[0].x)
    assert fetched.positions.tolist() == [7, 4]
    with_transform = Graphs(_graphs(), transform=lambda d: d)
    assert cached_graphs(Subset(with_transform, [0, 1])) is not None
    assert not isinstance(cached_graphs(Subset(with_transform, [0, 1])),
                          CachedGraphs)


@pytest.mark.parametrize("make", [
    lambda: Graphs(_graphs(), transform=lambda d: d),
    lambda: OwnGet(_graphs()),
    lambda: Graphs(_graphs(1)),  # one graph: PyG keeps no slices
    lambda: _graphs(),
])
def test_no_storage_where_graphs_are_not_storage_slices(make):
    assert GraphStorage.of(make()) is None


def test_hetero_storage_is_not_served():
    graphs = []
    for n in (2, 3):
        data = HeteroData()
        data["a"].x = torch.ones(n, 2)
        graphs.append(data)
    assert GraphStorage.of(Graphs(graphs)) is None


def test_non_tensor_keys_are_read_from_the_graphs():
    graphs = _graphs()
    for i, g in enumerate(graphs):
        g.name, g.count, g.weight = f"g{i}", i, torch.tensor(float(i))
    ds = Graphs(graphs)
    storage = GraphStorage.of(ds)
    assert not storage.serves("name")
    # PyG stores ints and 0-dim tensors as one tensor and hands out
    # one-element slices of it: those are served.
    assert ds[2].count.shape == (1,) and storage.serves("count")
    cached = CachedGraphs(ds)
    batch = cached.__getitems__([3, 0, 4])
    opts = FixedSizeOptions(num_nodes=20, num_edges=30, num_graphs=5)
    with fast_path_only():
        out = FixedSizeCollater(opts, add_masks_to_batch=True)(batch)
    expected = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 fast_path=False)([ds[i] for i in (3, 0, 4)])
    assert_batches_identical(out, expected)
    assert out.name[:3] == ["g3", "g0", "g4"]


def test_cached_graphs_fetch_batches_with_their_storage_rows():
    ds = Graphs(_graphs(8))
    cached = CachedGraphs(ds[torch.tensor([6, 1, 3, 0])])
    batch = cached.__getitems__([2, 0])
    assert isinstance(batch, GraphList)
    assert batch.positions.tolist() == [3, 6]
    assert batch[0] is cached[2]
    assert isinstance(Columns.of(batch), StorageColumns)
    # Contiguous slices keep the tags (combined batching slices lists).
    assert batch[1:].positions.tolist() == [6]
    assert type(batch[::2]) is list
    # Without a storage the fetch is a plain list.
    plain = CachedGraphs(Graphs(_graphs(), transform=lambda d: d))
    assert type(plain.__getitems__([0, 1])) is list


def test_cached_graphs_hand_out_each_graph_built_once():
    ds = Graphs(_graphs(5))
    cached = CachedGraphs(ds)
    first = cached.__getitems__([3, 1])          # builds two of five
    rest = cached.__getitems__([0, 2, 4, 1])     # builds the other three
    again = cached.__getitems__([4, 3, 2, 1, 0])  # all built: lookups only
    assert again[1] is first[0] and again[3] is first[1]
    assert again[0] is rest[2] and again[4] is rest[0]
    for index, graph in zip([4, 3, 2, 1, 0], again):
        assert torch.equal(graph.x, ds[index].x)
        assert torch.equal(graph.edge_index, ds[index].edge_index)


@pytest.mark.parametrize("limit", [None, 0])
def test_padded_gather_and_fill_in_place_give_the_same_batch(
        monkeypatch, limit):
    # A storage tensor within the limit gets a padded copy (one gather per
    # batch tensor); over it, the padding is filled into the batch.
    import poptorch_geometric._fastpath.storage as storage_module
    if limit is not None:
        monkeypatch.setattr(storage_module, "PADDED_COPY_BYTES", limit)
    ds = Graphs(_graphs(8))
    indices = [6, 1, 3]
    opts = FixedSizeOptions(num_nodes=16, num_edges=20, num_graphs=5,
                            node_pad_value=-1.5, edge_pad_value=7,
                            graph_pad_value=-3.0)
    with fast_path_only():
        out = FixedSizeCollater(opts, add_masks_to_batch=True)(
            CachedGraphs(ds).__getitems__(indices))
    expected = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 fast_path=False)([ds[i] for i in indices])
    assert_batches_identical(out, expected)
    storage = GraphStorage.of(ds)
    padded = storage.padded("x", -1.5)
    if limit == 0:
        assert padded is None
        return
    assert padded is storage.padded("x", -1.5)  # made once
    assert torch.equal(padded[:-1], ds._data.x)
    assert torch.equal(padded[-1], torch.full_like(ds._data.x[0], -1.5))
    # 0 and False fill alike but are kept apart.
    assert storage.padded("y", 0) is not storage.padded("y", False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int32,
                                   torch.bool])
def test_padded_gather_of_every_dtype(dtype):
    # NumPy gathers the dtypes it can view; bfloat16 is index_select's.
    graphs = _graphs(6)
    for g in graphs:
        g.x = (g.x * 3).to(dtype)
    ds = Graphs(graphs)
    opts = FixedSizeOptions(num_nodes=14, num_edges=20, num_graphs=4,
                            node_pad_value=1)
    with fast_path_only():
        out = FixedSizeCollater(opts)(CachedGraphs(ds).__getitems__(
            [4, 0, 2]))
    expected = FixedSizeCollater(opts, fast_path=False)(
        [ds[i] for i in (4, 0, 2)])
    assert out.x.dtype == dtype
    assert_batches_identical(out, expected)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(graphs=homogeneous_graphs(max_graphs=8), data=st.data(),
       follow=st.booleans())
def test_storage_batches_match_reference(graphs, data, follow):
    assume(len(graphs) > 1)  # PyG stores a single graph without slices
    ds = Graphs(graphs)
    order = data.draw(st.permutations(range(len(graphs))))
    indices = order[:data.draw(st.integers(1, len(graphs)))]
    # Ambiguous labels are covered by the collater's own tests.
    assume("y" not in graphs[0] or
           any(graphs[i].num_nodes > 1 for i in indices))
    fetched = CachedGraphs(ds).__getitems__(indices)
    assert isinstance(Columns.of(fetched), StorageColumns)
    real_nodes = sum(ds[i].num_nodes for i in indices)
    real_edges = sum(ds[i].num_edges for i in indices)
    opts = FixedSizeOptions(num_nodes=real_nodes + 3,
                            num_edges=real_edges + 2,
                            num_graphs=len(indices) + 2,
                            node_pad_value=-1.0, edge_pad_value=-2.0,
                            graph_pad_value=-3.0)
    follow_batch = ["x"] if follow else None
    with fast_path_only():
        out = FixedSizeCollater(opts, add_masks_to_batch=True,
                                follow_batch=follow_batch)(fetched)
    expected = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 follow_batch=follow_batch, fast_path=False)(
        [ds[i] for i in indices])
    assert_batches_identical(out, expected)


@pytest.mark.parametrize("follow_batch", [None, ["x"]])
def test_combined_batching_keeps_the_storage_path(follow_batch):
    # The combined collater asks the fast path for tensors and counts only
    # (no slice bookkeeping, unless follow_batch needs the slices): the
    # combined batch must still be the one PyG's batching gives, key for
    # key and count for count.
    ds = Graphs(_graphs(8))
    fetched = CachedGraphs(ds).__getitems__([5, 2, 7, 1])
    opts = FixedSizeOptions(num_nodes=12, num_edges=16, num_graphs=3)

    def combined(fast_path):
        return CombinedBatchingCollater(
            FixedSizeCollater(opts, add_masks_to_batch=True,
                              follow_batch=follow_batch,
                              fast_path=fast_path), mini_batch_size=2)

    with fast_path_only():
        out = combined(True)(fetched)
    plain = combined(False)([ds[i] for i in (5, 2, 7, 1)])
    assert list(out.keys()) == list(plain.keys())
    assert "x_batch" in out.keys() or not follow_batch
    for key in plain.keys():
        if torch.is_tensor(plain[key]):
            assert torch.equal(out[key], plain[key]), key
    assert (out.num_graphs, out.num_nodes, out.num_edges) == \
        (plain.num_graphs, plain.num_nodes, plain.num_edges) == (3, 12, 16)


def _assert_loader_matches_pyg_batching(dataset):
    """Every batch of a StreamPack epoch over ``dataset`` read from its
    storage equals PyG's batching of the graphs the dataset hands out."""
    sizes = FixedSizeOptions.for_batch_size(dataset, 32)
    loader = FixedSizeDataLoader(
        dataset, batch_size=sizes.num_graphs, fixed_size_options=sizes,
        fixed_size_strategy=FixedSizeStrategy.StreamPack,
        exclude_keys=["smiles"])
    assert loader.dataset._storage is not None
    reference = FixedSizeCollater(sizes, add_masks_to_batch=True,
                                  exclude_keys=["smiles"], fast_path=False)
    seen = 0
    for indices, batch in zip(loader.batch_sampler, loader):
        expected = reference([dataset[i] for i in indices])
        for key in expected.keys():
            assert torch.equal(batch[key], expected[key]), key
        seen += len(indices)
    assert seen == len(dataset)


def test_loader_over_a_random_split_matches_pyg_batching(nci):
    train, _ = random_split(nci[:400], [300, 100],
                            generator=torch.Generator().manual_seed(0))
    _assert_loader_matches_pyg_batching(train)


def test_loader_over_nci_matches_pyg_batching(nci):
    """A shuffled subset of the real dataset (``index_select``)."""
    _assert_loader_matches_pyg_batching(
        nci[torch.randperm(len(nci),
                           generator=torch.Generator().manual_seed(0))[:300]])
