"""StreamPackingSampler details the broader tests leave open: the skip
record of a fresh sampler, the full ``len()`` message for a shuffling base
sampler, a ``RandomSampler`` that draws ``num_samples`` indices, the
one-by-one path taken for datasets with a transform (skip record, log
lines; its error is in test_stream_packing_messages), the exact border of
"fits an empty batch" with a lookahead, sizes read from the dataset once
only, and budgets lowered after an epoch."""
import contextlib
import logging
import re

import pytest
import torch
from torch.utils.data import RandomSampler
from torch_geometric.data import Data

from poptorch_core._logging import logger

from poptorch_geometric import StreamPackingSampler


def _dataset(nodes, edges):
    return [
        Data(num_nodes=n, edge_index=torch.zeros(2, e, dtype=torch.long))
        for n, e in zip(nodes, edges)
    ]


class _Transformed(list):
    """A dataset with a (size-preserving) transform: sizes are read again
    on every access, one sample at a time."""
    transform = staticmethod(lambda data: data)


class _Counting(list):
    """A dataset that counts how often each sample is loaded."""

    def __init__(self, items):
        super().__init__(items)
        self.reads = [0] * len(items)

    def __getitem__(self, idx):
        self.reads[idx] += 1
        return super().__getitem__(idx)


def _fits_empty_batch(num_nodes, num_edges, max_graphs, max_nodes,
                      max_edges):
    """The padding-room rule for a batch holding only this sample: one node
    and one edge must stay free for each of the other graph slots."""
    return (num_nodes + max_graphs - 1 <= max_nodes
            and num_edges + max_graphs - 1 <= max_edges)


@contextlib.contextmanager
def _debug_records():
    """The records of PopTorch's logger, at DEBUG level."""
    records = []

    class _Keep(logging.Handler):

        def emit(self, record):
            records.append(record)

    handler = _Keep(logging.DEBUG)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        logger.setLevel(old_level)
        logger.removeHandler(handler)


def test_a_new_sampler_has_skipped_nothing_yet():
    sampler = StreamPackingSampler(_dataset([2, 3], [1, 1]), 2)
    assert sampler.skipped_indices == []
    assert sampler.num_skipped == 0


def test_len_with_a_random_sampler_says_why_in_full():
    ds = _dataset([2, 3, 4], [1, 1, 1])
    sampler = StreamPackingSampler(ds, 2, base_sampler=RandomSampler(ds))
    message = ("The number of packed batches depends on the sample order, "
               "which a RandomSampler changes every epoch.")
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        len(sampler)


@pytest.mark.parametrize("num_samples", [3, 11])
@pytest.mark.parametrize("lookahead", [0, 4])
def test_random_sampler_with_num_samples_packs_what_it_draws(
        num_samples, lookahead):
    """Packing keeps the base sampler's order: the packed indices, in
    order, are exactly what iterating the same ``RandomSampler`` (same
    seed) yields, ``num_samples`` of them."""
    ds = _dataset([1, 2, 3, 1, 2, 3, 1], [1] * 7)

    def base():
        return RandomSampler(ds, num_samples=num_samples,
                             generator=torch.Generator().manual_seed(3))

    sampler = StreamPackingSampler(ds, 3, max_num_nodes=20,
                                   max_num_edges=20, base_sampler=base(),
                                   lookahead=lookahead)
    packed = [i for batch in sampler for i in batch]
    expected = list(base())
    assert len(expected) == num_samples
    if lookahead:
        assert sorted(packed) == sorted(expected)
    else:
        assert packed == expected


def test_transformed_dataset_records_skipped_samples():
    nodes, edges = [2, 9, 2, 2, 2], [1, 1, 1, 8, 1]
    sampler = StreamPackingSampler(_Transformed(_dataset(nodes, edges)), 2,
                                   max_num_nodes=6, max_num_edges=4,
                                   allow_skip_data=True)
    batches = list(sampler)
    never_fit = [
        i for i, (n, e) in enumerate(zip(nodes, edges))
        if not _fits_empty_batch(n, e, 2, 6, 4)
    ]
    assert sampler.skipped_indices == never_fit == [1, 3]
    assert sorted(i for b in batches for i in b) == [0, 2, 4]


@pytest.mark.parametrize("transformed, lookahead", [(False, 0), (True, 0),
                                                    (False, 4)])
def test_each_skip_is_logged_with_the_sample_and_its_sizes(
        transformed, lookahead):
    """One debug line per skipped sample, on each of the three packing
    paths (sizes cached, sizes read one by one, lookahead)."""
    nodes, edges = [2, 9, 2, 3, 2], [1, 1, 1, 7, 1]
    ds = _dataset(nodes, edges)
    if transformed:
        ds = _Transformed(ds)
    sampler = StreamPackingSampler(ds, 2, max_num_nodes=6, max_num_edges=4,
                                   allow_skip_data=True, lookahead=lookahead)
    with _debug_records() as records:
        for _ in sampler:  # not list(): its len() hint packs once more
            pass
    lines = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert lines == [
        f"StreamPackingSampler skips sample {i} ({nodes[i]} nodes, "
        f"{edges[i]} edges)." for i in sampler.skipped_indices
    ]
    assert sampler.skipped_indices == [1, 3]


@pytest.mark.parametrize("kind", ["nodes", "edges"])
def test_lookahead_skips_exactly_the_samples_past_the_border(kind):
    """A sample that fills an empty batch exactly (leaving one node and one
    edge per other slot) is kept; one more node or edge and it is skipped.
    The skips are decided before the first batch is yielded, so one batch
    is enough to see them."""
    max_graphs, max_nodes, max_edges = 3, 10, 9
    border = (max_nodes if kind == "nodes" else max_edges) - max_graphs + 1
    sizes = [border, border + 1, 1, border + 1, border]
    nodes = sizes if kind == "nodes" else [1] * 5
    edges = sizes if kind == "edges" else [1] * 5
    sampler = StreamPackingSampler(_dataset(nodes, edges), max_graphs,
                                   max_num_nodes=max_nodes,
                                   max_num_edges=max_edges,
                                   allow_skip_data=True, lookahead=4)
    next(iter(sampler))
    expected = [
        i for i in range(5) if not _fits_empty_batch(
            nodes[i], edges[i], max_graphs, max_nodes, max_edges)
    ]
    assert sampler.skipped_indices == expected == [1, 3]


@pytest.mark.parametrize("lookahead", [0, 3])
def test_sizes_are_read_once_even_for_graphs_without_nodes(lookahead):
    """Each sample is loaded once to read its size and never again in later
    epochs, graphs with no nodes included. Greedily, sample 1 (no nodes)
    does not fit after sample 0 (edges), so it is seen again in the next
    window, next to samples not yet read."""
    nodes = [5, 0, 0, 3, 0, 2]
    edges = [2, 4, 1, 2, 0, 1]
    ds = _Counting(_dataset(nodes, edges))
    sampler = StreamPackingSampler(ds, 3, max_num_nodes=7, max_num_edges=6,
                                   lookahead=lookahead)
    first = [batch for batch in sampler]
    if not lookahead:
        assert first[0] == [0]
    assert ds.reads == [1] * len(ds)
    assert [batch for batch in sampler] == first
    assert ds.reads == [1] * len(ds)


def test_budgets_lowered_after_an_epoch_skip_what_no_longer_fits():
    """Once every size is known and fits, epochs skip the per-epoch check;
    budgets changed afterwards are checked again, against the same rule."""
    nodes, edges = [2, 6, 3, 1, 4], [1, 5, 2, 1, 3]
    sampler = StreamPackingSampler(_dataset(nodes, edges), 2,
                                   max_num_nodes=12, max_num_edges=12,
                                   allow_skip_data=True, lookahead=4)
    for _ in range(2):
        assert sorted(i for batch in sampler for i in batch) == \
            list(range(5))
        assert sampler.skipped_indices == []
    sampler.max_num_nodes, sampler.max_num_edges = 6, 9
    kept = sorted(i for batch in sampler for i in batch)
    expected = [i for i in range(5) if not _fits_empty_batch(
        nodes[i], edges[i], 2, 6, 9)]
    assert sampler.skipped_indices == expected == [1]
    assert kept == [0, 2, 3, 4]
    sampler.allow_skip_data = False
    with pytest.raises(RuntimeError):
        list(sampler)
