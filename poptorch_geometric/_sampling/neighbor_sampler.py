"""A fixed-fanout neighbour sampler in plain torch, for PyG's loaders.

PyG's ``NeighborSampler`` needs pyg-lib or torch-sparse, which have no
wheels for every platform (without them,
:mod:`poptorch_geometric.pure_backends` makes it sample with this
sampler's code). :class:`TorchNeighborSampler` takes the same
arguments and gives the same outputs (``SamplerOutput`` /
``HeteroSamplerOutput``), so ``torch_geometric.loader.NeighborLoader``
accepts it as its ``neighbor_sampler``.

Example::

    >>> from torch_geometric.data import Data
    >>> from torch_geometric.loader import NeighborLoader
    >>> from poptorch_geometric.datasets import power_law_graph
    >>> data = power_law_graph(num_nodes=1000, num_edges=8000)
    >>> sampler = TorchNeighborSampler(data, num_neighbors=[5, 3])
    >>> loader = NeighborLoader(data, [5, 3], batch_size=32,
    ...                         neighbor_sampler=sampler)
    >>> batch = next(iter(loader))
    >>> batch.batch_size, batch.n_id[:3].tolist()      # seeds come first
    (32, [0, 1, 2])
    >>> bool((batch.edge_index < batch.num_nodes).all())
    True
"""
import threading
from typing import Any, Dict, Hashable, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import (BaseSampler, EdgeSamplerInput,
                                     HeteroSamplerOutput, NegativeSampling,
                                     NodeSamplerInput, SamplerOutput)
from torch_geometric.sampler.base import NumNeighbors, SubgraphType
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample

from .csc import CSC, csc_of
from .fanout import expand_ranges, pick_neighbors
from .node_map import NodeMap

__all__ = ["TorchNeighborSampler"]

# A homogeneous graph is sampled as one node type and one edge type.
_NODE: Hashable = None
_EDGE: Tuple = (None, None, None)

Seeds = Union[Tensor, Dict[str, Tensor]]


class TorchNeighborSampler(BaseSampler):
    """Samples up to ``num_neighbors[h]`` in-neighbours of every node added
    at hop ``h``, from CSC arrays built once per graph, for all the nodes of
    a hop at once. Drop-in for PyG's ``NeighborSampler``.

    Like PyG's sampler: the seeds are the first nodes (``n_id[:batch_size]``
    is the seed batch), new nodes follow in the order they are first
    reached, edges point from the sampled neighbour to the node that
    sampled it, ``e_id`` holds original edge ids, ``num_sampled_nodes`` /
    ``num_sampled_edges`` count them per hop. Without replacement each node
    keeps a uniformly random subset of ``min(degree, fanout)`` of its
    in-edges; with replacement, ``fanout`` uniform draws. ``-1`` takes every
    in-edge. ``subgraph_type="induced"`` (or ``directed=False``) keeps every
    edge between the sampled nodes, ``"bidirectional"`` adds the reverse of
    every sampled edge. Heterogeneous graphs take a fanout list per edge type
    (a dict), as in PyG. Random numbers come from torch's global generator:
    ``torch.manual_seed`` makes batches reproducible.

    Not supported (``NotImplementedError``): ``disjoint=True``, temporal
    sampling (``time_attr``) and weighted sampling (``weight_attr``).

    Args:
        data: a ``Data`` or ``HeteroData`` with ``edge_index`` per edge type.
        num_neighbors: fanout per hop (a list), or per edge type (a dict of
            lists).
        subgraph_type: ``"directional"``, ``"bidirectional"`` or
            ``"induced"``.
        replace: sample with replacement.
        directed: ``False`` is ``subgraph_type="induced"`` (PyG's deprecated
            flag).
        share_memory: put the CSC arrays in shared memory (loader workers).
    """

    def __init__(self, data: Union[Data, HeteroData],
                 num_neighbors: Union[List[int], Dict[Any, List[int]],
                                      NumNeighbors],
                 subgraph_type: Union[SubgraphType, str] = "directional",
                 replace: bool = False, disjoint: bool = False,
                 temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None,
                 weight_attr: Optional[str] = None, is_sorted: bool = False,
                 share_memory: bool = False, directed: bool = True) -> None:
        del temporal_strategy, is_sorted  # no temporal sampling; CSC checks
        _reject_unsupported(disjoint, time_attr, weight_attr)
        num_nodes, csc = _graph_arrays(data)
        if share_memory:
            for arrays in csc.values():
                arrays.share_memory_()
        self._setup(num_nodes, csc, num_neighbors,
                    SubgraphType.induced if not directed else subgraph_type,
                    replace, isinstance(data, HeteroData))

    @classmethod
    def from_csc(cls, num_nodes: Dict[Hashable, int], csc: Dict[Tuple, CSC],
                 num_neighbors: Union[List[int], Dict[Any, List[int]],
                                      NumNeighbors],
                 subgraph_type: Union[SubgraphType, str] = "directional",
                 replace: bool = False) -> "TorchNeighborSampler":
        """A sampler over CSC arrays built elsewhere (PyG's
        ``NeighborSampler`` keeps its own): node counts per node type and
        arrays per edge type ``(src, rel, dst)``, or ``{None: n}`` and
        ``{(None, None, None): csc}`` for a homogeneous graph. ``e_id``
        holds the arrays' ``perm`` entries."""
        sampler = cls.__new__(cls)
        sampler._setup(num_nodes, csc, num_neighbors, subgraph_type, replace,
                       _EDGE not in csc)
        return sampler

    def _setup(self, num_nodes: Dict[Hashable, int], csc: Dict[Tuple, CSC],
               num_neighbors: Any, subgraph_type: Union[SubgraphType, str],
               replace: bool, is_hetero: bool) -> None:
        self.subgraph_type = SubgraphType(subgraph_type)
        self.replace = replace
        self.disjoint = False
        self.is_hetero = is_hetero
        self.num_nodes, self.csc = num_nodes, csc
        self.num_neighbors = num_neighbors
        self._maps: Dict[Hashable, NodeMap] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> Dict[str, Any]:
        # Loader workers started by "spawn" get a pickled copy: the lock
        # cannot travel and the scratch maps are rebuilt on first use.
        state = self.__dict__.copy()
        state["_maps"], state["_lock"] = {}, None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def num_neighbors(self) -> NumNeighbors:
        """The fanouts, as PyG's ``NumNeighbors`` (settable with a list, a
        dict per edge type or a ``NumNeighbors``)."""
        return self._num_neighbors

    @num_neighbors.setter
    def num_neighbors(self, value: Any) -> None:
        if not isinstance(value, NumNeighbors):
            value = NumNeighbors(value)
        edge_types = list(self.csc) if self.is_hetero else None
        fanouts = value.get_values(edge_types)
        if not self.is_hetero:
            if isinstance(fanouts, dict):
                raise ValueError("num_neighbors is a dict per edge type but "
                                 "the graph is homogeneous: pass a list.")
            fanouts = {_EDGE: fanouts}
        for edge_type, hops in fanouts.items():
            if any(not isinstance(k, int) or isinstance(k, bool) or k < -1
                   for k in hops):
                raise ValueError(
                    f"num_neighbors{_of(edge_type)} must be ints >= -1 (-1: "
                    f"every neighbour), got {hops}.")
        self._num_neighbors = value
        self._fanouts: Dict[Tuple, List[int]] = fanouts
        self.num_hops = max((len(h) for h in fanouts.values()), default=0)

    @property
    def edge_permutation(self) -> None:
        """``None``: ``e_id`` already holds the original edge ids."""
        return None

    def sample_from_nodes(self, inputs: NodeSamplerInput
                          ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        """Samples the subgraph around the seed nodes of ``inputs``
        (``NeighborLoader``)."""
        out = node_sample(inputs, self._sample)
        if self.subgraph_type == SubgraphType.bidirectional:
            out = out.to_bidirectional()
        return out

    def sample_from_edges(self, inputs: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling] = None
                          ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        """Samples around both ends of seed edges (``LinkNeighborLoader``),
        with PyG's negative sampling."""
        num_nodes = self.num_nodes if self.is_hetero \
            else self.num_nodes[_NODE]
        out = edge_sample(inputs, self._sample, num_nodes, False, None,
                          neg_sampling)
        if self.subgraph_type == SubgraphType.bidirectional:
            out = out.to_bidirectional()
        return out

    def _sample(self, seed: Seeds, seed_time: Optional[Seeds] = None,
                **kwargs: Any) -> Union[SamplerOutput, HeteroSamplerOutput]:
        if seed_time is not None:
            _reject_unsupported(False, "input_time", None)
        seeds = seed if isinstance(seed, dict) else {_NODE: seed}
        with self._lock:
            maps = self._start(seeds)
            try:
                edges = self._hops(maps, seeds)
                if self.subgraph_type == SubgraphType.induced:
                    edges = self._induced(maps)
                return self._output(maps, edges)
            finally:
                for node_map in maps.values():
                    node_map.reset()

    def _start(self, seeds: Dict[Hashable, Tensor]) -> Dict[Hashable,
                                                           NodeMap]:
        for node_type, ids in seeds.items():
            if node_type not in self.num_nodes:
                raise ValueError(f"Seed node type {node_type!r} is not a "
                                 "node type of the graph.")
            bound = self.num_nodes[node_type]
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= bound):
                raise ValueError(
                    f"Seed nodes must be in [0, {bound}), got "
                    f"{int(ids.min())}..{int(ids.max())}.")
        for node_type, count in self.num_nodes.items():
            if node_type not in self._maps:
                self._maps[node_type] = NodeMap(count)
            empty = torch.zeros(0, dtype=torch.long)
            self._maps[node_type].start(
                seeds.get(node_type, empty).to(torch.long))
        return self._maps

    def _hops(self, maps: Dict[Hashable, NodeMap],
              seeds: Dict[Hashable, Tensor]) -> "_Edges":
        """Samples hop by hop; a hop's frontier is the nodes it added."""
        frontier = {t: (m.ids(), 0) for t, m in maps.items()}
        edges = _Edges(self.csc)
        for hop in range(self.num_hops):
            picked = {t: [] for t in maps}
            for edge_type, csc in self.csc.items():
                fanouts = self._fanouts[edge_type]
                fanout = fanouts[hop] if hop < len(fanouts) else 0
                nodes, offset = frontier[edge_type[2]]
                slots, owner = pick_neighbors(csc, nodes, fanout,
                                              self.replace)
                picked[edge_type[0]].append((edge_type, slots, owner + offset))
            for node_type, node_map in maps.items():
                offset = node_map.count
                sources = [self.csc[e].sources(s)
                           for e, s, _ in picked[node_type]]
                new, local = node_map.add(torch.cat(sources) if sources else
                                          torch.zeros(0, dtype=torch.long))
                frontier[node_type] = (new, offset)
                for (edge_type, slots, col), row in zip(
                        picked[node_type],
                        local.split([s.numel() for s in sources])):
                    edges.add(edge_type, row, col,
                              self.csc[edge_type].edge_ids(slots))
        return edges

    def _induced(self, maps: Dict[Hashable, NodeMap]) -> "_Edges":
        """Every edge between two sampled nodes."""
        edges = _Edges(self.csc)
        for edge_type, csc in self.csc.items():
            slots, col = expand_ranges(*csc.degree(maps[edge_type[2]].ids()))
            row = maps[edge_type[0]].local(csc.sources(slots))
            keep = row >= 0
            slots = slots.masked_select(keep)
            edges.add(edge_type, row.masked_select(keep),
                      col.masked_select(keep), csc.edge_ids(slots))
        edges.per_hop = False
        return edges

    def _output(self, maps: Dict[Hashable, NodeMap], edges: "_Edges"
                ) -> Union[SamplerOutput, HeteroSamplerOutput]:
        row, col, edge = edges.cat()
        # Per-hop edge counts mean nothing for an induced subgraph.
        per_hop_edges = edges.counts() if edges.per_hop else None
        if not self.is_hetero:
            return SamplerOutput(
                node=maps[_NODE].ids(), row=row[_EDGE], col=col[_EDGE],
                edge=edge[_EDGE], batch=None,
                num_sampled_nodes=list(maps[_NODE].hops),
                num_sampled_edges=None if per_hop_edges is None
                else per_hop_edges[_EDGE])
        return HeteroSamplerOutput(
            node={t: m.ids() for t, m in maps.items()}, row=row, col=col,
            edge=edge, batch=None,
            num_sampled_nodes={t: list(m.hops) for t, m in maps.items()},
            num_sampled_edges=per_hop_edges)


class _Edges:
    """The sampled edges of each edge type, hop by hop."""

    def __init__(self, csc: Dict[Tuple, CSC]) -> None:
        self.parts: Dict[Tuple, List[Tuple[Tensor, Tensor, Tensor]]] = {
            edge_type: [] for edge_type in csc}
        self.per_hop = True

    def add(self, edge_type: Tuple, row: Tensor, col: Tensor,
            edge: Tensor) -> None:
        self.parts[edge_type].append((row, col, edge))

    def counts(self) -> Dict[Tuple, List[int]]:
        return {t: [p[0].numel() for p in parts]
                for t, parts in self.parts.items()}

    def cat(self) -> Tuple[Dict[Tuple, Tensor], ...]:
        empty = torch.zeros(0, dtype=torch.long)
        return tuple({t: torch.cat([p[i] for p in parts]) if parts else empty
                      for t, parts in self.parts.items()} for i in range(3))


def _graph_arrays(data: Union[Data, HeteroData]
                  ) -> Tuple[Dict[Hashable, int], Dict[Tuple, CSC]]:
    """Node counts per node type and CSC per edge type (shared between all
    samplers of the graph)."""
    if isinstance(data, HeteroData):
        num_nodes = {t: data[t].num_nodes for t in data.node_types}
        stores = {t: data[t] for t in data.edge_types}
    elif isinstance(data, Data):
        num_nodes, stores = {_NODE: data.num_nodes}, {_EDGE: data}
    else:
        raise TypeError(f"TorchNeighborSampler samples a Data or HeteroData "
                        f"object, got {type(data).__name__}.")
    csc = {}
    for edge_type, store in stores.items():
        edge_index = getattr(store, "edge_index", None)
        if edge_index is None:
            raise ValueError(
                f"The graph has no edge_index{_of(edge_type)}: "
                "TorchNeighborSampler reads edge_index (convert an adj_t "
                "SparseTensor back with .t().coo()).")
        csc[edge_type] = csc_of(edge_index, num_nodes[edge_type[0]],
                                num_nodes[edge_type[2]])
    return num_nodes, csc


def _of(edge_type: Tuple) -> str:
    return "" if edge_type == _EDGE else f" of edge type {edge_type}"


def _reject_unsupported(disjoint: bool, time_attr: Optional[str],
                        weight_attr: Optional[str]) -> None:
    for flag, what in ((disjoint, "disjoint subgraphs (disjoint=True)"),
                       (time_attr, "temporal sampling (time_attr, "
                                   "input_time)"),
                       (weight_attr, "weighted sampling (weight_attr)")):
        if flag:
            raise NotImplementedError(
                f"TorchNeighborSampler does not support {what}; install "
                "pyg-lib and use PyG's NeighborSampler for it.")
