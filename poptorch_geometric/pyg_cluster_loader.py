"""Cluster-GCN batches of fixed size, torch side (no PopTorch).

Example::

    >>> from poptorch_geometric import FixedSizeOptions
    >>> from poptorch_geometric.datasets import power_law_graph
    >>> data = power_law_graph(num_nodes=600, num_edges=3000)
    >>> clusters = ClusterData(data, num_parts=20, log=False)
    >>> loader = FixedSizeClusterLoader(
    ...     clusters, FixedSizeOptions(num_nodes=200, num_edges=600),
    ...     batch_size=4)
    >>> batch = next(iter(loader))
    >>> batch.x.shape[0], batch.edge_index.shape[1], batch.graphs_mask.tolist()
    (200, 600, [True, False])
"""
import copy
import os
import os.path as osp
import dataclasses
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch.serialization
import torch.utils.data
import torch_geometric.loader
import torch_geometric.loader.cluster
from torch_geometric.data import Batch, Data

from poptorch_core.files import atomic_write

from ._loader_parts import LoaderParts, padding_collater
from ._padding_masks import registered_batches
from ._sampling.metis import graph_fingerprint, metis_partition
from ._loader_strategies import OverSizeStrategy
from .collate import CombinedBatchingCollater, FixedSizeCollater
from .fixed_size_options import FixedSizeOptions
from ._refusals import public, refusing_iterator

__all__ = ["ClusterData", "FixedSizeClusterLoader"]


class ClusterData(torch_geometric.loader.ClusterData):
    """PyG's ``ClusterData`` with METIS from ``pymetis`` (PyG's needs
    pyg-lib or torch-sparse, or :mod:`poptorch_geometric.pure_backends`,
    which gives it the same partitions).

    Same arguments and attributes as PyG's. METIS runs on the graph made
    undirected and loop-free (it requires both; the data's edges are kept
    as they are) with a fixed seed, so a graph always gets the same
    partition; partitions are cached in memory by graph and part count, and
    on disk under ``save_dir`` in a file named after the graph's
    fingerprint (PyG's default name, ``metis.pt``, would hand a stale
    partition to a changed graph).
    """

    @public
    def __init__(self, data: Data, num_parts: int, recursive: bool = False,
                 save_dir: Optional[str] = None,
                 filename: Optional[str] = None, log: bool = True,
                 keep_inter_cluster_edges: bool = False,
                 sparse_format: str = "csr") -> None:
        if getattr(data, "edge_index", None) is None:
            raise ValueError(
                "ClusterData partitions a graph with edge_index; this one "
                "has none (a graph without edges needs edge_index="
                "torch.empty(2, 0, dtype=torch.long)).")
        path = None
        if save_dir is not None:
            filename = filename or "metis_" + graph_fingerprint(
                data.edge_index, data.num_nodes) + ".pt"
            path = osp.join(save_dir, f"part_{num_parts}"
                            f"{'_recursive' if recursive else ''}", filename)
        saved = path is not None and osp.exists(path)
        # A saved partition holds only tensors in PyG's Partition class:
        # allow that class, so torch.load stays in weights-only mode.
        with torch.serialization.safe_globals(
                [torch_geometric.loader.cluster.Partition]):
            super().__init__(data, num_parts, recursive=recursive,
                             save_dir=save_dir if saved else None,
                             filename=filename, log=log,
                             keep_inter_cluster_edges=keep_inter_cluster_edges,
                             sparse_format=sparse_format)
        if path is not None and not saved:
            # Written here rather than by PyG, atomically: an interrupted
            # save never leaves a truncated partition to load later.
            os.makedirs(osp.dirname(path), exist_ok=True)
            with atomic_write(path) as f:
                torch.save(self.partition, f)

    def _metis(self, edge_index: torch.Tensor,
               num_nodes: int) -> torch.Tensor:
        return metis_partition(edge_index, num_nodes, self.num_parts,
                               self.recursive)


class FixedSizeClusterLoader(torch.utils.data.DataLoader):
    """Merges ``batch_size`` clusters of ``cluster_data`` per batch, with
    every edge between them (PyG's ``ClusterLoader``), and pads the merged
    subgraph to the fixed sizes: one real graph plus one padding graph.

    Args:
        cluster_data: the partitioned graph (:class:`ClusterData`, or PyG's
            where pyg-lib or torch-sparse is installed).
        fixed_size_options: the sizes; ``num_graphs`` must be 2. Derive them
            with ``FixedSizeOptions.from_loader(ClusterLoader(cluster_data,
            batch_size=...))``.
        batch_size: clusters per batch.
        over_size_strategy: what happens to a merged subgraph larger than
            the sizes (default: random nodes and edges are trimmed, counted
            in ``fixed_size_collater.trimmed``).
        add_pad_masks: add ``graphs_mask``, ``nodes_mask``, ``edges_mask``.
        **kwargs: arguments of ``torch.utils.data.DataLoader``, such as
            ``shuffle`` (new cluster groups every epoch, as Cluster-GCN
            trains) or ``num_workers``; not ``collate_fn``,
            ``batch_sampler`` or ``exclude_keys``.
    """

    @public
    def __init__(self, cluster_data: torch_geometric.loader.ClusterData,
                 fixed_size_options: FixedSizeOptions, batch_size: int = 1,
                 over_size_strategy: OverSizeStrategy =
                 OverSizeStrategy.TrimNodesAndEdges,
                 add_pad_masks: bool = True, **kwargs: Any) -> None:
        parts = self._build(cluster_data, fixed_size_options, batch_size,
                            over_size_strategy, add_pad_masks, kwargs)
        super().__init__(**parts.base_arguments())

    def _build(self, cluster_data: torch_geometric.loader.ClusterData,
               fixed_size_options: FixedSizeOptions, batch_size: int,
               over_size_strategy: OverSizeStrategy, add_pad_masks: bool,
               kwargs: Dict[str, Any], combine: bool = False) -> LoaderParts:
        """The loader's parts (the PopTorch-side loader's with
        ``combine``: ``batch_size`` clusters per mini-batch); keeps the
        attributes users read."""
        if fixed_size_options.num_graphs != 2:
            raise AssertionError(
                f"fixed_size_options.num_graphs is "
                f"{fixed_size_options.num_graphs}; FixedSizeClusterLoader "
                "needs 2 (the merged clusters and one padding graph).")
        for key in ("collate_fn", "batch_sampler", "exclude_keys"):
            if key in kwargs:
                raise AssertionError(
                    f"FixedSizeClusterLoader does not take {key}: it builds "
                    "its batches from groups of batch_size clusters.")
        self.cluster_data = cluster_data
        self.fixed_size_options = fixed_size_options
        self.cluster_collater = torch_geometric.loader.ClusterLoader(
            cluster_data, batch_size=batch_size)._collate
        self.fixed_size_collater = padding_collater(
            fixed_size_options, over_size_strategy, add_pad_masks)
        collater: Callable[[List[int]], Batch] = MergedClusters(
            cluster_data, self.cluster_collater, self.fixed_size_collater)
        if combine:
            collater = CombinedBatchingCollater(mini_batch_size=batch_size,
                                                collater=collater)
        return LoaderParts(range(len(cluster_data)), None, collater,
                           self.fixed_size_collater, fixed_size_options,
                           dict(kwargs, batch_size=batch_size))

    @property
    def unpadded_loader(self) -> torch_geometric.loader.ClusterLoader:
        """PyG's ``ClusterLoader`` over the same clusters (what
        ``FixedSizeOptions.from_loader`` measures)."""
        return torch_geometric.loader.ClusterLoader(
            self.cluster_data, batch_size=self.batch_size)

    def _create_collater(self, **collater_args: Any) -> Any:
        """A collate function of cluster ids: the clusters merged, then
        ``FixedSizeCollater(**collater_args)`` (the loader's own is built
        with its parts)."""
        return MergedClusters(self.cluster_data, self.cluster_collater,
                              FixedSizeCollater(**collater_args))

    def __iter__(self) -> Iterator[Any]:
        # Batches that workers collate reach this process as copies: they
        # are registered as a fixed-size batch's here (padding-aware norms).
        return refusing_iterator(registered_batches(self, super().__iter__()))


@dataclasses.dataclass
class MergedClusters:
    """Collates a list of cluster ids: their subgraph (``collate``, PyG's
    ``ClusterLoader`` collate), padded by ``fixed_size_collater``."""
    cluster_data: torch_geometric.loader.ClusterData
    collate: Callable[[List[int]], Data]
    fixed_size_collater: FixedSizeCollater

    def __call__(self, cluster_ids: List[int]) -> Batch:
        return self.fixed_size_collater([_merge_clusters(
            self.cluster_data, self.collate, cluster_ids)])


def _merge_clusters(cluster_data: torch_geometric.loader.ClusterData,
                    collate: Callable[[List[int]], Data],
                    cluster_ids: List[int]) -> Data:
    """PyG's ``ClusterLoader`` subgraph of the clusters ``cluster_ids``
    (``collate``), also when they hold no edge: PyG's fails there (its
    ``map_index`` takes the max of no edges), which a graph with isolated
    nodes, or none with edges, meets. The clusters are then their nodes,
    with the attributes PyG would give them."""
    partition = cluster_data.partition
    ids = torch.as_tensor(cluster_ids, dtype=torch.long)
    starts, ends = partition.partptr[ids], partition.partptr[ids + 1]
    if bool((partition.indptr[ends] > partition.indptr[starts]).any()):
        return collate(cluster_ids)
    nodes = torch.cat([torch.arange(int(s), int(e))
                       for s, e in zip(starts, ends)])
    data = cluster_data.data  # nodes in cluster order, edges dropped
    out = copy.copy(data)
    for key, value in data.items():
        if key == "num_nodes":
            out.num_nodes = nodes.numel()
        elif data.is_node_attr(key):
            out[key] = value.index_select(data.__cat_dim__(key, value),
                                          nodes)
        elif data.is_edge_attr(key):
            out[key] = value.narrow(data.__cat_dim__(key, value), 0, 0)
    out.edge_index = torch.empty(2, 0, dtype=torch.long)
    return out
