"""TorchNeighborSampler against a brute-force reading of the neighbour
sampling rules, on small random graphs: edges are edges of the graph, hop by
hop; fanouts hold; seeds come first; new nodes follow in first-seen order;
picks are uniform (chi-square with a fixed seed); same seed, same batches."""
import collections
import itertools
import pickle

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader

from poptorch_geometric import TorchNeighborSampler

from ._sampling_graphs import paper_author_graph, random_graph

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def loader_for(data, fanouts, batch_size, **kwargs):
    sampler_args = {k: kwargs.pop(k) for k in ("replace", "subgraph_type",
                                               "directed") if k in kwargs}
    sampler = TorchNeighborSampler(data, fanouts, **sampler_args)
    return NeighborLoader(data, fanouts, batch_size=batch_size,
                          neighbor_sampler=sampler, **kwargs)


def in_edges(data):
    """Original edge ids into each node, by node (brute force)."""
    into = collections.defaultdict(list)
    for e, (_, dst) in enumerate(data.edge_index.t().tolist()):
        into[dst].append(e)
    return into


def check_layered_sample(data, batch, seeds, fanouts, replace):
    """Replays the sampling rules on ``batch`` in plain Python."""
    src, dst = data.edge_index.tolist()
    n_id, e_id = batch.n_id.tolist(), batch.e_id.tolist()
    row, col = batch.edge_index.tolist()
    into = in_edges(data)
    assert n_id[:len(seeds)] == seeds
    assert batch.batch_size == len(seeds)
    assert batch.num_sampled_nodes[0] == len(seeds)
    assert sum(batch.num_sampled_edges) == len(e_id)
    # Every edge is the original edge e_id says, in local ids.
    for r, c, e in zip(row, col, e_id):
        assert (n_id[r], n_id[c]) == (src[e], dst[e])
    seen = list(dict.fromkeys(seeds))
    frontier = range(0, len(seeds))
    edge_start = 0
    for hop, fanout in enumerate(fanouts):
        count = batch.num_sampled_edges[hop]
        hop_edges = range(edge_start, edge_start + count)
        edge_start += count
        per_node = collections.defaultdict(list)
        for i in hop_edges:
            assert col[i] in frontier, "edge into a node outside the hop"
            per_node[col[i]].append(e_id[i])
        for local in frontier:
            picked, degree = per_node[local], len(into[n_id[local]])
            assert set(picked) <= set(into[n_id[local]])
            if replace:
                assert len(picked) == (fanout if degree else 0)
            else:
                assert len(picked) == min(degree, fanout)
                assert len(set(picked)) == len(picked)
        before = len(seen)
        for i in hop_edges:
            if src[e_id[i]] not in seen:
                seen.append(src[e_id[i]])
        assert n_id[before:len(seen)] == seen[before:]
        assert batch.num_sampled_nodes[hop + 1] == len(seen) - before
        frontier = range(before, len(seen))
    assert n_id == seen, "nodes beyond the last hop"


@SETTINGS
@given(num_nodes=st.integers(1, 30), density=st.integers(0, 6),
       fanouts=st.lists(st.integers(0, 6), min_size=1, max_size=3),
       batch_size=st.integers(1, 8), replace=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_samples_follow_the_rules(num_nodes, density, fanouts, batch_size,
                                  replace, seed):
    data = random_graph(num_nodes, num_nodes * density, seed)
    torch.manual_seed(seed)
    loader = loader_for(data, fanouts, batch_size, replace=replace,
                        shuffle=True)
    for batch in loader:
        seeds = batch.n_id[:batch.batch_size].tolist()
        check_layered_sample(data, batch, seeds, fanouts, replace)
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
        assert torch.equal(batch.input_id, batch.n_id[:batch.batch_size])


def test_all_neighbours_with_minus_one():
    data = random_graph(40, 200, seed=3)
    batch = loader_for(data, [-1], batch_size=10)(list(range(10)))
    into = in_edges(data)
    assert sorted(batch.e_id.tolist()) == sorted(
        e for v in range(10) for e in into[v])


def test_input_nodes_as_mask_and_index_give_the_same_seeds():
    data = random_graph(50, 300, seed=4)
    mask = torch.zeros(50, dtype=torch.bool)
    mask[[3, 17, 21, 40]] = True
    by_mask = [b.n_id[:b.batch_size].tolist()
               for b in loader_for(data, [3], 2, input_nodes=mask)]
    by_index = [b.n_id[:b.batch_size].tolist() for b in loader_for(
        data, [3], 2, input_nodes=torch.tensor([3, 17, 21, 40]))]
    assert by_mask == by_index == [[3, 17], [21, 40]]


def test_same_seed_same_batches_and_another_seed_others():
    data = random_graph(200, 1500, seed=5)

    def epoch(seed):
        torch.manual_seed(seed)
        return [(b.n_id.tolist(), b.e_id.tolist())
                for b in loader_for(data, [4, 3], 16, shuffle=True)]

    assert epoch(1) == epoch(1)
    assert epoch(1) != epoch(2)


def test_repeated_seeds_keep_their_slots():
    data = random_graph(30, 200, seed=6)
    sampler = TorchNeighborSampler(data, [3])
    loader = NeighborLoader(data, [3], input_nodes=torch.tensor([5, 5, 7]),
                            batch_size=3, neighbor_sampler=sampler)
    batch = next(iter(loader))
    assert batch.n_id[:3].tolist() == [5, 5, 7]
    # Edges into node 5 were sampled for both of its slots.
    assert len(in_edges(data)[5]) > 0
    assert set(batch.edge_index[1].tolist()) >= {0, 1}


def test_induced_subgraph_keeps_every_edge_between_sampled_nodes():
    data = random_graph(60, 400, seed=7)
    for flag in ({"directed": False}, {"subgraph_type": "induced"}):
        batch = loader_for(data, [2, 2], 8, **flag)(list(range(8)))
        nodes = set(batch.n_id.tolist())
        src, dst = data.edge_index.tolist()
        expected = [e for e in range(data.num_edges)
                    if src[e] in nodes and dst[e] in nodes]
        assert sorted(batch.e_id.tolist()) == expected
        n_id = batch.n_id.tolist()
        for (r, c), e in zip(batch.edge_index.t().tolist(),
                             batch.e_id.tolist()):
            assert (n_id[r], n_id[c]) == (src[e], dst[e])
        assert batch.n_id[:8].tolist() == list(range(8))


def test_bidirectional_subgraph_adds_reverse_edges():
    data = random_graph(60, 300, seed=8)
    batch = loader_for(data, [3, 2], 8, subgraph_type="bidirectional")(
        list(range(8)))
    pairs = set(map(tuple, batch.edge_index.t().tolist()))
    assert all((c, r) in pairs for r, c in pairs)


def test_link_neighbor_loader_samples_around_both_ends():
    data = random_graph(80, 400, seed=9)
    sampler = TorchNeighborSampler(data, [3, 2])
    loader = LinkNeighborLoader(data, [3, 2], batch_size=10,
                                neighbor_sampler=sampler)
    batch = next(iter(loader))
    ends = batch.n_id[batch.edge_label_index]
    assert torch.equal(ends, data.edge_index[:, :10])


# -- uniformity (chi-square, fixed seed) -----------------------------------

def star_graph(num_neighbors, num_targets):
    """``num_targets`` nodes, each with the same ``num_neighbors``
    in-neighbours (nodes ``0 .. num_neighbors - 1``)."""
    targets = torch.arange(num_neighbors, num_neighbors + num_targets)
    src = torch.arange(num_neighbors).repeat(num_targets)
    dst = targets.repeat_interleave(num_neighbors)
    return Data(edge_index=torch.stack([src, dst]),
                num_nodes=num_neighbors + num_targets), targets


def picked_neighbours(num_neighbors, fanout, replace, draws):
    """The neighbours each of ``draws`` targets picked, as lists."""
    data, targets = star_graph(num_neighbors, draws)
    sampler = TorchNeighborSampler(data, [fanout], replace=replace)
    loader = NeighborLoader(data, [fanout], input_nodes=targets,
                            batch_size=draws, neighbor_sampler=sampler)
    batch = next(iter(loader))
    src = batch.n_id[batch.edge_index[0]].tolist()
    picks = collections.defaultdict(list)
    for s, c in zip(src, batch.edge_index[1].tolist()):
        picks[c].append(s)
    assert len(picks) == draws
    return list(picks.values())


@pytest.mark.parametrize("degree,fanout", [(5, 2), (6, 3), (4, 1)])
def test_every_subset_of_neighbours_is_equally_likely(degree, fanout):
    torch.manual_seed(1234)
    draws = 6000
    counts = collections.Counter(tuple(sorted(p)) for p in picked_neighbours(
        degree, fanout, replace=False, draws=draws))
    subsets = list(itertools.combinations(range(degree), fanout))
    assert set(counts) == set(subsets)
    observed = [counts[s] for s in subsets]
    result = stats.chisquare(observed)
    assert result.pvalue > 1e-3, (observed, result)


def test_a_hub_keeps_each_neighbour_with_probability_fanout_over_degree():
    torch.manual_seed(99)
    degree, fanout, draws = 40, 15, 3000
    counts = collections.Counter(s for p in picked_neighbours(
        degree, fanout, replace=False, draws=draws) for s in p)
    observed = [counts[s] for s in range(degree)]
    # Without replacement the counts vary less than multinomial ones, so
    # this chi-square is conservative; a biased pick still fails it.
    assert stats.chisquare(observed).pvalue > 1e-3, observed


def test_draws_with_replacement_are_uniform_and_independent():
    torch.manual_seed(7)
    degree, fanout, draws = 6, 4, 3000
    picks = picked_neighbours(degree, fanout, replace=True, draws=draws)
    assert all(len(p) == fanout for p in picks)
    counts = collections.Counter(s for p in picks for s in p)
    assert stats.chisquare([counts[s] for s in range(degree)]).pvalue > 1e-3
    # Repeats within a node's picks occur as often as independence says.
    repeats = sum(len(set(p)) < fanout for p in picks)
    p_repeat = 1 - (6 * 5 * 4 * 3) / 6 ** 4
    assert stats.binomtest(repeats, draws, p_repeat).pvalue > 1e-3


# -- heterogeneous graphs --------------------------------------------------

HETERO_FANOUTS = {("paper", "cites", "paper"): [3, 2],
                  ("author", "writes", "paper"): [2, 1],
                  ("paper", "rev_writes", "author"): [1, 4]}


def test_hetero_per_edge_type_fanouts_and_original_edges():
    data = paper_author_graph(seed=11)
    sampler = TorchNeighborSampler(data, HETERO_FANOUTS)
    torch.manual_seed(0)
    loader = NeighborLoader(data, HETERO_FANOUTS, input_nodes="paper",
                            batch_size=6, neighbor_sampler=sampler,
                            shuffle=True)
    for batch in loader:
        seeds = batch["paper"].n_id[:batch["paper"].batch_size]
        assert torch.equal(seeds, batch["paper"].input_id)
        assert batch["author"].num_sampled_nodes[0] == 0
        for edge_type, fanouts in HETERO_FANOUTS.items():
            src_t, _, dst_t = edge_type
            store, original = batch[edge_type], data[edge_type].edge_index
            row, col = store.edge_index
            assert torch.equal(batch[src_t].n_id[row],
                               original[0, store.e_id])
            assert torch.equal(batch[dst_t].n_id[col],
                               original[1, store.e_id])
            # Per hop, no node receives more edges than the fanout.
            start = 0
            for hop, count in enumerate(store.num_sampled_edges):
                per_node = collections.Counter(
                    col[start:start + count].tolist())
                start += count
                assert max(per_node.values(), default=0) <= fanouts[hop]
        for node_type in ("paper", "author"):
            n_id = batch[node_type].n_id
            assert n_id.unique().numel() == n_id.numel()
            assert torch.equal(batch[node_type].x, data[node_type].x[n_id])


def test_hetero_homogeneous_agreement():
    """A HeteroData with one node and one edge type samples exactly as the
    Data it came from, under the same seed."""
    data = random_graph(50, 300, seed=12)
    hetero = HeteroData()
    hetero["v"].x = data.x
    hetero["v", "e", "v"].edge_index = data.edge_index
    torch.manual_seed(3)
    homo = loader_for(data, [3, 2], 7)(list(range(7)))
    torch.manual_seed(3)
    het = NeighborLoader(hetero, {("v", "e", "v"): [3, 2]},
                         input_nodes="v", batch_size=7,
                         neighbor_sampler=TorchNeighborSampler(
                             hetero, {("v", "e", "v"): [3, 2]}))(
        list(range(7)))
    assert torch.equal(homo.n_id, het["v"].n_id)
    assert torch.equal(homo.edge_index, het["v", "e", "v"].edge_index)


# -- errors ----------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    ({"disjoint": True}, "disjoint"),
    ({"time_attr": "t"}, "temporal"),
    ({"weight_attr": "w"}, "weighted"),
])
def test_unsupported_modes_say_so(kwargs, match):
    with pytest.raises(NotImplementedError, match=match):
        TorchNeighborSampler(random_graph(5, 10, 0), [2], **kwargs)


def test_bad_fanouts_and_graphs_are_clear_errors():
    data = random_graph(5, 10, 0)
    with pytest.raises(ValueError, match="ints >= -1"):
        TorchNeighborSampler(data, [2, -3])
    with pytest.raises(ValueError, match="homogeneous"):
        TorchNeighborSampler(data, {("a", "b", "a"): [2]})
    with pytest.raises(ValueError, match="outside"):
        TorchNeighborSampler(Data(edge_index=torch.tensor([[0], [9]]),
                                  num_nodes=3), [2])
    with pytest.raises(ValueError, match="no edge_index"):
        TorchNeighborSampler(Data(x=torch.ones(3, 1)), [2])
    sampler = TorchNeighborSampler(data, [2])
    with pytest.raises(ValueError, match=r"Seed nodes must be in \[0, 5\)"):
        sampler._sample(torch.tensor([7]))


def test_csc_is_built_once_per_graph_and_again_after_an_edit():
    data = random_graph(10, 30, seed=13, features=False)
    first = TorchNeighborSampler(data, [-1]).csc[(None, None, None)]
    assert TorchNeighborSampler(data, [2]).csc[(None, None, None)] is first
    data.edge_index[1, 0] = (data.edge_index[1, 0] + 1) % 10
    sampler = TorchNeighborSampler(data, [-1])
    assert sampler.csc[(None, None, None)] is not first
    batch = NeighborLoader(data, [-1], batch_size=10,
                           neighbor_sampler=sampler)(list(range(10)))
    assert sorted(batch.e_id.tolist()) == list(range(30))


def test_scratch_state_is_clean_after_every_batch_even_a_failed_one():
    """The node maps cost memory once per graph, not per batch: every entry
    a batch used is reset, also when sampling fails half way."""
    data = random_graph(100, 600, seed=14)
    sampler = TorchNeighborSampler(data, [4, 3])
    loader = NeighborLoader(data, [4, 3], batch_size=9, shuffle=True,
                            neighbor_sampler=sampler)
    for _ in loader:
        pass
    unseen = torch.iinfo(torch.int32).max
    node_map = sampler._maps[None]
    assert bool((node_map._local == unseen).all())
    assert bool((node_map._first == unseen).all())
    with pytest.raises(ValueError):
        sampler._sample(torch.tensor([1, 2, 500]))
    assert bool((node_map._local == unseen).all())


def test_sampler_pickles_for_spawned_workers():
    data = random_graph(60, 300, seed=15)
    sampler = TorchNeighborSampler(data, [3, 2])
    copy = pickle.loads(pickle.dumps(sampler))
    torch.manual_seed(2)
    expected = sampler._sample(torch.arange(6))
    torch.manual_seed(2)
    got = copy._sample(torch.arange(6))
    for key in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(expected, key), getattr(got, key))
