"""Stream-packing budgets (``FixedSizeOptions.for_packing`` and
``for_batch_size``) against a brute-force reference of their documented
rule, on small hand-picked size lists, and the contracts of the counting
helpers under them (``count_packed_batches``, ``_Sizes.batches``).

The reference packs greedily in dataset order with the padding-room rule
(one node and one edge kept for every free graph slot; one graph slot, node
and edge kept for the padding graph), scans node budgets upwards for the
smallest that needs at most ``B`` batches, and scores budgets by slot
efficiency (real over allocated nodes and edges, the lower of the two).
Everything runs with ``shuffle=False`` and ``lookahead=0`` so that the
reference needs neither the seeded shuffles nor best-fit packing."""
import math
import re

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from poptorch_geometric import FixedSizeOptions, StreamPackingSampler
from poptorch_geometric._packing import _Sizes, count_packed_batches

#: Slot counts ``for_batch_size`` tries without improvement before it stops
#: walking (the search's patience).
_PATIENCE = 8


def _dataset(nodes, edges):
    return [
        Data(num_nodes=n, edge_index=torch.zeros(2, e, dtype=torch.long))
        for n, e in zip(nodes, edges)
    ]


# -- the reference ---------------------------------------------------------


def _greedy_batches(nodes, edges, max_graphs, max_nodes, max_edges):
    """Batches of in-order greedy packing (a batch is closed when the next
    graph would break the padding-room rule), or None when some graph fits
    no batch."""
    batches, count, used_nodes, used_edges = 0, 0, 0, 0
    for n, e in zip(nodes, edges):
        free = max_graphs - count - 1
        if free >= 0 and used_nodes + n + free <= max_nodes and \
                used_edges + e + free <= max_edges:
            count, used_nodes, used_edges = count + 1, used_nodes + n, \
                used_edges + e
            continue
        if n + max_graphs - 1 > max_nodes or e + max_graphs - 1 > max_edges:
            return None
        batches += 1
        count, used_nodes, used_edges = 1, n, e
    return batches + (1 if count else 0)


def _smallest_budgets(nodes, edges, num_graphs, num_batches):
    """``(efficiency, num_nodes, num_edges)``: the smallest node budget
    (at least the largest graph plus one node per other slot; the edge
    budget follows it by the edges-per-node ratio, with the same floor)
    with which packing into ``num_graphs - 1`` real slots needs at most
    ``num_batches`` batches."""
    ratio = sum(edges) / max(sum(nodes), 1)
    min_edges = max(max(edges), 1) + num_graphs - 1
    num_nodes = max(max(nodes), 1) + num_graphs - 1
    while True:
        num_edges = max(math.ceil(ratio * num_nodes), min_edges)
        count = _greedy_batches(nodes, edges, num_graphs - 1, num_nodes - 1,
                                num_edges - 1)
        if count is not None and count <= num_batches:
            break
        num_nodes += 1
    efficiency = min(
        sum(nodes) / (count * num_nodes),
        sum(edges) / (count * num_edges) if sum(edges) else 1.0)
    return efficiency, num_nodes, num_edges


def _reference_for_packing(nodes, edges, num_graphs):
    """Every batch count from the fewest the slots allow to twice that; the
    most efficient budgets, the first on ties."""
    fewest = math.ceil(len(nodes) / (num_graphs - 1))
    best = None
    for num_batches in range(fewest, 2 * fewest + 1):
        candidate = _smallest_budgets(nodes, edges, num_graphs, num_batches)
        if best is None or candidate[0] > best[0]:
            best = candidate
    return best[1], best[2]


def _reference_for_batch_size(nodes, edges, batch_size):
    """Slot counts from the fewest that hold every graph in
    ``ceil(len / batch_size)`` batches up to ``2 * batch_size + 1``, every
    one (small batch sizes), until ``_PATIENCE`` in a row do not improve on
    the best (the first best on ties)."""
    num_batches = math.ceil(len(nodes) / batch_size)
    first = math.ceil(len(nodes) / num_batches) + 1
    best, since_best = None, 0
    for num_graphs in range(first, 2 * batch_size + 2):
        candidate = _smallest_budgets(nodes, edges, num_graphs, num_batches)
        if best is None or candidate[0] > best[0]:
            best, since_best = (*candidate, num_graphs), 0
        else:
            since_best += 1
            if since_best == _PATIENCE:
                break
    return best[3], best[1], best[2]


# -- the budgets -------------------------------------------------------------

# Size lists (nodes, edges) on which the search's details (its bounds, the
# efficiency score, tie-breaking) decide the outcome.
_PACKING_CASES = [
    # mixed edges: both efficiencies count
    ([9, 8, 2, 5], [9, 0, 0, 7], 3),
    # few edges, so the edge budget must grow with the node budget
    ([8, 8, 7, 6, 2, 3, 2, 8], [0, 0, 0, 0, 4, 9, 11, 6], 3),
    # a graph without nodes and more slots than graphs
    ([0, 2], [0, 4], 4),
    ([5, 5, 3, 7, 2, 1, 5, 3, 9, 7], [0, 0, 0, 0, 4, 0, 12, 0, 6, 8], 5),
    # equally efficient budgets for several batch counts
    ([5, 8, 9, 9, 9, 3, 4, 6], [12, 0, 0, 11, 0, 12, 0, 0], 5),
    # no edges at all: only the node efficiency counts
    ([9, 8, 2, 5], [0, 0, 0, 0], 3),
    ([4, 6, 3, 4, 6, 4, 8, 4, 8], [0] * 9, 5),
]


@pytest.mark.parametrize("nodes, edges, num_graphs", _PACKING_CASES)
def test_for_packing_matches_the_documented_rule(nodes, edges, num_graphs):
    opts = FixedSizeOptions.for_packing(_dataset(nodes, edges), num_graphs,
                                        shuffle=False, lookahead=0)
    assert opts.num_graphs == num_graphs
    assert (opts.num_nodes, opts.num_edges) == \
        _reference_for_packing(nodes, edges, num_graphs)


_BATCH_SIZE_CASES = [
    ([9, 8, 2, 5], [9, 0, 0, 7], 2),
    # one graph per step: the walk reaches its last slot count
    ([0, 0, 8, 3], [0, 0, 0, 2], 1),
    ([4, 3, 8, 0, 0, 2], [0, 0, 0, 0, 12, 5], 4),
    # Longer walks (skewed sizes) whose efficiency improves again after
    # 9 (here), 8 or fewer slot counts without improvement.
    ([1, 1, 7, 1, 1, 2, 1, 1, 1, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 10,
      1], [0, 1, 0, 3, 0, 0, 0, 6, 0, 1, 0, 4, 10, 0, 11, 12, 0, 0, 12, 12,
           0, 1, 0, 0], 11),
    ([1, 1, 2, 2, 2, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
     [0, 0, 0, 0, 2, 0, 0, 11, 0, 0, 11, 0, 0, 10, 0, 3, 0], 14),
    ([5, 1, 4, 1, 1, 3, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 6, 2, 14, 2, 1, 6,
      33, 16, 2, 7, 2, 3, 1, 2, 1, 1], [0] * 33, 12),
    ([1, 4, 2, 1, 2, 8, 2, 3, 1, 2, 1, 4, 11, 2, 2, 1, 4, 2, 59, 10, 1, 1, 1,
      2, 1, 1, 1], [0, 0, 5, 2, 0, 0, 0, 0, 1, 0, 10, 11, 8, 0, 0, 0, 1, 5,
                    0, 8, 2, 4, 2, 9, 7, 3, 3], 9),
]


@pytest.mark.parametrize("nodes, edges, batch_size", _BATCH_SIZE_CASES)
def test_for_batch_size_matches_the_documented_rule(nodes, edges,
                                                    batch_size):
    opts = FixedSizeOptions.for_batch_size(_dataset(nodes, edges),
                                           batch_size, shuffle=False,
                                           lookahead=0)
    expected = _reference_for_batch_size(nodes, edges, batch_size)
    assert (opts.num_graphs, opts.num_nodes, opts.num_edges) == expected
    # As many steps as PyG's DataLoader(batch_size) takes, at most.
    assert _greedy_batches(nodes, edges, opts.num_graphs - 1,
                           opts.num_nodes - 1, opts.num_edges - 1) <= \
        math.ceil(len(nodes) / batch_size)


def test_sizes_stored_as_small_unsigned_ints():
    """Graphs whose ``num_nodes``/``num_edges`` are NumPy ``uint8`` (as
    read from compact storage), some of them zero, get the budgets their
    Python-int sizes get (no wrap-around below zero)."""
    nodes, edges = [3, 0, 5, 2, 4, 0], [2, 0, 6, 1, 0, 3]
    compact = [
        Data(num_nodes=np.uint8(n),
             edge_index=torch.zeros(2, e, dtype=torch.long),
             num_edges=np.uint8(e)) for n, e in zip(nodes, edges)
    ]
    packing = FixedSizeOptions.for_packing(compact, 3, shuffle=False,
                                           lookahead=0)
    assert (packing.num_nodes, packing.num_edges) == \
        _reference_for_packing(nodes, edges, 3)
    by_size = FixedSizeOptions.for_batch_size(compact, 2, shuffle=False,
                                              lookahead=0)
    assert (by_size.num_graphs, by_size.num_nodes, by_size.num_edges) == \
        _reference_for_batch_size(nodes, edges, 2)


def test_for_packing_where_packing_is_not_monotone_in_the_budget():
    """Greedy packing of these graphs needs 2 batches with 22 nodes, 3 with
    23 and 2 again with 24. The bisection may then return a larger budget
    than the smallest (documented), but never one that needs more
    batches than the documented rule's."""
    nodes, edges = [1, 4, 9, 8, 6, 1, 5], [0, 9, 0, 0, 0, 8, 8]
    opts = FixedSizeOptions.for_packing(_dataset(nodes, edges), 5,
                                        shuffle=False, lookahead=0)
    ref_nodes, ref_edges = _reference_for_packing(nodes, edges, 5)
    assert opts.num_nodes >= ref_nodes
    assert _greedy_batches(nodes, edges, 4, opts.num_nodes - 1,
                           opts.num_edges - 1) == \
        _greedy_batches(nodes, edges, 4, ref_nodes - 1, ref_edges - 1)


# -- the counting helpers ---------------------------------------------------


@pytest.mark.parametrize("lookahead", [0, 4])
def test_count_is_none_for_budgets_below_one_node_per_slot(lookahead):
    """Budgets with fewer nodes than graph slots, which StreamPackingSampler
    refuses, fit nothing, even graphs without nodes."""
    nodes, edges = np.array([0, 0]), np.array([1, 1])
    with pytest.raises(ValueError,
                       match=re.escape("max_num_nodes (1) must be at least "
                                       "max_num_graphs (2)")):
        StreamPackingSampler(_dataset(nodes.tolist(), edges.tolist()), 2,
                             max_num_nodes=1, max_num_edges=4)
    assert count_packed_batches(nodes, edges, 2, 1, 4,
                                lookahead=lookahead) is None


@pytest.mark.parametrize("lookahead", [0, 4])
def test_count_stopped_early_is_still_a_count(lookahead):
    """Counting may stop once past ``stop_after``, but it returns a count
    past it (None only means that a graph fits no batch)."""
    nodes, edges = np.full(10, 5), np.full(10, 1)  # one graph per batch
    full = count_packed_batches(nodes, edges, 2, 7, 4, lookahead=lookahead)
    assert full == 10
    stopped = count_packed_batches(nodes, edges, 2, 7, 4,
                                   lookahead=lookahead, stop_after=3)
    assert stopped is not None and 3 < stopped <= full
    sizes = _Sizes(nodes, edges, lookahead, shuffle=False)
    assert sizes.batches(2, 7, 4) == full
    stopped = sizes.batches(2, 7, 4, stop_after=3)
    assert stopped is not None and 3 < stopped <= full


def test_the_budget_search_packs_each_budget_once(monkeypatch):
    """Budgets checked to the end are remembered; a count stopped early is
    not taken for the whole one."""
    import poptorch_geometric._packing as packing
    nodes, edges = np.full(10, 5), np.full(10, 1)  # one graph per batch
    sizes = _Sizes(nodes, edges, 0, shuffle=True)
    passes = []
    real = packing.count_packed_batches

    def counted(*args, **kwargs):
        passes.append(args[2:5])
        return real(*args, **kwargs)

    monkeypatch.setattr(packing, "count_packed_batches", counted)
    stopped = sizes.batches(2, 7, 4, stop_after=3)
    assert stopped is not None and 3 < stopped <= 10
    assert sizes.batches(2, 7, 4) == 10  # counted again, to the end
    checked = len(passes)
    assert sizes.batches(2, 7, 4) == 10
    assert sizes.batches(2, 7, 4, stop_after=3) == 10
    assert len(passes) == checked


def test_a_long_budget_search_shows_progress(monkeypatch, capsys):
    import poptorch_geometric._packing as packing
    ds = _dataset([5, 3, 7, 2, 4, 6, 1, 2], [4, 2, 6, 0, 3, 5, 0, 1])
    monkeypatch.setattr(packing, "PROGRESS_DELAY_S", 0.0)
    FixedSizeOptions.for_packing(ds, 3, shuffle=False)
    FixedSizeOptions.for_batch_size(ds, 2, shuffle=False)
    err = capsys.readouterr().err
    assert "Packing budgets (batch counts)" in err
    assert "Packing budgets (graph slots)" in err
    # A quick search (the default delay) shows nothing.
    monkeypatch.setattr(packing, "PROGRESS_DELAY_S", 2.0)
    FixedSizeOptions.for_packing(ds, 3, shuffle=False)
    assert "Packing budgets" not in capsys.readouterr().err
