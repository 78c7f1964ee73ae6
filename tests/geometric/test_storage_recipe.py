"""Batches of storage graphs built from the recipe of an earlier batch
(``_fastpath.recipe``): bit-identical to PyG's batching of the graphs the
dataset hands out, used only where the full path would decide the same,
and stale once the collater's settings change."""
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poptorch_geometric import (FixedSizeCollater, FixedSizeDataLoader,
                                FixedSizeOptions, FixedSizeStrategy)
from poptorch_geometric._fastpath import recipe as recipe_module
from poptorch_geometric._fastpath.graph_cache import CachedGraphs

from ._graphs import InMemoryGraphs as Graphs
from ._graphs import (_assert_same, assert_batches_identical, graph,
                      homogeneous_graphs)


def _graphs(n=10, **extra):
    return [graph(2 + i % 4, 3 + i % 5, y=torch.tensor([float(i)]),
                  seed=i, **extra) for i in range(n)]


def _assert_as_reference(out, expected):
    """``out`` (tensors and counts only) has the reference batch's keys,
    in order, with equal values, dtypes and graph count."""
    assert list(out.keys()) == list(expected.keys())
    for key in expected.keys():
        _assert_same(out[key], expected[key], key)
    assert out.num_graphs == expected.num_graphs


class _Counting:
    """Counts the batches a collater serves from a recipe (``built``) and
    those a fresh recipe declines (``declined``)."""

    def __init__(self, monkeypatch):
        self.built = self.declined = 0
        from_recipe = FixedSizeCollater._from_recipe

        def counted(collater, graphs, bookkeeping):
            fresh = collater._fresh_recipe(graphs) is not None
            out = from_recipe(collater, graphs, bookkeeping)
            self.built += out is not None
            self.declined += fresh and out is None
            return out
        monkeypatch.setattr(FixedSizeCollater, "_from_recipe", counted)


def _collate_all(ds, index_lists, opts, bookkeeping=False, **kwargs):
    """The batches of ``index_lists`` from one collater fed storage lists
    (with the slice bookkeeping of ``__call__`` or without it), and from
    the reference path fed the dataset's graph objects."""
    collater = FixedSizeCollater(opts, **kwargs)
    collate = collater if bookkeeping else collater._tensors_and_counts
    reference = FixedSizeCollater(opts, fast_path=False, **kwargs)
    cached = CachedGraphs(ds)
    return [(collate(cached.__getitems__(indices)),
             reference([ds[i] for i in indices]))
            for indices in index_lists]


def test_later_batches_come_from_the_recipe(monkeypatch):
    counting = _Counting(monkeypatch)
    ds = Graphs(_graphs())
    opts = FixedSizeOptions(num_nodes=30, num_edges=40, num_graphs=6,
                            node_pad_value=-1.0, edge_pad_value=2.0)
    batches = _collate_all(ds, [[0, 5, 2], [9, 1], [3, 4, 7, 8, 6]], opts,
                           add_masks_to_batch=True)
    for out, expected in batches:
        _assert_as_reference(out, expected)
    # The first batch records the recipe; the next two are built from it.
    assert counting.built == 2 and counting.declined == 0


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(graphs=homogeneous_graphs(max_graphs=8), data=st.data(),
       masks=st.booleans(), bookkeeping=st.booleans())
def test_recipe_batches_match_reference(graphs, data, masks, bookkeeping):
    if len(graphs) < 2:
        graphs = graphs * 2  # PyG stores a single graph without slices
    ds = Graphs(graphs)
    index_lists = [data.draw(st.lists(st.integers(0, len(graphs) - 1),
                                      min_size=1, max_size=len(graphs)))
                   for _ in range(3)]
    most_nodes = max(sum(ds[i].num_nodes for i in indices)
                     for indices in index_lists)
    most_edges = max(sum(ds[i].num_edges for i in indices)
                     for indices in index_lists)
    opts = FixedSizeOptions(num_nodes=most_nodes + 2,
                            num_edges=most_edges + 1,
                            num_graphs=len(graphs) + 1,
                            node_pad_value=-1.0, edge_pad_value=-2.0,
                            graph_pad_value=-3.0)
    try:
        batches = _collate_all(ds, index_lists, opts, bookkeeping,
                               add_masks_to_batch=masks)
    except AssertionError as error:  # labels neither per node nor graph
        assert "labels y" in str(error)
        return
    for out, expected in batches:
        if bookkeeping:
            assert_batches_identical(out, expected)
        else:
            _assert_as_reference(out, expected)


def test_graph_level_keys_of_several_rows(monkeypatch):
    counting = _Counting(monkeypatch)
    ds = Graphs(_graphs(pair=torch.arange(6.0).view(2, 3)))
    opts = FixedSizeOptions(num_nodes=30, num_edges=40, num_graphs=6,
                            graph_pad_value=-4.0)
    for out, expected in _collate_all(ds, [[0, 5], [9, 1, 4]], opts):
        assert out.pair.shape == (12, 3)
        _assert_as_reference(out, expected)
    assert counting.built == 1


def test_int32_index_offsets_keep_their_dtype(monkeypatch):
    counting = _Counting(monkeypatch)
    graphs = _graphs()
    for g in graphs:
        g.edge_index = g.edge_index.to(torch.int32)
    ds = Graphs(graphs)
    opts = FixedSizeOptions(num_nodes=30, num_edges=40, num_graphs=6)
    for out, expected in _collate_all(ds, [[0, 5], [9, 1, 4]], opts):
        assert out.edge_index.dtype == torch.int32
        _assert_as_reference(out, expected)
    assert counting.built == 1


def test_non_tensor_keys_are_listed_from_the_graphs(monkeypatch):
    counting = _Counting(monkeypatch)
    graphs = _graphs()
    for i, g in enumerate(graphs):
        g.smiles = "C" * (i + 1)
    ds = Graphs(graphs)
    opts = FixedSizeOptions(num_nodes=30, num_edges=40, num_graphs=6)
    collater = FixedSizeCollater(opts)
    cached = CachedGraphs(ds)
    for indices, defaults in (([3, 1], {}), ([9, 0, 4], {}),
                              ([2, 5], {"smiles": "pad"})):
        opts.pad_graph_defaults = defaults  # read by every batch
        out = collater(cached.__getitems__(indices))
        expected = FixedSizeCollater(opts, fast_path=False)(
            [ds[i] for i in indices])
        assert_batches_identical(out, expected)
        assert out.smiles[len(indices):] == [
            defaults.get("smiles", ds[indices[0]].smiles)] * (
                6 - len(indices))
    assert counting.built == 2


def test_no_recipe_for_a_graph_level_index_key():
    ds = Graphs(_graphs(root_index=torch.tensor([0])))
    opts = FixedSizeOptions(num_nodes=30, num_edges=40, num_graphs=6)
    collater = FixedSizeCollater(opts)
    reference = FixedSizeCollater(opts, fast_path=False)
    cached = CachedGraphs(ds)
    for indices in ([0, 5, 2], [9, 1]):
        out = collater._tensors_and_counts(cached.__getitems__(indices))
        assert collater._recipe is None
        _assert_as_reference(out, reference([ds[i] for i in indices]))


def test_plain_lists_record_nothing():
    ds = Graphs(_graphs())
    collater = FixedSizeCollater(FixedSizeOptions(30, 40, 6))
    collater._tensors_and_counts([ds[0], ds[1]])
    collater([ds[2], ds[3]])
    assert collater._recipe is None


def test_bookkeeping_of_recipe_batches(monkeypatch):
    """``__call__`` keeps the slices and increments that ``get_example``
    and ``to_data_list`` read."""
    counting = _Counting(monkeypatch)
    ds = Graphs(_graphs())
    opts = FixedSizeOptions(num_nodes=30, num_edges=40, num_graphs=6)
    batches = _collate_all(ds, [[0, 5, 2], [9, 1], [3, 4]], opts,
                           bookkeeping=True, add_masks_to_batch=True)
    for out, expected in batches:
        assert_batches_identical(out, expected)
    assert counting.built == 2
    out = batches[1][0]
    assert torch.equal(out.get_example(1).edge_index, ds[1].edge_index)
    assert len(out.to_data_list()) == 6


def _break_values(monkeypatch):
    gather = recipe_module._gather

    def off_by_one(*args):
        value, sizes = gather(*args)
        return value + 1, sizes
    monkeypatch.setattr(recipe_module, "_gather", off_by_one)


def _break_slices(monkeypatch):
    monkeypatch.setattr(recipe_module, "_ptr", lambda sizes: torch.zeros(
        len(sizes) + 1, dtype=torch.long))


def _break_listing(monkeypatch):
    listed = recipe_module._listed

    def reversed_values(*args):
        values, slices, incs = listed(*args)
        return values[::-1], slices, incs
    monkeypatch.setattr(recipe_module, "_listed", reversed_values)


def _break_keys(monkeypatch):
    collate = recipe_module.StorageRecipe.collate

    def extra_key(recipe, graphs, bookkeeping=True):
        out = collate(recipe, graphs, bookkeeping)
        out._store._mapping["extra"] = torch.zeros(1)
        return out
    monkeypatch.setattr(recipe_module.StorageRecipe, "collate", extra_key)


@pytest.mark.parametrize("broken, bookkeeping", [
    (_break_values, False), (_break_values, True), (_break_slices, True),
    (_break_listing, True), (_break_keys, False)])
def test_a_recipe_that_does_not_rebuild_its_batch_is_dropped(
        monkeypatch, broken, bookkeeping):
    graphs = _graphs()
    for i, g in enumerate(graphs):
        g.smiles = "C" * (i + 1)
    ds = Graphs(graphs)
    collater = FixedSizeCollater(FixedSizeOptions(30, 40, 6))
    broken(monkeypatch)
    collate = collater if bookkeeping else collater._tensors_and_counts
    collate(CachedGraphs(ds).__getitems__([0, 1]))
    assert collater._recipe is None


def test_a_recipe_that_declines_its_own_batch_is_not_kept():
    """Real graphs that fill the node and edge budgets exactly need no
    padding node: the full path collates them, a recipe would not."""
    ds = Graphs(_graphs())
    nodes = ds[0].num_nodes + ds[1].num_nodes
    edges = ds[0].num_edges + ds[1].num_edges
    collater = FixedSizeCollater(FixedSizeOptions(nodes, edges, 4))
    out = collater._tensors_and_counts(CachedGraphs(ds).__getitems__([0, 1]))
    assert int(out.ptr[2]) == nodes and collater._recipe is None


def test_node_level_labels_are_served(monkeypatch):
    counting = _Counting(monkeypatch)
    graphs = [graph(2 + i % 4, 3 + i % 5, seed=i,
                    y=torch.arange(2 + i % 4)) for i in range(10)]
    ds = Graphs(graphs)
    opts = FixedSizeOptions(num_nodes=30, num_edges=40, num_graphs=6)
    for out, expected in _collate_all(ds, [[0, 5, 2], [9, 1], [3, 4]],
                                      opts, add_masks_to_batch=True):
        assert out.y.shape == (30,)
        _assert_as_reference(out, expected)
    assert counting.built == 2


def test_a_graph_level_key_sized_like_the_nodes_and_edges(monkeypatch):
    """A batch whose graphs have as many nodes as edges as rows of a
    graph-level key: the full path cannot tell its level from the sizes
    and falls back on PyG's rule; the recipe declines such a batch."""
    counting = _Counting(monkeypatch)
    graphs = [graph(2, 2, seed=i, pair=torch.ones(2, 3) * i)
              for i in range(4)] + [graph(3, 5, seed=9,
                                          pair=torch.ones(2, 3))]
    ds = Graphs(graphs)
    opts = FixedSizeOptions(num_nodes=20, num_edges=20, num_graphs=5)
    collater = FixedSizeCollater(opts)
    reference = FixedSizeCollater(opts, fast_path=False)
    cached = CachedGraphs(ds)
    for indices in ([4, 0], [1, 2, 3]):
        out = collater._tensors_and_counts(cached.__getitems__(indices))
        _assert_as_reference(out, reference([ds[i] for i in indices]))
    assert counting.built == 0 and counting.declined == 1


def test_changed_settings_make_the_recipe_stale(monkeypatch):
    counting = _Counting(monkeypatch)
    ds = Graphs(_graphs())
    cached = CachedGraphs(ds)
    opts = FixedSizeOptions(num_nodes=30, num_edges=40, num_graphs=6)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True)
    collater._tensors_and_counts(cached.__getitems__([0, 1]))
    first = collater._recipe
    assert first is not None
    for change in (lambda: setattr(opts, "num_nodes", 31),
                   lambda: setattr(opts, "node_pad_value", 5.0),
                   lambda: setattr(collater, "add_masks_to_batch", False),
                   lambda: setattr(collater, "exclude_keys", ["edge_attr"])):
        change()
        out = collater._tensors_and_counts(cached.__getitems__([2, 3]))
        expected = FixedSizeCollater(
            opts, add_masks_to_batch=collater.add_masks_to_batch,
            exclude_keys=collater.exclude_keys, fast_path=False)(
                [ds[2], ds[3]])
        _assert_as_reference(out, expected)
        assert collater._recipe is not first  # recorded again
        first = collater._recipe
    # After each change the stale recipe is not asked.
    assert counting.built == 0 and counting.declined == 0


def test_another_storage_is_not_built_from_the_recipe(monkeypatch):
    counting = _Counting(monkeypatch)
    a, b = Graphs(_graphs()), Graphs(_graphs(6, extra_x=torch.ones(1)))
    opts = FixedSizeOptions(num_nodes=30, num_edges=40, num_graphs=6)
    collater = FixedSizeCollater(opts)
    collater._tensors_and_counts(CachedGraphs(a).__getitems__([0, 1]))
    out = collater._tensors_and_counts(CachedGraphs(b).__getitems__([2, 3]))
    _assert_as_reference(out, FixedSizeCollater(opts, fast_path=False)(
        [b[2], b[3]]))
    assert counting.built == 0 and counting.declined == 0


@pytest.mark.parametrize("case", ["overflow", "no_padding_node",
                                  "one_node_graphs", "no_graph_slot"])
def test_batches_the_full_path_decides_otherwise_are_declined(
        monkeypatch, case):
    counting = _Counting(monkeypatch)
    graphs = _graphs() + [graph(1, 1, y=torch.tensor([1.0]), seed=s)
                          for s in range(3)]
    ds = Graphs(graphs)
    cached = CachedGraphs(ds)
    nodes_of = [g.num_nodes for g in graphs]
    opts = FixedSizeOptions(num_nodes=20, num_edges=40, num_graphs=6)
    collater = FixedSizeCollater(opts, trim_nodes=case == "no_padding_node")
    collater._tensors_and_counts(cached.__getitems__([0, 1]))
    recipe = collater._recipe
    if case == "overflow":
        indices = [3, 7, 2, 6, 1]
        assert sum(nodes_of[i] for i in indices) > 20
        with pytest.raises(RuntimeError, match="fixed size"):
            collater._tensors_and_counts(cached.__getitems__(indices))
    elif case == "no_padding_node":  # trimmed to leave one, as in full
        indices = [3, 7, 8, 2, 6]
        assert sum(nodes_of[i] for i in indices) == 20
        out = collater._tensors_and_counts(cached.__getitems__(indices))
        assert int(out.ptr[5]) == 19 and collater.trimmed.nodes == 1
    elif case == "one_node_graphs":  # levels ambiguous: the full path
        indices = [10, 11, 12]
        out = collater._tensors_and_counts(cached.__getitems__(indices))
        # Labels of one-node graphs keep the level of the first batch's.
        reference = FixedSizeCollater(opts, fast_path=False)
        reference([ds[0], ds[1]])
        _assert_as_reference(out, reference([ds[i] for i in indices]))
    else:
        with pytest.raises(RuntimeError, match="cannot create additional"):
            collater._tensors_and_counts(
                cached.__getitems__([10, 11, 12, 0, 1, 9]))
    assert counting.built == 0 and counting.declined == 1
    assert collater._recipe is recipe  # kept for the next batch


def test_loader_epochs_match_pyg_batching(monkeypatch, nci):
    """Two shuffled StreamPack epochs over the real dataset: every batch
    after the first comes from the recipe, and equals PyG's batching."""
    counting = _Counting(monkeypatch)
    dataset = nci[:600]
    sizes = FixedSizeOptions.for_batch_size(dataset, 32)
    loader = FixedSizeDataLoader(
        dataset, batch_size=sizes.num_graphs, fixed_size_options=sizes,
        fixed_size_strategy=FixedSizeStrategy.StreamPack, shuffle=True,
        exclude_keys=["smiles"])
    reference = FixedSizeCollater(sizes, add_masks_to_batch=True,
                                  exclude_keys=["smiles"], fast_path=False)
    indices_of = []
    sampler_iter = type(loader.batch_sampler).__iter__

    def recording(sampler):
        for indices in sampler_iter(sampler):
            indices_of.append(list(indices))
            yield indices
    with mock.patch.object(type(loader.batch_sampler), "__iter__",
                           recording):
        batches = [batch for _ in range(2) for batch in loader]
    assert len(batches) == len(indices_of) > 2
    for indices, batch in zip(indices_of, batches):
        expected = reference([dataset[i] for i in indices])
        for key in expected.keys():
            assert torch.equal(batch[key], expected[key]), key
    assert counting.built == len(batches) - 1
