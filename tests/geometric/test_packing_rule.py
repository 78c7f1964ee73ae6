"""The packing budgets against a brute-force search written from the rule
that ``FixedSizeOptions.for_packing`` documents, for PopTorch's greedy
packing (``lookahead=0``) in the dataset's order (``shuffle=False``):
next-fit packing, each batch leaving one node and one edge for every free
graph slot and at least one slot for the padding graph; the edge budget
follows the node budget by the dataset's edges-per-node ratio; for each
batch count B from the fewest the graph slots allow to twice that, the
smallest node budget that packs into B batches; the B with the highest slot
efficiency wins, the first on ties."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from poptorch_geometric import FixedSizeOptions, StreamPackingSampler
from poptorch_geometric import _packing
from poptorch_geometric.datasets import SyntheticMolecules


def _batches(sizes, num_graphs, num_nodes, num_edges):
    """Next-fit batches of ``sizes`` ((nodes, edges) per graph), or None
    when a graph fits no batch."""
    def fits(batch):
        free = num_graphs - len(batch)
        return free >= 1 and \
            sum(n for n, _ in batch) + free <= num_nodes and \
            sum(e for _, e in batch) + free <= num_edges

    count, batch = 0, []
    for size in sizes:
        if fits(batch + [size]):
            batch.append(size)
        elif not fits([size]):
            return None
        else:
            count, batch = count + 1, [size]
    return count + (1 if batch else 0)


def _seeded_shuffles(sizes, count=6):
    """The orders ``shuffle=True`` searches budgets with: six permutations
    drawn from ``np.random.default_rng(0)`` (and confirms them with: the
    first thirty)."""
    rng = np.random.default_rng(0)
    return [[sizes[i] for i in rng.permutation(len(sizes))]
            for _ in range(count)]


def _most_batches(orders, num_graphs, num_nodes, num_edges, count=_batches):
    """The most batches any order needs (None: a graph fits no batch)."""
    counts = [count(order, num_graphs, num_nodes, num_edges)
              for order in orders]
    return None if None in counts else max(counts)


def _edge_budget(sizes, num_graphs):
    """The edge budget for a node budget: the dataset's edges per node
    times it, at least the largest graph's edges plus one per other slot."""
    ratio = sum(e for _, e in sizes) / max(sum(n for n, _ in sizes), 1)
    min_edges = max(max(e for _, e in sizes), 1) + num_graphs - 1
    return lambda num_nodes: max(math.ceil(ratio * num_nodes), min_edges)


def _tightest(sizes, orders, num_graphs, target, count=_batches):
    """``(efficiency, num_nodes, num_edges)``: the smallest node budget
    (edges following by the ratio) that packs every order into at most
    ``target`` batches. Every budget holds the largest graph plus one node
    and edge per other slot, and at least one node and edge per slot (the
    sampler's own minimum)."""
    total_n = sum(n for n, _ in sizes)
    total_e = sum(e for _, e in sizes)
    min_nodes = max(max(n for n, _ in sizes), 1) + num_graphs - 1
    edge_budget = _edge_budget(sizes, num_graphs)
    num_nodes = max(min_nodes, math.ceil(total_n / target))
    while True:
        batches = _most_batches(orders, num_graphs, num_nodes,
                                edge_budget(num_nodes), count)
        if batches is not None and batches <= target:
            break
        num_nodes += 1
    num_edges = edge_budget(num_nodes)
    efficiency = min(total_n / (batches * num_nodes),
                     total_e / (batches * num_edges) if total_e else 1.0)
    return efficiency, num_nodes, num_edges


def _confirmed(sizes, num_graphs, target, num_nodes, count=_batches):
    """``(num_nodes, num_edges)``: the node budget raised to the smallest
    with which all thirty seeded shuffles pack into ``target`` batches."""
    orders = _seeded_shuffles(sizes, 30)
    edge_budget = _edge_budget(sizes, num_graphs)
    while True:
        batches = _most_batches(orders, num_graphs, num_nodes,
                                edge_budget(num_nodes), count)
        if batches is not None and batches <= target:
            return num_nodes, edge_budget(num_nodes)
        num_nodes += 1


def _brute_force_budgets(sizes, num_graphs, orders=None, count=_batches):
    """The best batch count's budgets; with ``orders`` (shuffles) raised
    to fit the thirty confirming shuffles."""
    fewest = math.ceil(len(sizes) / (num_graphs - 1))
    best = None
    for target in range(fewest, 2 * fewest + 1):
        candidate = _tightest(sizes, orders or [sizes], num_graphs, target,
                              count)
        if best is None or candidate[0] > best[0]:
            best = (*candidate, target)
    if orders:
        return _confirmed(sizes, num_graphs, best[3], best[1], count)
    return best[1], best[2]


@pytest.mark.parametrize("seed,num_graphs", [(0, 4), (1, 5), (2, 3)])
def test_for_packing_matches_the_brute_force_rule(seed, num_graphs):
    dataset = SyntheticMolecules(40, seed=seed)
    sizes = [(g.num_nodes, g.num_edges) for g in dataset]
    opts = FixedSizeOptions.for_packing(dataset, graphs_per_batch=num_graphs,
                                        shuffle=False, lookahead=0)
    assert (opts.num_nodes, opts.num_edges) == \
        _brute_force_budgets(sizes, num_graphs)
    assert opts.num_graphs == num_graphs


@pytest.mark.parametrize("seed,num_graphs", [(3, 4), (4, 3)])
def test_for_packing_with_shuffle_matches_the_brute_force_rule(seed,
                                                               num_graphs):
    """Budgets that hold for every one of the seeded shuffles, however
    many batches the dataset's own order would need."""
    dataset = SyntheticMolecules(30, seed=seed)
    sizes = [(g.num_nodes, g.num_edges) for g in dataset]
    opts = FixedSizeOptions.for_packing(dataset, graphs_per_batch=num_graphs,
                                        shuffle=True, lookahead=0)
    assert (opts.num_nodes, opts.num_edges) == _brute_force_budgets(
        sizes, num_graphs, orders=_seeded_shuffles(sizes))


@pytest.mark.parametrize("count,num_graphs,seed", [(600, 64, 11),
                                                   (500, 48, 13)])
def test_for_packing_stops_at_the_efficiency_bound(monkeypatch, count,
                                                   num_graphs, seed):
    """With large batches the search stops walking batch counts once no
    later count can be more efficient, and still finds the budgets of the
    search over every count."""
    dataset = SyntheticMolecules(count, seed=seed)
    sizes = [(g.num_nodes, g.num_edges) for g in dataset]
    tried = []
    tightest = _packing._tightest_budgets
    monkeypatch.setattr(_packing, "_tightest_budgets",
                        lambda *args: tried.append(args[5]) or
                        tightest(*args))
    opts = FixedSizeOptions.for_packing(dataset, graphs_per_batch=num_graphs,
                                        shuffle=False, lookahead=0)
    assert (opts.num_nodes, opts.num_edges) == \
        _brute_force_budgets(sizes, num_graphs)
    fewest = math.ceil(count / (num_graphs - 1))
    assert tried == list(range(fewest, fewest + len(tried)))
    assert len(tried) < fewest + 1


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 20)),
                      min_size=1, max_size=40),
       num_graphs=st.integers(2, 9), extra_nodes=st.integers(0, 40))
def test_efficiency_bound_holds_for_any_budget(sizes, num_graphs,
                                               extra_nodes):
    """No node budget (edges following by the ratio) that packs the graphs
    into B batches fills more of its slots than the bound for B."""
    edge_budget = _edge_budget(sizes, num_graphs)
    num_nodes = max(n for n, _ in sizes) + num_graphs - 1 + extra_nodes
    num_edges = edge_budget(num_nodes)
    batches = _batches(sizes, num_graphs, num_nodes, num_edges)
    total_n = sum(n for n, _ in sizes)
    total_e = sum(e for _, e in sizes)
    efficiency = min(total_n / (batches * num_nodes),
                     total_e / (batches * num_edges) if total_e else 1.0)
    bound = _packing._efficiency_bound(
        np.array([n for n, _ in sizes]), np.array([e for _, e in sizes]),
        num_graphs, batches)
    assert efficiency <= bound + 1e-12


def test_for_packing_is_reproducible_with_shuffle():
    dataset = SyntheticMolecules(30, seed=5)
    first = FixedSizeOptions.for_packing(dataset, 4, shuffle=True)
    second = FixedSizeOptions.for_packing(dataset, 4, shuffle=True)
    assert (first.num_nodes, first.num_edges) == \
        (second.num_nodes, second.num_edges)


def _sized(sizes):
    return [Data(num_nodes=n, edge_index=torch.zeros(2, e, dtype=torch.long))
            for n, e in sizes]


def _sampler_batches(lookahead):
    """Batches the loader's own sampler makes (with ``lookahead``), or None
    when a graph fits no batch."""
    def count(sizes, num_graphs, num_nodes, num_edges):
        if any(n + num_graphs - 1 > num_nodes or e + num_graphs - 1 >
               num_edges for n, e in sizes):
            return None
        return sum(1 for _ in StreamPackingSampler(
            _sized(sizes), max_num_graphs=num_graphs - 1,
            max_num_nodes=num_nodes - 1, max_num_edges=num_edges - 1,
            lookahead=lookahead))
    return count


def test_for_packing_with_lookahead_matches_the_sampler():
    """With a lookahead the budgets are the smallest with which the
    loader's sampler (topping batches up from the next samples) packs
    into B batches, and they differ from greedy packing's here."""
    dataset = SyntheticMolecules(24, seed=6)
    sizes = [(g.num_nodes, g.num_edges) for g in dataset]
    opts = FixedSizeOptions.for_packing(dataset, graphs_per_batch=4,
                                        shuffle=False, lookahead=8)
    expected = _brute_force_budgets(sizes, 4, count=_sampler_batches(8))
    assert (opts.num_nodes, opts.num_edges) == expected
    assert expected != _brute_force_budgets(sizes, 4)


@pytest.mark.parametrize("sizes", [
    [(3, 0), (4, 0), (2, 0), (5, 0), (1, 0), (3, 0)],  # no edges at all
    [(1, 2)],  # one graph of one node
    [(1, 0), (1, 0), (1, 0)],
])
def test_for_packing_of_degenerate_datasets(sizes):
    """Edgeless graphs (point clouds) and single-node graphs: the budgets
    follow the rule and the loader's sampler accepts them (it needs at
    least one node and one edge per graph slot)."""
    opts = FixedSizeOptions.for_packing(_sized(sizes), graphs_per_batch=3,
                                        shuffle=False, lookahead=0)
    assert (opts.num_nodes, opts.num_edges) == \
        _brute_force_budgets(sizes, 3)
    packed = list(StreamPackingSampler(
        _sized(sizes), max_num_graphs=2, max_num_nodes=opts.num_nodes - 1,
        max_num_edges=opts.num_edges - 1))
    assert sorted(i for batch in packed for i in batch) == \
        list(range(len(sizes)))


def _uniform(count, nodes, edges):
    return [Data(x=torch.ones(nodes, 1),
                 edge_index=torch.zeros(2, edges, dtype=torch.long))
            for _ in range(count)]


@pytest.mark.parametrize("count,batch_size", [(24, 6), (25, 6), (40, 16)])
def test_for_batch_size_of_equal_graphs_is_exact(count, batch_size):
    """Graphs of one size: PyG's batch count needs k = ceil(count /
    batches) graphs per batch, so the tightest budgets are k graphs plus
    the padding graph's slot and node (edges following by the ratio); any
    more slots would reserve padding room for nothing."""
    nodes, edges = 5, 8
    opts = FixedSizeOptions.for_batch_size(_uniform(count, nodes, edges),
                                           batch_size)
    batches = math.ceil(count / batch_size)
    k = math.ceil(count / batches)
    assert (opts.num_graphs, opts.num_nodes) == (k + 1, k * nodes + 1)
    assert opts.num_edges == math.ceil(edges / nodes * opts.num_nodes)


def _brute_force_batch_size_budgets(sizes, batch_size, orders=None,
                                    count=_batches):
    """``for_batch_size``'s walk: slot counts from the fewest that can hold
    the dataset in PyG's number of batches, ``max(1, batch_size // 32)``
    apart, up to ``2 * batch_size + 1``, stopping after 8 without a better
    efficiency; the first best wins (with ``orders``, raised to fit the
    thirty confirming shuffles)."""
    target = math.ceil(len(sizes) / batch_size)
    best, since_best = None, 0
    for num_graphs in range(math.ceil(len(sizes) / target) + 1,
                            2 * batch_size + 2, max(1, batch_size // 32)):
        candidate = _tightest(sizes, orders or [sizes], num_graphs, target,
                              count)
        if best is None or candidate[0] > best[0]:
            best, since_best = (*candidate, num_graphs), 0
        else:
            since_best += 1
            if since_best == 8:
                break
    if orders:
        return (best[3], *_confirmed(sizes, best[3], target, best[1],
                                     count))
    return best[3], best[1], best[2]


@pytest.mark.parametrize("seed,batch_size", [(0, 2), (1, 3), (2, 5), (3, 8),
                                             (4, 4), (5, 64)])
def test_for_batch_size_matches_the_brute_force_rule(seed, batch_size):
    dataset = SyntheticMolecules(130 if batch_size == 64 else 30, seed=seed)
    sizes = [(g.num_nodes, g.num_edges) for g in dataset]
    opts = FixedSizeOptions.for_batch_size(dataset, batch_size, shuffle=False,
                                           lookahead=0)
    assert (opts.num_graphs, opts.num_nodes, opts.num_edges) == \
        _brute_force_batch_size_budgets(sizes, batch_size)


def test_for_batch_size_with_shuffle_matches_the_brute_force_rule():
    dataset = SyntheticMolecules(30, seed=9)
    sizes = [(g.num_nodes, g.num_edges) for g in dataset]
    opts = FixedSizeOptions.for_batch_size(dataset, 4, shuffle=True,
                                           lookahead=0)
    assert (opts.num_graphs, opts.num_nodes, opts.num_edges) == \
        _brute_force_batch_size_budgets(sizes, 4,
                                        orders=_seeded_shuffles(sizes))


def test_for_batch_size_with_lookahead_matches_the_sampler():
    dataset = SyntheticMolecules(24, seed=10)
    sizes = [(g.num_nodes, g.num_edges) for g in dataset]
    opts = FixedSizeOptions.for_batch_size(dataset, 3, shuffle=False,
                                           lookahead=8)
    expected = _brute_force_batch_size_budgets(sizes, 3,
                                               count=_sampler_batches(8))
    assert (opts.num_graphs, opts.num_nodes, opts.num_edges) == expected
    assert expected != _brute_force_batch_size_budgets(sizes, 3)


def test_for_batch_size_is_reproducible_with_shuffle():
    dataset = SyntheticMolecules(30, seed=7)
    first = FixedSizeOptions.for_batch_size(dataset, 4, shuffle=True)
    second = FixedSizeOptions.for_batch_size(dataset, 4, shuffle=True)
    assert (first.num_graphs, first.num_nodes, first.num_edges) == \
        (second.num_graphs, second.num_nodes, second.num_edges)


def test_for_packing_of_a_large_dataset_steps_through_batch_counts():
    """More than 64 candidate batch counts: the search samples them and
    still returns budgets with which every graph is packed."""
    dataset = SyntheticMolecules(140, seed=8)
    opts = FixedSizeOptions.for_packing(dataset, graphs_per_batch=3,
                                        shuffle=False, lookahead=0)
    sizes = [(g.num_nodes, g.num_edges) for g in dataset]
    fewest = math.ceil(len(sizes) / 2)
    assert fewest > 64
    assert _batches(sizes, 3, opts.num_nodes, opts.num_edges) <= 2 * fewest


@pytest.mark.parametrize("lookahead", [0, 4])
@pytest.mark.parametrize("kind", ["nodes", "edges"])
def test_count_packed_batches_at_the_largest_graph_that_fits(kind,
                                                             lookahead):
    """A graph fits an empty batch iff it leaves one node and one edge for
    each other graph slot: at exactly that size packing succeeds, one more
    node (or edge) and it fits no batch (None)."""
    from poptorch_geometric._packing import count_packed_batches
    max_graphs, max_nodes, max_edges = 3, 9, 8
    largest = {"nodes": max_nodes, "edges": max_edges}[kind] - max_graphs + 1
    for size in (largest, largest + 1):
        sizes = [(2, 2), (size, 2) if kind == "nodes" else (2, size), (2, 2)]
        expected = _batches(sizes, max_graphs + 1, max_nodes + 1,
                            max_edges + 1)
        assert (expected is None) == (size > largest)
        nodes = np.array([n for n, _ in sizes])
        edges = np.array([e for _, e in sizes])
        count = count_packed_batches(nodes, edges, max_graphs, max_nodes,
                                     max_edges, lookahead)
        # Topping up from the lookahead may take fewer batches than greedy.
        assert count == expected if lookahead == 0 else \
            (count is None) == (expected is None)
