"""Random trimming of graphs that overflow a node or edge budget.

Trimming removes randomly chosen nodes (with their edges) or edges until the
batch fits, but first protects one random element of every non-empty graph,
so trimming never empties a graph. It uses the global torch RNG.

Example::

    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> slices, keep = create_slices_and_preserve_mask(4, [3, 3])
    >>> slices, int(keep.sum()), [int(keep[s].sum()) > 0 for s in slices]
    ([slice(0, 3, None), slice(3, 6, None)], 4, [True, True])
"""
import dataclasses
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.data.data import BaseData

__all__ = ["create_slices_and_preserve_mask", "TrimCounts"]


@dataclasses.dataclass
class TrimCounts:
    """What trimming removed so far: ``graphs`` counts each time a graph
    was cut down, ``nodes`` and ``edges`` the elements removed."""
    graphs: int = 0
    nodes: int = 0
    edges: int = 0

    def add(self, graphs: int, nodes: int = 0, edges: int = 0) -> None:
        self.graphs += graphs
        self.nodes += nodes
        self.edges += edges


def create_slices_and_preserve_mask(
        max_num: int, counts: Sequence[int]
) -> Tuple[Optional[List[slice]], Optional[Tensor]]:
    """Chooses which of ``sum(counts)`` elements to keep so that at most
    ``max_num`` remain, keeping at least one of every non-empty graph.

    Returns the slice of each graph's elements in the concatenation and the
    boolean keep-mask over the concatenation, or ``(None, None)`` when
    nothing needs to go.

    Raises:
        RuntimeError: ``max_num`` is smaller than the number of non-empty
            graphs, so some graph would be emptied.
    """
    total = sum(counts)
    if total < max_num:
        return None, None
    counts_t = torch.tensor(list(counts), dtype=torch.long)
    offsets = torch.cumsum(counts_t, 0) - counts_t
    slices = [slice(int(o), int(o) + int(c))
              for o, c in zip(offsets.tolist(), counts)]
    nonempty = counts_t > 0
    num_protected = int(nonempty.sum())
    if max_num < num_protected:
        raise RuntimeError(
            f"Cannot trim {num_protected} non-empty graph(s) to {max_num} "
            "element(s) without emptying a graph; increase the budget.")
    protected = torch.zeros(total, dtype=torch.bool)
    picks = (torch.rand(num_protected) *
             counts_t[nonempty].to(torch.float)).long()
    protected[offsets[nonempty] + picks] = True
    keep = torch.ones(total, dtype=torch.bool)
    candidates = torch.nonzero(~protected).view(-1)
    drop = candidates[torch.randperm(candidates.numel())[:total - max_num]]
    keep[drop] = False
    return slices, keep


def prune(data_list: List[BaseData], kind: str,
          counts: Dict[Hashable, List[int]],
          limits: Dict[Hashable, int]) -> List[BaseData]:
    """Randomly removes ``kind`` ("nodes" or "edges") from the graphs until
    the count of every type (``None`` for ``Data``) is within its limit.

    Nodes go with their incident edges (induced subgraphs); removing edges
    keeps every node. Graphs that keep everything are returned as they are.

    Raises:
        RuntimeError: a limit is below the number of graphs that have
            such elements (some graph would lose its last one).
    """
    subsets: List[Dict[Hashable, Tensor]] = [{} for _ in data_list]
    for store_type, type_counts in counts.items():
        limit = limits[store_type]
        if sum(type_counts) <= limit:
            continue
        # Trimming keeps a node of every graph and an edge of every graph
        # that has edges.
        keeping = len(data_list) if kind == "nodes" else \
            sum(1 for c in type_counts if c > 0)
        if limit < keeping:
            of_type = "" if store_type is None else f" of type {store_type!r}"
            having = "" if kind == "nodes" else " with edges"
            raise RuntimeError(
                f"Cannot trim {keeping} graph(s){having} to {limit} "
                f"{kind[:-1]}(s){of_type}: every graph keeps at least one "
                f"{kind[:-1]}. Increase num_{kind} in FixedSizeOptions or "
                "put fewer graphs in a batch.")
        slices, keep = create_slices_and_preserve_mask(limit, type_counts)
        for subset, s in zip(subsets, slices):
            if not bool(keep[s].all()):
                subset[store_type] = keep[s]
    return [_cut(d, kind, subset) if subset else d
            for d, subset in zip(data_list, subsets)]


def _cut(data: BaseData, kind: str,
         subset: Dict[Hashable, Tensor]) -> BaseData:
    cut = data.subgraph if kind == "nodes" else data.edge_subgraph
    return cut(subset) if isinstance(data, HeteroData) else cut(subset[None])
