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

import pytest
import torch
from torch_geometric.data import Data

from poptorch_geometric import FixedSizeOptions
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


def _brute_force_budgets(sizes, num_graphs):
    total_n = sum(n for n, _ in sizes)
    total_e = sum(e for _, e in sizes)
    ratio = total_e / total_n
    min_nodes = max(n for n, _ in sizes) + num_graphs - 1
    min_edges = max(e for _, e in sizes) + num_graphs - 1

    def edge_budget(num_nodes):
        return max(math.ceil(ratio * num_nodes), min_edges)

    fewest = math.ceil(len(sizes) / (num_graphs - 1))
    best = None
    for target in range(fewest, 2 * fewest + 1):
        num_nodes = max(min_nodes, math.ceil(total_n / target))
        while True:
            count = _batches(sizes, num_graphs, num_nodes,
                             edge_budget(num_nodes))
            if count is not None and count <= target:
                break
            num_nodes += 1
        num_edges = edge_budget(num_nodes)
        efficiency = min(total_n / (count * num_nodes),
                         total_e / (count * num_edges))
        if best is None or efficiency > best[0]:
            best = (efficiency, num_nodes, num_edges)
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
