"""The graphs every coverage row runs on: a few small random graphs with
every attribute a PyG layer may ask for, batched twice: plainly (what eager
PyG sees) and padded to fixed sizes (what the simulated IPU sees).

Example::

    >>> pair = make_batches(seed=0)
    >>> pair.padded.num_nodes, pair.plain.num_nodes
    (24, 16)
    >>> bool(pair.padded.nodes_mask[:16].all()), int(pair.padded.nodes_mask.sum())
    (True, 16)
"""
import dataclasses
from typing import List

import torch
from torch_geometric.data import Batch, Data

from ..collate import FixedSizeCollater
from ..fixed_size_options import FixedSizeOptions

__all__ = ["BatchPair", "make_batches", "IN_CHANNELS", "EDGE_DIM", "PAD_ROOM",
           "NUM_RELATIONS", "NUM_NODE_TYPES", "GRAPH_SIZES"]

IN_CHANNELS = 16
EDGE_DIM = 4
NUM_RELATIONS = 3
NUM_NODE_TYPES = 2
#: (nodes, edges) of the real graphs of a batch: one with fewer nodes than
#: the knn rows' k, none with self-loops (padding edges are the only loops).
GRAPH_SIZES = ((6, 14), (2, 2), (8, 18))
#: Padding room on top of the real graphs: nodes, edges, graphs.
PAD_ROOM = (8, 10, 2)


@dataclasses.dataclass
class BatchPair:
    """The same real graphs as one plain PyG batch and one padded batch
    (real nodes, edges and graphs first, then padding)."""
    plain: Batch
    padded: Batch


def _graph(num_nodes: int, num_edges: int, gen: torch.Generator) -> Data:
    src = torch.randint(0, num_nodes, (num_edges, ), generator=gen)
    # A non-zero shift modulo n never maps a node to itself: no self-loops.
    shift = torch.randint(1, num_nodes, (num_edges, ), generator=gen)
    dst = (src + shift) % num_nodes
    return Data(
        x=torch.randn(num_nodes, IN_CHANNELS, generator=gen),
        edge_index=torch.stack([src, dst]),
        edge_attr=torch.randn(num_edges, EDGE_DIM, generator=gen),
        edge_weight=torch.rand(num_edges, generator=gen) + 0.5,
        edge_type=torch.randint(0, NUM_RELATIONS, (num_edges, ),
                                generator=gen),
        pos=torch.randn(num_nodes, 3, generator=gen),
        normal=torch.nn.functional.normalize(
            torch.randn(num_nodes, 3, generator=gen), dim=-1),
        node_type=torch.randint(0, NUM_NODE_TYPES, (num_nodes, ),
                                generator=gen),
        colors=torch.randint(0, 3, (num_nodes, ), generator=gen),
        y=torch.randn(1, generator=gen))


def make_batches(seed: int = 0) -> BatchPair:
    """The real graphs of :data:`GRAPH_SIZES`, drawn from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    graphs: List[Data] = [_graph(n, e, gen) for n, e in GRAPH_SIZES]
    nodes = sum(n for n, _ in GRAPH_SIZES)
    edges = sum(e for _, e in GRAPH_SIZES)
    sizes = FixedSizeOptions(num_nodes=nodes + PAD_ROOM[0],
                             num_edges=edges + PAD_ROOM[1],
                             num_graphs=len(graphs) + PAD_ROOM[2])
    padded = FixedSizeCollater(sizes, add_masks_to_batch=True)(graphs)
    return BatchPair(plain=Batch.from_data_list(graphs), padded=padded)
