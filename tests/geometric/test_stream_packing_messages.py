"""StreamPackingSampler's messages in full (what users read when packing
cannot go on) and its skipped samples, with greedy packing and with a
lookahead, whose code paths differ."""
import re

import pytest

from poptorch_geometric import StreamPackingSampler
from .test_stream_packing_sampler import _dataset
from .test_stream_packing_units import _Transformed


class _Transformed(list):
    transform = staticmethod(lambda data: data)


@pytest.mark.parametrize("make, message", [
    (lambda: StreamPackingSampler([], 2),
     "The dataset is empty: StreamPackingSampler needs at least one sample "
     "to pack."),
    (lambda: StreamPackingSampler(_dataset([1]), 2, base_sampler=[]),
     "The base sampler is empty: StreamPackingSampler needs at least one "
     "sample to pack."),
    (lambda: StreamPackingSampler(_dataset([1]), None),
     "max_num_graphs must be set: the number of graph slots in one packed "
     "batch."),
    (lambda: StreamPackingSampler(_dataset([1]), 3, max_num_nodes=2),
     "max_num_nodes (2) must be at least max_num_graphs (3): every graph "
     "slot needs room for one node."),
    (lambda: StreamPackingSampler(_dataset([1]), 3, max_num_edges=2),
     "max_num_edges (2) must be at least max_num_graphs (3): every graph "
     "slot needs room for one edge."),
    (lambda: StreamPackingSampler(_Transformed(_dataset([1])), 2,
                                  lookahead=4),
     "lookahead packing reads sizes ahead of loading, so they must not "
     "change between accesses, and this dataset has a transform: use "
     "lookahead=0, or apply the transform as a pre_transform."),
] + [
    (lambda bad=bad: StreamPackingSampler(_dataset([1]), 2, lookahead=bad),
     f"lookahead ({bad!r}) must be a non-negative integer (0: greedy "
     "packing).") for bad in (-1, True, 1.5, "4")
])
def test_messages_in_full(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make()


# A dataset with a transform has its sizes read one sample at a time (and
# refuses a lookahead).
@pytest.mark.parametrize("lookahead, transformed",
                         [(0, False), (8, False), (0, True)])
def test_a_sample_that_never_fits_is_named_with_the_budgets(lookahead,
                                                            transformed):
    dataset = _dataset([2, 2, 9, 2], [1, 1, 3, 1])
    if transformed:
        dataset = _Transformed(dataset)
    sampler = StreamPackingSampler(dataset, 2, max_num_nodes=6,
                                   max_num_edges=4, lookahead=lookahead)
    message = ("Sample 2 with 9 node(s) and 3 edge(s) does not fit an empty "
               "batch of at most 2 graph(s), 6 node(s) and 4 edge(s). "
               "Increase the budgets, skip such samples "
               "(allow_skip_data=True, OverSizeStrategy.Skip) or trim them "
               "(trim_oversize=True, OverSizeStrategy.TrimNodesAndEdges).")
    with pytest.raises(RuntimeError, match=f"^{re.escape(message)}$"):
        list(sampler)


@pytest.mark.parametrize("lookahead", [0, 8])
@pytest.mark.parametrize("num_big, shown", [(10, "[0, 2, 4, 6, 8, 10, 12, "
                                                  "14, 16, 18]"),
                                            (11, "[0, 2, 4, 6, 8, 10, 12, "
                                                  "14, 16, 18], ...")])
def test_skipped_samples_are_listed_up_to_ten(poptorch_log, lookahead,
                                              num_big, shown):
    # Big samples at even positions, each followed by one that fits.
    nodes = [9, 2] * num_big
    sampler = StreamPackingSampler(_dataset(nodes), 2, max_num_nodes=6,
                                   allow_skip_data=True, lookahead=lookahead)
    batches = list(sampler)
    kept = sorted(i for batch in batches for i in batch)
    assert kept == list(range(1, 2 * num_big, 2))
    assert sampler.skipped_indices == list(range(0, 2 * num_big, 2))
    assert (f"StreamPackingSampler skipped {num_big} sample(s) this epoch "
            f"that do not fit an empty batch (indices {shown}); increase "
            "the node/edge budgets to keep them.") in poptorch_log.text
    # A new epoch starts a new record.
    list(sampler)
    assert sampler.skipped_indices == list(range(0, 2 * num_big, 2))
