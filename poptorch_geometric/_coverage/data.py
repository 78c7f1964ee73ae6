"""The graphs every coverage row runs on: families of small random graphs
with every attribute a PyG layer may ask for, each batched twice: plainly
(what eager PyG sees) and padded to the same fixed sizes (what the simulated
IPU sees), so that one traced model takes every family.

The families are the graphs real data has, not only clean random ones:

- ``plain``: no self-loops, no duplicate edges, padding values 0;
- ``loops``: self-loops (one node with two), duplicate edges, a graph of two
  nodes joined both ways, and non-zero padding values;
- ``unweighted``: the ``loops`` graphs without ``edge_weight``, so that
  layers whose edge weights are optional run without them;
- ``sparse``: a one-node graph without edges, a graph whose last nodes are
  isolated, a graph without any edge, and non-zero padding values.

Example::

    >>> [pair.name for pair in make_families(seed=0)]
    ['plain', 'loops', 'unweighted', 'sparse']
    >>> pair = make_batches(seed=0)
    >>> pair.padded.num_nodes, pair.plain.num_nodes
    (24, 16)
    >>> bool(pair.padded.nodes_mask[:16].all()), int(pair.padded.nodes_mask.sum())
    (True, 16)
"""
import dataclasses
from typing import List, Optional, Tuple

import torch
from torch_geometric.data import Batch, Data

from ..collate import FixedSizeCollater
from ..fixed_size_options import FixedSizeOptions

__all__ = ["BatchPair", "make_batches", "make_families", "FAMILIES",
           "IN_CHANNELS", "EDGE_DIM", "NUM_RELATIONS", "NUM_NODE_TYPES",
           "FIXED_SIZES"]

IN_CHANNELS = 16
EDGE_DIM = 4
NUM_RELATIONS = 3
NUM_NODE_TYPES = 2
#: Node, edge and graph slots of every padded batch.
FIXED_SIZES = (24, 44, 5)


@dataclasses.dataclass(frozen=True)
class _Spec:
    """One real graph: nodes; edges among the first ``connected`` nodes
    (all when None), without self-loops; then ``loops`` self-loops and
    ``repeats`` copies of its first edges."""
    nodes: int
    edges: int
    connected: Optional[int] = None
    loops: Tuple[int, ...] = ()
    repeats: int = 0


@dataclasses.dataclass(frozen=True)
class _Family:
    name: str
    description: str
    graphs: Tuple[_Spec, ...]
    #: node, edge and graph padding values.
    pad_values: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: whether the graphs have ``edge_weight``.
    weighted: bool = True


#: Padding values that are not zero and are valid indices for the integer
#: attributes (edge_type < NUM_RELATIONS, node_type < NUM_NODE_TYPES).
_PAD = (1.0, 2.0, -1.0)

_LOOPS = (_Spec(6, 10, loops=(0, 0, 3), repeats=2), _Spec(2, 2, loops=(1, )),
          _Spec(8, 14, loops=(5, ), repeats=3))

FAMILIES: Tuple[_Family, ...] = (
    _Family("plain", "no self-loops or duplicate edges, zero padding",
            (_Spec(6, 14), _Spec(2, 2), _Spec(8, 18))),
    _Family("loops", "self-loops (two on one node), duplicate edges, "
            "non-zero padding", _LOOPS, _PAD),
    _Family("unweighted", "the `loops` graphs without `edge_weight`, so "
            "that optional edge weights are left out", _LOOPS, _PAD,
            weighted=False),
    _Family("sparse", "a one-node graph without edges, isolated nodes, a "
            "graph without edges, non-zero padding",
            (_Spec(1, 0), _Spec(7, 8, connected=4), _Spec(5, 0),
             _Spec(6, 12)), _PAD),
)


@dataclasses.dataclass
class BatchPair:
    """The same real graphs as one plain PyG batch and one padded batch
    (real nodes, edges and graphs first, then padding)."""
    plain: Batch
    padded: Batch
    name: str = "plain"


def _edges(spec: _Spec, gen: torch.Generator) -> torch.Tensor:
    within = spec.connected or spec.nodes
    if spec.edges == 0:
        edge_index = torch.zeros(2, 0, dtype=torch.long)
    else:
        src = torch.randint(0, within, (spec.edges, ), generator=gen)
        # A non-zero shift modulo n never maps a node to itself.
        shift = torch.randint(1, within, (spec.edges, ), generator=gen)
        edge_index = torch.stack([src, (src + shift) % within])
    loops = torch.tensor(spec.loops, dtype=torch.long).expand(2, -1)
    return torch.cat([edge_index, loops, edge_index[:, :spec.repeats]],
                     dim=1)


def _graph(spec: _Spec, gen: torch.Generator) -> Data:
    n = spec.nodes
    edge_index = _edges(spec, gen)
    e = edge_index.size(1)
    return Data(
        x=torch.randn(n, IN_CHANNELS, generator=gen),
        edge_index=edge_index,
        edge_attr=torch.randn(e, EDGE_DIM, generator=gen),
        edge_weight=torch.rand(e, generator=gen) + 0.5,
        edge_type=torch.randint(0, NUM_RELATIONS, (e, ), generator=gen),
        pos=torch.randn(n, 3, generator=gen),
        normal=torch.nn.functional.normalize(
            torch.randn(n, 3, generator=gen), dim=-1),
        node_type=torch.randint(0, NUM_NODE_TYPES, (n, ), generator=gen),
        colors=torch.randint(0, 3, (n, ), generator=gen),
        y=torch.randn(1, generator=gen))


def _pair(family: _Family, seed: int) -> BatchPair:
    gen = torch.Generator().manual_seed(seed)
    graphs: List[Data] = [_graph(spec, gen) for spec in family.graphs]
    if not family.weighted:
        for graph in graphs:
            del graph.edge_weight
    node_pad, edge_pad, graph_pad = family.pad_values
    sizes = FixedSizeOptions(num_nodes=FIXED_SIZES[0],
                             num_edges=FIXED_SIZES[1],
                             num_graphs=FIXED_SIZES[2],
                             node_pad_value=node_pad,
                             edge_pad_value=edge_pad,
                             graph_pad_value=graph_pad)
    padded = FixedSizeCollater(sizes, add_masks_to_batch=True)(graphs)
    return BatchPair(plain=Batch.from_data_list(graphs), padded=padded,
                     name=family.name)


def make_families(seed: int = 0) -> List[BatchPair]:
    """One batch pair per family of :data:`FAMILIES`, drawn from
    ``seed``; every padded batch has the shapes of :data:`FIXED_SIZES`."""
    return [_pair(family, seed) for family in FAMILIES]


def make_batches(seed: int = 0) -> BatchPair:
    """The ``plain`` family's batch pair, drawn from ``seed``."""
    return _pair(FAMILIES[0], seed)
