"""Packing with a lookahead window: every graph once, the padding-room rule
in every batch, order kept up to the window, greedy when the window is 0,
and the loaders' budgets and lookahead working together."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

import poptorch_geometric as pyg_ipu
from poptorch_geometric import StreamPackingSampler
from poptorch_geometric._best_fit import best_fit_batches
from poptorch_geometric.datasets import SyntheticMolecules


def _dataset(nodes, edges):
    return [Data(num_nodes=n, edge_index=torch.zeros(2, e, dtype=torch.long))
            for n, e in zip(nodes, edges)]


def _greedy_reference(nodes, edges, max_graphs, max_nodes, max_edges):
    """PopTorch's rule, one sample at a time, as its documentation gives
    it."""
    batches, batch, n, e = [], [], 0, 0
    for i, (num_nodes, num_edges) in enumerate(zip(nodes, edges)):
        graphs_left = max_graphs - (len(batch) + 1)
        if not (graphs_left >= 0 and max_nodes - (n + num_nodes) >= graphs_left
                and max_edges - (e + num_edges) >= graphs_left):
            batches.append(batch)
            batch, n, e = [], 0, 0
        batch.append(i)
        n, e = n + num_nodes, e + num_edges
    return batches + [batch]


def _lopsided_cut(batch, window, nodes, edges, max_graphs, node_room,
                  edge_room, ratio):
    """``(cut, skew)``: the prefix a lopsided greedy prefix is cut back to
    and its skew, or None when it is not lopsided (``_best_fit``'s rule: the
    skew, nodes minus edges / ``ratio``, past 2% of the node room; or every
    slot taken with more than 2% of both rooms left, when the largest
    graphs after the cut could fill a room to within 2%. The cut keeps the
    leading graphs within 90% of the slots, at least one)."""
    n = sum(nodes[p] - 1 for p in batch)
    e = sum(edges[p] - 1 for p in batch)
    share_left = min(1 - n / max(node_room, 1), 1 - e / max(edge_room, 1))
    skewed = abs((n - e / ratio) / max(node_room, 1)) > 0.02 if ratio \
        else False
    if not ratio or not 1 < len(batch) < len(window) or not skewed and \
            not (len(batch) == max_graphs and share_left > 0.02):
        return None
    cut = batch[:max(1, int(0.9 * max_graphs))]
    n = sum(nodes[p] - 1 for p in cut)
    e = sum(edges[p] - 1 for p in cut)
    slots = max_graphs - len(cut)
    largest_n = sorted((nodes[p] - 1 for p in window[len(cut):]),
                       reverse=True)[:slots]
    largest_e = sorted((edges[p] - 1 for p in window[len(cut):]),
                       reverse=True)[:slots]
    if not skewed and sum(largest_n) < node_room - n - 0.02 * node_room \
            and sum(largest_e) < edge_room - e - 0.02 * edge_room:
        return None
    return cut, n - e / ratio


def _best_fit_reference(nodes, edges, max_graphs, max_nodes, max_edges,
                        lookahead, cuts=None):
    """The rule ``_best_fit`` documents, one graph at a time over a list of
    waiting graphs: the greedy prefix in order (cut back when lopsided),
    then top-ups from the window by the largest ``min(nodes / node room,
    edges / edge room)`` (sizes and rooms counted minus one per graph: the
    padding room), less the skew penalty after a cut, the earliest on
    ties."""
    node_room, edge_room = max_nodes - max_graphs, max_edges - max_graphs
    node_total = sum(n - 1 for n in nodes)
    edge_total = sum(e - 1 for e in edges)
    ratio = edge_total / node_total if lookahead and node_total > 0 and \
        edge_total > 0 else 0.0
    waiting, batches = list(range(len(nodes))), []
    while waiting:
        window = waiting[:max(lookahead, max_graphs)]
        batch, n, e = [], 0, 0
        for p in window[:max_graphs]:
            if n + nodes[p] - 1 > node_room or e + edges[p] - 1 > edge_room:
                break
            batch, n, e = batch + [p], n + nodes[p] - 1, e + edges[p] - 1
        cut = _lopsided_cut(batch, window, nodes, edges, max_graphs,
                            node_room, edge_room, ratio)
        if cut is not None:
            batch, skew = cut
            if cuts is not None:
                cuts.append(len(batches))
            n = sum(nodes[p] - 1 for p in batch)
            e = sum(edges[p] - 1 for p in batch)
        # Candidates: the window's other graphs that fit the room the
        # prefix leaves (one without edges, size -1, can widen the room
        # again; a graph that did not fit is not reconsidered).
        candidates = [p for p in window if p not in batch and
                      nodes[p] - 1 <= node_room - n and
                      edges[p] - 1 <= edge_room - e]
        while lookahead and len(batch) < max_graphs:
            rn, re = node_room - n, edge_room - e
            candidates = [p for p in candidates
                          if nodes[p] - 1 <= rn and edges[p] - 1 <= re]
            if not candidates:
                break

            def score(p):
                fill = min((nodes[p] - 1) * (1.0 / max(rn, 1)),
                           (edges[p] - 1) * (1.0 / max(re, 1)))
                if cut is None:
                    return fill
                weight = 10.0 / max(rn + re / ratio, 1.0)
                shape = (nodes[p] - 1) - (edges[p] - 1) / ratio
                return fill - weight * abs(skew + shape)
            p = max((score(p), -i, p) for i, p in enumerate(candidates))[2]
            candidates.remove(p)
            batch, n, e = batch + [p], n + nodes[p] - 1, e + edges[p] - 1
            if cut is not None:
                skew += (nodes[p] - 1) - (edges[p] - 1) / ratio
        batches.append(sorted(batch))
        waiting = [p for p in waiting if p not in batch]
    return batches


sizes_strategy = st.lists(st.tuples(st.integers(1, 12), st.integers(0, 20)),
                          min_size=1, max_size=60)


@settings(max_examples=100, deadline=None)
@given(sizes=sizes_strategy, max_graphs=st.integers(1, 8),
       slack_nodes=st.integers(0, 30), slack_edges=st.integers(0, 40),
       lookahead=st.sampled_from([0, 1, 3, 10, 100]))
def test_every_graph_once_rule_kept_order_bounded(sizes, max_graphs,
                                                  slack_nodes, slack_edges,
                                                  lookahead):
    nodes = np.array([s[0] for s in sizes])
    edges = np.array([s[1] for s in sizes])
    # Budgets every graph fits (alone, with the padding room).
    max_nodes = int(nodes.max()) + max_graphs - 1 + slack_nodes
    max_edges = max(int(edges.max()), 1) + max_graphs - 1 + slack_edges
    batches = [b.tolist() for b in best_fit_batches(
        nodes, edges, max_graphs, max_nodes, max_edges, lookahead)]
    assert sorted(i for b in batches for i in b) == list(range(len(nodes)))
    pending = list(range(len(nodes)))
    for batch in batches:
        assert batch == sorted(batch) and 0 < len(batch) <= max_graphs
        free = max_graphs - len(batch)
        assert max_nodes - nodes[batch].sum() >= free
        assert max_edges - edges[batch].sum() >= free
        # Each batch starts with the oldest graph not yet packed, and takes
        # nothing beyond the next lookahead (at least max_graphs) graphs
        # still waiting.
        assert batch[0] == pending[0]
        assert set(batch) <= set(pending[:max(lookahead, max_graphs)])
        pending = [p for p in pending if p not in batch]
    assert batches == _best_fit_reference(nodes, edges, max_graphs,
                                          max_nodes, max_edges, lookahead)
    if lookahead == 0:
        assert batches == _greedy_reference(nodes, edges, max_graphs,
                                            max_nodes, max_edges)


@pytest.mark.parametrize("seed,edge_room_scale", [(0, 1), (1, 1), (2, 1),
                                                   (3, 1), (4, 3), (5, 3)])
def test_lopsided_prefixes_are_balanced_by_the_documented_rule(
        seed, edge_room_scale):
    """Long-tailed sizes (log-normal nodes, 1.5-3 edges per node) in tight
    budgets (or an edge budget that never binds): many greedy prefixes are
    lopsided (too edge- or node-heavy, or all slots taken with room left),
    and the cut and balancing top-up follow the reference rule graph for
    graph."""
    rng = np.random.default_rng(seed)
    nodes = np.clip(np.exp(np.log(8) + 0.9 * rng.standard_normal(400)),
                    2, 90).astype(np.int64)
    edges = (nodes * rng.uniform(1.5, 3.0, nodes.size)).astype(np.int64)
    max_graphs = 24
    max_nodes = int(nodes.mean() * 16) + max_graphs
    max_edges = int(edges.mean() * 16) * edge_room_scale + max_graphs
    batches = [b.tolist() for b in best_fit_batches(
        nodes, edges, max_graphs, max_nodes, max_edges, 64)]
    cuts = []
    assert batches == _best_fit_reference(nodes, edges, max_graphs,
                                          max_nodes, max_edges, 64, cuts)
    assert len(cuts) >= len(batches) // 4
    assert sorted(i for b in batches for i in b) == list(range(nodes.size))


def test_batches_the_slots_bind_are_not_rebuilt():
    """Generous budgets: every batch runs out of graph slots with a third of
    its room left, which no choice of larger graphs could fill, so packing
    keeps the greedy batches (rebuilding them cost 20 times as long)."""
    rng = np.random.default_rng(0)
    nodes = rng.integers(10, 30, 600)
    edges = 2 * nodes
    batches = [b.tolist() for b in best_fit_batches(nodes, edges, 32, 960,
                                                    1920, 64)]
    cuts = []
    assert batches == _best_fit_reference(nodes, edges, 32, 960, 1920, 64,
                                          cuts)
    assert cuts == []
    assert batches == [list(range(i, min(i + 32, 600)))
                       for i in range(0, 600, 32)]


def test_a_lopsided_prefix_keeps_its_first_graph():
    # Room for 20 nodes and 40 edges past the padding (2 slots): the first
    # graph alone takes 90% of the node room, the second makes the prefix
    # edge-heavy (lopsided) and takes the last slot, and the cut back to
    # 90% of the slots (one graph) still starts the batch with the oldest
    # graph.
    nodes = np.array([19, 2, 5, 3, 3, 2])
    edges = np.array([19, 20, 4, 3, 3, 2])
    cuts = []
    batches = [b.tolist() for b in best_fit_batches(nodes, edges, 2, 22, 42,
                                                    6)]
    assert batches == _best_fit_reference(nodes, edges, 2, 22, 42, 6, cuts)
    assert cuts and cuts[0] == 0
    assert batches[0][0] == 0
    assert sorted(i for b in batches for i in b) == list(range(6))


@pytest.mark.parametrize("lookahead", [0, 4])
def test_a_graph_no_batch_can_take_raises_instead_of_looping(lookahead):
    # 2 slots, 8 nodes: one node stays for the free slot, so a graph of 8
    # nodes fits no batch. Callers reject such graphs; if one gets
    # through, packing stops with the reason instead of yielding empty
    # batches for ever.
    nodes = np.array([3, 8, 2])
    batches = best_fit_batches(nodes, np.ones_like(nodes), 2, 8, 10,
                               lookahead)
    with pytest.raises(ValueError,
                       match=r"position 1 \(8 nodes, 1 edges\) does not "
                             r"fit an empty batch of 2 graphs, 8 nodes"):
        for _ in range(10):
            next(batches)


def test_lookahead_fills_what_greedy_leaves_empty():
    # 3 graphs and 12 nodes per batch: greedy closes the first batch at
    # 6 + 4 nodes (the next graph has 4); the window holds a 2-node graph
    # that fits the room greedy leaves.
    nodes = np.array([6, 4, 4, 2, 2, 1])
    edges = np.ones_like(nodes)
    greedy = [b.tolist() for b in best_fit_batches(nodes, edges, 3, 12, 20,
                                                   0)]
    topped = [b.tolist() for b in best_fit_batches(nodes, edges, 3, 12, 20,
                                                   6)]
    assert greedy == [[0, 1], [2, 3, 4], [5]]
    assert topped == [[0, 1, 3], [2, 4, 5]]


def test_sampler_with_lookahead_is_deterministic_and_complete():
    ds = SyntheticMolecules(300, seed=3)
    opts = pyg_ipu.FixedSizeOptions.for_packing(ds, 16)
    assert opts.packing_lookahead > 0

    def epoch():
        order = torch.randperm(len(ds), generator=torch.Generator()
                               .manual_seed(0)).tolist()
        return list(StreamPackingSampler(
            ds, 15, opts.num_nodes - 1, opts.num_edges - 1,
            base_sampler=order, lookahead=opts.packing_lookahead))
    first = epoch()
    assert first == epoch()
    assert sorted(i for b in first for i in b) == list(range(len(ds)))


def test_lookahead_needs_sizes_that_do_not_change():
    class WithTransform(list):
        transform = staticmethod(lambda data: data)
    ds = WithTransform(_dataset([2, 3], [1, 1]))
    with pytest.raises(ValueError, match="transform: use lookahead=0"):
        StreamPackingSampler(ds, 2, 8, 8, lookahead=4)
    with pytest.raises(ValueError, match="non-negative integer"):
        StreamPackingSampler(_dataset([2], [1]), 2, 8, 8, lookahead=-1)


def test_loader_packs_with_the_budgets_lookahead():
    ds = SyntheticMolecules(400, seed=5)
    opts = pyg_ipu.FixedSizeOptions.for_batch_size(ds, 32)
    loader = pyg_ipu.FixedSizeDataLoader(
        ds, batch_size=opts.num_graphs, fixed_size_options=opts,
        fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
        shuffle=True, generator=torch.Generator().manual_seed(1))
    assert loader.batch_sampler.lookahead == opts.packing_lookahead > 0
    seen = []
    for batch in loader:
        assert batch.x.shape[0] == opts.num_nodes
        assert batch.graphs_mask.shape[0] == opts.num_graphs
        seen.append(int(batch.graphs_mask.sum()))
    assert sum(seen) == len(ds)


def test_greedy_options_keep_poptorch_packing():
    ds = SyntheticMolecules(200, seed=1)
    opts = pyg_ipu.FixedSizeOptions.for_packing(ds, 16, lookahead=0)
    assert opts.packing_lookahead == 0
    with pytest.raises(ValueError, match="lookahead"):
        pyg_ipu.FixedSizeOptions.for_packing(ds, 16, lookahead=-2)


@pytest.mark.parametrize("make", [
    lambda data: torch.utils.data.SequentialSampler(data),
    lambda data: torch.utils.data.RandomSampler(data),
    lambda data: torch.utils.data.RandomSampler(
        data, generator=torch.Generator().manual_seed(3)),
    lambda data: torch.utils.data.RandomSampler(data, replacement=True),
    lambda data: [4, 1, 3],
])
def test_sampling_order_is_one_pass_of_the_sampler(make):
    from poptorch_geometric.stream_packing_sampler import sampling_order
    data = list(range(50))
    torch.manual_seed(11)
    fast_sampler = make(data)
    fast = sampling_order(fast_sampler).tolist()
    after_fast = torch.rand(1)  # the global RNG moved the same way
    torch.manual_seed(11)
    slow_sampler = make(data)
    assert fast == list(slow_sampler)
    assert torch.equal(after_fast, torch.rand(1))
    generator = getattr(fast_sampler, "generator", None)
    if generator is not None:
        assert torch.equal(generator.get_state(),
                           slow_sampler.generator.get_state())
