"""Trimming over-size batches, the parts test_trim.py leaves open: the exact
errors when a budget cannot hold one element per graph, the uniform choice
of the element each graph keeps, node types that fit while another
overflows, and the running totals of FixedSizeCollater.trimmed over several
batches."""
import re
from collections import Counter

import pytest
import torch
from torch_geometric.data import Batch, Data, HeteroData

from poptorch_geometric import FixedSizeCollater, FixedSizeOptions


def _path(num_nodes: int) -> torch.Tensor:
    """edge_index of the directed path 0 -> 1 -> ... -> num_nodes - 1."""
    return torch.stack([torch.arange(num_nodes - 1),
                        torch.arange(1, num_nodes)])


def _numbered(num_nodes: int, first_edge: int) -> Data:
    """A path graph whose edges carry their own number (``first_edge``,
    ``first_edge + 1``...) as ``edge_attr``, so a batch tells which edges
    survived trimming."""
    return Data(x=torch.ones(num_nodes, 1), edge_index=_path(num_nodes),
                edge_attr=torch.arange(first_edge, first_edge + num_nodes - 1,
                                       dtype=torch.float).view(-1, 1))


def test_edge_trimming_refuses_to_empty_a_graph_of_its_edges():
    """Two graphs with edges, one edge slot: each would need to keep one."""
    graphs = [_numbered(3, 0), _numbered(4, 2)]
    with_edges = sum(g.num_edges > 0 for g in graphs)
    budget = with_edges - 1
    collater = FixedSizeCollater(
        FixedSizeOptions(num_nodes=20, num_edges=budget, num_graphs=3),
        trim_edges=True)
    with pytest.raises(RuntimeError, match=re.escape(
            f"Cannot trim {with_edges} graph(s) with edges to {budget} "
            "edge(s): every graph keeps at least one edge. Increase "
            "num_edges in FixedSizeOptions or put fewer graphs in a "
            "batch.")):
        collater(graphs)


def test_node_trimming_error_of_homogeneous_graphs():
    graphs = [_numbered(4, 0)] * 3
    opts = FixedSizeOptions(num_nodes=len(graphs) - 1, num_edges=10,
                            num_graphs=len(graphs) + 1)
    with pytest.raises(RuntimeError, match=re.escape(
            f"Cannot trim {len(graphs)} graph(s) to {len(graphs) - 1} "
            "node(s): every graph keeps at least one node. Increase "
            "num_nodes in FixedSizeOptions or put fewer graphs in a "
            "batch.")):
        FixedSizeCollater(opts, trim_nodes=True)(graphs)


def _hetero(num_a: int, num_b: int) -> HeteroData:
    """Node types ``a`` and ``b`` (``b`` first), a path of ``a`` edges."""
    data = HeteroData()
    data["b"].x = torch.ones(num_b, 1)
    data["a"].x = torch.arange(num_a, dtype=torch.float).view(-1, 1)
    data["a", "to", "a"].edge_index = _path(num_a)
    return data


def test_node_trimming_error_names_the_node_type():
    graphs = [_hetero(4, 1)] * 3
    opts = FixedSizeOptions({"a": 2, "b": 10}, {("a", "to", "a"): 10}, 4)
    with pytest.raises(RuntimeError, match=re.escape(
            "Cannot trim 3 graph(s) to 2 node(s) of type 'a': every graph "
            "keeps at least one node. Increase num_nodes in "
            "FixedSizeOptions or put fewer graphs in a batch.")):
        FixedSizeCollater(opts, trim_nodes=True)(graphs)


def test_node_type_that_fits_is_left_alone_while_another_is_trimmed():
    """Type ``b`` (first in store order) fits its budget exactly, with fewer
    nodes than graphs (the second graph has none): it is neither trimmed
    nor an error. Type ``a`` overflows and is trimmed, leaving one node for
    the padding graph's edges."""
    graphs = [_hetero(3, 1), _hetero(3, 0)]
    b_real = sum(g["b"].num_nodes for g in graphs)
    opts = FixedSizeOptions({"a": 5, "b": b_real}, {("a", "to", "a"): 6}, 3)
    collater = FixedSizeCollater(opts, add_masks_to_batch=True,
                                 trim_nodes=True)
    batch = collater(graphs)
    assert batch["b"].nodes_mask.tolist() == [True] * b_real
    assert batch["a"].x.shape == (5, 1)
    assert int(batch["a"].nodes_mask.sum()) == 5 - 1
    assert collater.trimmed.nodes == 6 - 4


def test_each_graph_keeps_a_uniformly_chosen_element():
    """With as many edge slots as graphs, each graph keeps exactly one of
    its edges, chosen at random: over many draws every edge of a graph is
    sometimes the one kept (not always, say, the first)."""
    graphs = [_numbered(4, 0), _numbered(4, 3)]  # edges 0-2 and 3-5
    collater = FixedSizeCollater(
        FixedSizeOptions(num_nodes=20, num_edges=len(graphs), num_graphs=3),
        add_masks_to_batch=True, trim_edges=True)
    kept = Counter()
    draws = 60
    for seed in range(draws):
        torch.manual_seed(seed)
        batch = collater(graphs)
        assert batch.edges_mask.tolist() == [True, True]
        first, second = batch.edge_attr.view(-1).tolist()
        assert first in (0, 1, 2) and second in (3, 4, 5)
        kept.update([first, second])
    assert sorted(kept) == [0, 1, 2, 3, 4, 5]
    # Each edge is kept in about a third of the draws.
    assert all(draws / 6 < n < draws / 2 for n in kept.values()), kept


def test_trimmed_totals_accumulate_over_batches():
    """``trimmed`` keeps running totals; the removed counts of each batch
    are what its real graphs lose (input minus the real part of the
    batch, from the masks)."""
    collater = FixedSizeCollater(
        FixedSizeOptions(num_nodes=6, num_edges=3, num_graphs=3),
        add_masks_to_batch=True, trim_nodes=True, trim_edges=True)
    totals = Counter()
    for sizes in ((5, 4), (4, 6), (3, 3)):
        graphs = [_numbered(n, 0) for n in sizes]
        torch.manual_seed(sum(sizes))
        batch = collater(graphs)
        real = Batch.from_data_list(graphs)
        totals["nodes"] += real.num_nodes - int(batch.nodes_mask.sum())
        totals["edges"] += real.num_edges - int(batch.edges_mask.sum())
        assert (collater.trimmed.nodes, collater.trimmed.edges) == (
            totals["nodes"], totals["edges"])
    assert totals["nodes"] > 0 and totals["edges"] > 0
