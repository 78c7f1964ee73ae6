"""ClusterData on pymetis and the fixed-size cluster loaders: partitions
cover every node once and are cached by graph and part count; each padded
batch is exactly the subgraph of its clusters built by hand (every edge
between them kept); the PopTorch side concatenates mini-batches."""
import pytest
import torch
import torch_geometric.loader
from torch.utils.data import RandomSampler
from torch_geometric.data import Data

import poptorch
from poptorch_geometric import (ClusterData, FixedSizeClusterLoader,
                                FixedSizeOptions, OverSizeStrategy)
from poptorch_geometric import pyg_cluster_loader
from poptorch_geometric._sampling import metis
from poptorch_geometric.datasets import power_law_graph

NODE_PAD, EDGE_PAD = -1.0, -2.0


@pytest.fixture(scope="module")
def graph():
    data = power_law_graph(num_nodes=400, num_edges=2400, num_features=3,
                           seed=2)
    data.edge_attr = torch.arange(data.num_edges, dtype=torch.float32)
    return data


@pytest.fixture(scope="module")
def clusters(graph):
    return ClusterData(graph, num_parts=16, log=False)


def cluster_nodes(cluster_data, cluster_ids):
    """Original ids of the nodes of ``cluster_ids``, in loader order."""
    part = cluster_data.partition
    return torch.cat([part.node_perm[part.partptr[c]:part.partptr[c + 1]]
                      for c in cluster_ids])


def brute_force_subgraph(data, nodes):
    """Every original edge whose two ends are in ``nodes``, as a set of
    (local source, local target, edge attribute)."""
    local = {int(v): i for i, v in enumerate(nodes)}
    return {(local[s], local[d], float(a)) for (s, d), a in zip(
        data.edge_index.t().tolist(), data.edge_attr)
        if s in local and d in local}


def options(num_nodes, num_edges):
    return FixedSizeOptions(num_nodes=num_nodes, num_edges=num_edges,
                            node_pad_value=NODE_PAD, edge_pad_value=EDGE_PAD)


def test_partition_covers_every_node_once_and_is_cached(graph, clusters):
    part = clusters.partition
    assert len(clusters) == 16
    assert sorted(part.node_perm.tolist()) == list(range(graph.num_nodes))
    assert int(part.partptr[-1]) == graph.num_nodes
    again = ClusterData(graph, num_parts=16, log=False)
    assert torch.equal(again.partition.node_perm, part.node_perm)
    assigned = metis.metis_partition(graph.edge_index, graph.num_nodes, 16)
    assert metis.metis_partition(graph.edge_index, graph.num_nodes,
                                 16) is assigned
    other = metis.metis_partition(graph.edge_index, graph.num_nodes, 8)
    assert other is not assigned and int(other.max()) < 8


def test_metis_cuts_few_edges(graph):
    """METIS keeps most edges inside parts, far more than a random
    assignment of the same part sizes would."""
    parts = metis.metis_partition(graph.edge_index, graph.num_nodes, 8)
    src, dst = graph.edge_index
    inside = float((parts[src] == parts[dst]).float().mean())
    shuffled = parts[torch.randperm(graph.num_nodes)]
    random_inside = float((shuffled[src] == shuffled[dst]).float().mean())
    assert inside > 2 * random_inside


def test_disk_cache_is_keyed_by_the_graph(graph, tmp_path):
    first = ClusterData(graph, num_parts=8, save_dir=str(tmp_path),
                        log=False)
    files = list((tmp_path / "part_8").iterdir())
    assert len(files) == 1
    assert metis.graph_fingerprint(graph.edge_index, graph.num_nodes) in \
        files[0].name
    loaded = ClusterData(graph, num_parts=8, save_dir=str(tmp_path),
                         log=False)
    assert torch.equal(loaded.partition.node_perm,
                       first.partition.node_perm)
    changed = graph.clone()
    changed.edge_index = changed.edge_index.flip(0)
    ClusterData(changed, num_parts=8, save_dir=str(tmp_path), log=False)
    assert len(list((tmp_path / "part_8").iterdir())) == 2


def test_an_epoch_covers_every_node_once_with_every_edge_between_clusters(
        graph, clusters):
    opts = options(150, 700)
    loader = FixedSizeClusterLoader(clusters, opts, batch_size=4,
                                    over_size_strategy=OverSizeStrategy.Error)
    seen = []
    for i, batch in enumerate(loader):
        ids = list(range(i * 4, (i + 1) * 4))
        nodes = cluster_nodes(clusters, ids)
        real_nodes, real_edges = int(batch.nodes_mask.sum()), int(
            batch.edges_mask.sum())
        assert real_nodes == nodes.numel()
        assert torch.equal(batch.x[:real_nodes], graph.x[nodes])
        assert torch.equal(batch.y[:real_nodes], graph.y[nodes])
        got = {(s, d, float(a)) for (s, d), a in zip(
            batch.edge_index[:, :real_edges].t().tolist(),
            batch.edge_attr[:real_edges])}
        assert got == brute_force_subgraph(graph, nodes.tolist())
        assert real_edges == len(got)
        # Fixed shapes, inert padding.
        assert batch.x.shape == (150, 3)
        assert batch.edge_index.shape == (2, 700)
        assert batch.graphs_mask.tolist() == [True, False]
        assert bool((batch.x[real_nodes:] == NODE_PAD).all())
        assert bool((batch.edge_attr[real_edges:] == EDGE_PAD).all())
        assert bool((batch.edge_index[:, real_edges:] >= real_nodes).all())
        seen.append(nodes)
    assert sorted(torch.cat(seen).tolist()) == list(range(graph.num_nodes))


def test_shuffled_cluster_groups_still_cover_every_node_once(clusters):
    torch.manual_seed(0)
    loader = FixedSizeClusterLoader(clusters, options(150, 700),
                                    batch_size=4, shuffle=True)
    nodes = [batch.x[batch.nodes_mask] for batch in loader]
    assert sum(n.shape[0] for n in nodes) == 400
    rows = torch.cat(nodes)
    assert rows.unique(dim=0).shape[0] == 400


def test_trimming_is_the_default_and_is_counted(clusters):
    loader = FixedSizeClusterLoader(clusters, options(40, 60),
                                    batch_size=4)
    for batch in loader:
        assert batch.x.shape[0] == 40 and batch.edge_index.shape[1] == 60
    trimmed = loader.fixed_size_collater.trimmed
    assert trimmed.graphs > 0 and trimmed.nodes > 0
    with pytest.raises(RuntimeError):
        next(iter(FixedSizeClusterLoader(
            clusters, options(40, 60), batch_size=4,
            over_size_strategy=OverSizeStrategy.Error)))


def test_sizes_from_the_unpadded_cluster_loader(clusters):
    unpadded = torch_geometric.loader.ClusterLoader(clusters, batch_size=4)
    opts = FixedSizeOptions.from_loader(unpadded, sample_limit=4)
    assert opts.num_nodes == max(b.num_nodes for b in unpadded) + 1
    assert opts.num_edges == max(b.num_edges for b in unpadded) + 1
    assert opts.num_graphs == 2
    loader = FixedSizeClusterLoader(clusters, opts, batch_size=4)
    measured = FixedSizeOptions.from_loader(loader, sample_limit=4)
    assert (measured.num_nodes, measured.num_edges) == (opts.num_nodes,
                                                        opts.num_edges)
    assert all(bool(b.nodes_mask.sum() < opts.num_nodes) for b in loader)
    assert loader.fixed_size_collater.trimmed.graphs == 0


def test_argument_checks(clusters):
    with pytest.raises(AssertionError, match="needs 2"):
        FixedSizeClusterLoader(clusters, FixedSizeOptions(10, 10, 3))
    for key in ("collate_fn", "batch_sampler", "exclude_keys"):
        with pytest.raises(AssertionError, match=key):
            FixedSizeClusterLoader(clusters, options(10, 10),
                                   **{key: None})
    with pytest.raises(ValueError, match="num_parts"):
        ClusterData(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2),
                    num_parts=3, log=False)
    with pytest.raises(ValueError, match="edge_index"):
        ClusterData(Data(x=torch.ones(4, 1)), num_parts=2, log=False)


def test_poptorch_side_concatenates_device_iterations(graph, clusters):
    opts = options(150, 700)
    loader = FixedSizeClusterLoader(
        clusters, opts, batch_size=2,
        options=poptorch.Options().deviceIterations(2))
    assert issubclass(FixedSizeClusterLoader, poptorch.DataLoader)
    assert len(loader) == 4
    reference = pyg_cluster_loader.FixedSizeClusterLoader(
        clusters, opts, batch_size=2)
    mini = list(reference)
    for call, batch in enumerate(loader):
        assert batch.x.shape == (300, 3)
        assert batch.edge_index.shape == (4, 700)
        assert batch.graphs_mask.shape == (4,)
        for k in range(2):
            expected = mini[call * 2 + k]
            assert torch.equal(batch.x[k * 150:(k + 1) * 150], expected.x)
            assert torch.equal(batch.edge_index[2 * k:2 * k + 2],
                               expected.edge_index)


def test_custom_sampler_chooses_the_cluster_groups(graph, clusters):
    order = list(RandomSampler(range(16),
                               generator=torch.Generator().manual_seed(1)))
    loader = FixedSizeClusterLoader(clusters, options(150, 700),
                                    batch_size=4, sampler=order)
    for i, batch in enumerate(loader):
        nodes = cluster_nodes(clusters, order[i * 4:(i + 1) * 4])
        assert torch.equal(batch.x[:nodes.numel()], graph.x[nodes])
