"""PyG's ``ClusterData`` and ``NeighborSampler`` (so ``NeighborLoader``,
``LinkNeighborLoader``) on the project's plain-PyTorch partitioning and
sampling, for PyG without pyg-lib or torch-sparse.

- ``ClusterData._metis`` partitions with METIS from ``pymetis``
  (:func:`~poptorch_geometric._sampling.metis.metis_partition`: the graph
  made undirected and loop-free, a fixed seed, cached by graph);
- ``NeighborSampler._sample`` samples with
  :class:`~poptorch_geometric.TorchNeighborSampler` over the sampler's own
  CSC arrays, and returns what pyg-lib's ``neighbor_sample`` returns:
  seeds first, new nodes in the order they are first reached, edges from
  the sampled neighbour to the node that sampled it, CSC positions as edge
  ids (PyG maps them to the graph's edge ids), per-hop node and edge
  counts. Directional, bidirectional and induced subgraphs, with or
  without replacement, homogeneous or heterogeneous, forward or backward;
  disjoint, temporal and weighted sampling still need pyg-lib
  (``NotImplementedError``).

Example::

    >>> from torch_geometric.data import Data
    >>> from torch_geometric.sampler import NeighborSampler
    >>> data = Data(edge_index=torch.tensor([[1, 2, 3], [0, 0, 1]]),
    ...             num_nodes=4)
    >>> sampler = NeighborSampler(data, [-1, -1])
    >>> out = neighbor_sample(sampler, torch.tensor([0]))
    >>> out.node.tolist(), out.row.tolist(), out.col.tolist()
    ([0, 1, 2, 3], [1, 2, 3], [0, 0, 1])
"""
from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.loader.cluster import ClusterData
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput
from torch_geometric.sampler.neighbor_sampler import NeighborSampler
from torch_geometric.sampler.utils import remap_keys

from .._sampling.csc import CSC
from .._sampling.metis import metis_partition
from .._sampling.neighbor_sampler import TorchNeighborSampler

__all__ = ["metis", "neighbor_sample"]

# The homogeneous graph's node and edge type in TorchNeighborSampler.
_NODE, _EDGE = None, (None, None, None)
_CACHE = "_poptorch_geometric_sampler"


def metis(self: ClusterData, edge_index: Tensor, num_nodes: int) -> Tensor:
    """``ClusterData._metis``: every node's part, from ``pymetis``."""
    return metis_partition(edge_index, num_nodes, self.num_parts,
                           self.recursive).to(edge_index.device)


def _csc(colptr: Tensor, row: Tensor) -> CSC:
    # perm is the identity: edge ids stay CSC positions, as pyg-lib's.
    return CSC(colptr.long(), row, torch.arange(row.numel()))


def _torch_sampler(self: NeighborSampler) -> TorchNeighborSampler:
    """The sampler's ``TorchNeighborSampler``, built on first use over its
    CSC arrays and kept on it; its fanouts follow the sampler's."""
    arrays = self.colptr_dict if self.is_hetero else self.colptr
    cached: Optional[Tuple[Any, TorchNeighborSampler]] = \
        getattr(self, _CACHE, None)
    if cached is None or cached[0] is not arrays:
        if self.is_hetero:
            csc = {self.to_edge_type[rel]: _csc(colptr, self.row_dict[rel])
                   for rel, colptr in self.colptr_dict.items()}
            num_nodes = dict(self.num_nodes)
        else:
            csc = {_EDGE: _csc(self.colptr, self.row)}
            num_nodes = {_NODE: self.num_nodes}
        cached = (arrays, TorchNeighborSampler.from_csc(
            num_nodes, csc, self._num_neighbors, self.subgraph_type,
            self.replace))
        setattr(self, _CACHE, cached)
    sampler = cached[1]
    sampler.num_neighbors = self._num_neighbors
    sampler.replace = self.replace
    return sampler


def _refuse_unsupported(self: NeighborSampler, seed_time: Any) -> None:
    for flag, what in ((self.disjoint, "disjoint subgraphs (disjoint=True)"),
                       (self.is_temporal or seed_time is not None,
                        "temporal sampling (time_attr)"),
                       (getattr(self, "edge_weight", None) is not None,
                        "weighted sampling (weight_attr)")):
        if flag:
            raise NotImplementedError(
                f"NeighborSampler's {what} needs pyg-lib; the pure-Python "
                "sampler that runs without it "
                "(poptorch_geometric.use_pure_python_backends) samples "
                "directional, bidirectional and induced subgraphs only.")


def neighbor_sample(self: NeighborSampler,
                    seed: Union[Tensor, Dict[str, Tensor]],
                    seed_time: Any = None, **kwargs: Any
                    ) -> Union[SamplerOutput, HeteroSamplerOutput]:
    """``NeighborSampler._sample`` on the plain-PyTorch sampler."""
    _refuse_unsupported(self, seed_time)
    out = _torch_sampler(self)._sample(seed)
    backward = self.sample_direction == "backward"
    if not self.is_hetero:
        if backward:
            out.row, out.col = out.col, out.row
        return out
    if backward:
        out.row, out.col = out.col, out.row
        restore = self.to_restored_edge_type
        out.row, out.col, out.edge = (remap_keys(d, restore) for d in
                                      (out.row, out.col, out.edge))
        if out.num_sampled_edges is not None:
            out.num_sampled_edges = remap_keys(out.num_sampled_edges,
                                               restore)
    return out
