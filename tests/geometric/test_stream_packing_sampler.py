"""StreamPackingSampler: greedy order-preserving packing, the padding-room
rule, skips that are counted, and its validation."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import RandomSampler
from torch_geometric.data import Data

from poptorch_geometric import StreamPackingSampler
from poptorch_geometric._packing import count_packed_batches


def _dataset(nodes, edges=None):
    edges = edges if edges is not None else [1] * len(nodes)
    return [Data(num_nodes=n, edge_index=torch.zeros(2, e, dtype=torch.long))
            for n, e in zip(nodes, edges)]


def test_spec_example():
    ds = _dataset([3, 5, 2, 4, 6, 1, 3])
    sampler = StreamPackingSampler(ds, max_num_graphs=3, max_num_nodes=9)
    assert list(iter(sampler)) == [[0, 1], [2, 3], [4, 5], [6]]
    assert len(sampler) == 4


def test_defaults_fit_the_largest_graph_in_every_slot():
    sampler = StreamPackingSampler(_dataset([3, 5, 2], [2, 7, 1]), 2)
    assert sampler.max_num_nodes == 10 and sampler.max_num_edges == 14
    assert list(iter(sampler)) == [[0, 1], [2]]


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 12)),
                      min_size=1, max_size=40),
       max_graphs=st.integers(1, 6), node_room=st.integers(0, 25),
       edge_room=st.integers(0, 30), shuffle_seed=st.none() | st.integers(0, 9))
def test_every_sample_once_and_every_batch_fits(sizes, max_graphs, node_room,
                                                edge_room, shuffle_seed):
    nodes, edges = zip(*sizes)
    ds = _dataset(nodes, edges)
    max_nodes, max_edges = max_graphs + node_room, max_graphs + edge_room
    base = None
    if shuffle_seed is not None:
        base = torch.randperm(len(ds), generator=torch.Generator().manual_seed(
            shuffle_seed)).tolist()
    sampler = StreamPackingSampler(ds, max_graphs, max_nodes, max_edges,
                                   base_sampler=base, allow_skip_data=True)
    if all(n - 1 > max_nodes - max_graphs or e - 1 > max_edges - max_graphs
           for n, e in sizes):
        # An epoch without a batch is an error, not an empty epoch.
        with pytest.raises(RuntimeError, match="skipped all"):
            list(sampler)
        return
    batches = [b for b in sampler]
    # The vectorised packer decides exactly as the sample-by-sample one
    # (which datasets with a transform use).
    skipped = []
    assert list(sampler._pack_one_by_one(skipped)) == batches
    assert skipped == sampler.skipped_indices
    order = [i for b in batches for i in b]
    # Every sample exactly once: packed, or skipped and counted.
    assert sorted(order + sampler.skipped_indices) == list(range(len(ds)))
    expected_order = base if base is not None else list(range(len(ds)))
    assert order == [i for i in expected_order
                     if i not in sampler.skipped_indices]
    for i in sampler.skipped_indices:  # skipped only if it never fits
        assert nodes[i] - 1 > max_nodes - max_graphs or \
            edges[i] - 1 > max_edges - max_graphs
    for b in batches:
        n, e = sum(nodes[i] for i in b), sum(edges[i] for i in b)
        assert 0 < len(b) <= max_graphs
        assert max_nodes - n >= max_graphs - len(b)
        assert max_edges - e >= max_graphs - len(b)
    if not sampler.skipped_indices and base is None:
        assert count_packed_batches(np.array(nodes), np.array(edges),
                                    max_graphs, max_nodes, max_edges) == \
            len(batches)


def test_sample_that_never_fits_raises():
    sampler = StreamPackingSampler(_dataset([2, 9, 2]), 2, max_num_nodes=6)
    with pytest.raises(RuntimeError, match="Sample 1 with 9 node"):
        list(iter(sampler))


def test_skipped_samples_are_counted_and_logged(poptorch_log):
    sampler = StreamPackingSampler(_dataset([2, 9, 2]), 2, max_num_nodes=6,
                                   allow_skip_data=True)
    # No look-ahead: the sample that does not fit closes the batch.
    assert list(iter(sampler)) == [[0], [2]]
    assert sampler.skipped_indices == [1] and sampler.num_skipped == 1
    assert "skipped 1 sample(s)" in poptorch_log.text
    # Counting batches does not disturb the epoch's record.
    assert len(sampler) == 2 and sampler.skipped_indices == [1]


def test_len_with_random_base_sampler():
    ds = _dataset([1, 2, 3])
    sampler = StreamPackingSampler(ds, 2, base_sampler=RandomSampler(ds))
    with pytest.raises(NotImplementedError, match="The number of packed "
                       "batches depends on the sample order"):
        len(sampler)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_num_graphs=None), "max_num_graphs must be set"),
    (dict(max_num_graphs=0), "at least 1"),
    (dict(max_num_graphs=3, max_num_nodes=2), "max_num_nodes"),
    (dict(max_num_graphs=3, max_num_edges=2), "max_num_edges"),
    (dict(max_num_graphs=3, base_sampler=[]), "base sampler is empty"),
])
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StreamPackingSampler(_dataset([1, 2]), **kwargs)


def test_shuffled_loader_can_be_listed_although_its_length_is_unknown():
    from poptorch_geometric import FixedSizeOptions, FixedSizeStrategy
    from poptorch_geometric.datasets import SyntheticMolecules
    from poptorch_geometric.pyg_dataloader import FixedSizeDataLoader
    ds = SyntheticMolecules(40)
    opts = FixedSizeOptions.for_packing(ds, graphs_per_batch=8)
    loader = FixedSizeDataLoader(
        ds, batch_size=8, fixed_size_options=opts, shuffle=True,
        fixed_size_strategy=FixedSizeStrategy.StreamPack)
    with pytest.raises(NotImplementedError, match="sample order"):
        len(loader)
    batches = list(loader)
    assert sum(int(b.graphs_mask.sum()) for b in batches) == 40
