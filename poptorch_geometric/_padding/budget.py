"""Room accounting of one fixed-size batch: real sizes against the budgets,
the over-size checks and the padding plan.

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> from poptorch_geometric.fixed_size_options import FixedSizeOptions
    >>> graphs = [Data(x=torch.ones(3, 1), edge_index=torch.zeros(2, 4).long())]
    >>> room = BatchRoom.measure(graphs, FixedSizeOptions(10, 20, 3))
    >>> room.nodes[None].real, room.nodes[None].pad, room.edges[None].pad
    (3, 7, 16)
"""
import dataclasses
from typing import Any, Dict, Hashable, List, Optional, Tuple

from torch_geometric.data import HeteroData
from torch_geometric.data.data import BaseData

from .columns import Columns
from .plan import (AttrSpec, Level, PaddingPlan, split_evenly,
                       split_hosted)
from .sizes import hetero_counts, homogeneous_counts


@dataclasses.dataclass
class Room:
    """Real elements of one kind (nodes or edges, of one type) against its
    budget."""
    kind: str  # "nodes" or "edges"
    store_type: Hashable  # None for homogeneous data
    counts: List[int]  # per real graph
    limit: int

    @property
    def real(self) -> int:
        return sum(self.counts)

    @property
    def pad(self) -> int:
        return self.limit - self.real

    @property
    def label(self) -> str:
        if self.store_type is None:
            return self.kind
        return f"{self.store_type!r} {self.kind}"


def _limit(budget: Any, store_type: Hashable, kind: str) -> int:
    if store_type is None:
        return budget
    if store_type not in budget:
        raise AssertionError(
            f"FixedSizeOptions has no {kind[:-1]} budget for type "
            f"{store_type!r} of the data; give num_{kind} for every type "
            f"(it has {list(budget)}).")
    return budget[store_type]


@dataclasses.dataclass
class BatchRoom:
    """Node and edge room of a list of real graphs, by type."""
    nodes: Dict[Hashable, Room]
    edges: Dict[Hashable, Room]

    @classmethod
    def measure(cls, data_list: List[BaseData], opts: Any,
                columns: Optional[Columns] = None) -> "BatchRoom":
        if isinstance(data_list[0], HeteroData):
            node_counts, edge_counts = hetero_counts(data_list)
        else:
            if isinstance(opts.num_nodes, dict) or \
                    isinstance(opts.num_edges, dict):
                raise ValueError(
                    "FixedSizeOptions give sizes per node/edge type but the "
                    "data is homogeneous (Data): give int sizes.")
            nodes, edges = homogeneous_counts(data_list, columns)
            node_counts, edge_counts = {None: nodes}, {None: edges}
        return cls(
            {t: Room("nodes", t, c, _limit(opts.num_nodes, t, "nodes"))
             for t, c in node_counts.items()},
            {t: Room("edges", t, c, _limit(opts.num_edges, t, "edges"))
             for t, c in edge_counts.items()})

    def without_graphs(self) -> "BatchRoom":
        """The same budgets with no real graph: everything is padding."""
        return BatchRoom(
            {t: dataclasses.replace(r, counts=[]) for t, r in self.nodes.items()},
            {t: dataclasses.replace(r, counts=[]) for t, r in self.edges.items()})

    def all(self) -> List[Room]:
        return [*self.nodes.values(), *self.edges.values()]

    def overflows(self, kind: str) -> bool:
        rooms = self.nodes if kind == "nodes" else self.edges
        return any(r.pad < 0 for r in rooms.values())

    def lacks_padding_node(self) -> bool:
        """True when edges need padding but every node slot of a node type
        they could sit on is taken by real nodes."""
        for edge_type, edges in self.edges.items():
            node_types = (None,) if edge_type is None \
                else (edge_type[0], edge_type[-1])
            if edges.pad > 0 and any(
                    t in self.nodes and self.nodes[t].pad == 0
                    for t in node_types):
                return True
        return False

    def check_fits(self, num_graphs: int, budget_graphs: int,
                   trims: Tuple[bool, bool] = (False, False)) -> None:
        """Raises ``RuntimeError`` when real elements overflow a budget, or
        when padding is needed but no padding graph slot is left. ``trims``
        says whether the collater trims nodes and edges (the fix the
        message suggests depends on it)."""
        for room in self.all():
            if room.pad < 0:
                raise RuntimeError(_oversize_message(
                    room, num_graphs, budget_graphs, *trims))
        if num_graphs == budget_graphs and any(r.pad > 0 for r in self.all()):
            raise RuntimeError(
                f"Requested to pad a batch to {budget_graphs} graphs but "
                f"collater got a list of {num_graphs} graphs and cannot "
                "create additional graphs to pad nodes and edges.")

    def plan(self, specs: Dict[Hashable, List[AttrSpec]],
             num_pad_graphs: int, hetero: bool,
             trims_nodes: bool = False) -> PaddingPlan:
        """Shares the padding among ``num_pad_graphs`` padding graphs:
        nodes evenly (larger shares first); edges evenly over the padding
        graphs that have a node to host them (of both end types).
        ``trims_nodes``: the collater trims, and has trimmed nodes to make
        room for padding edges where it could."""
        k = num_pad_graphs
        node_shares = {t: split_evenly(r.pad, k)
                       for t, r in self.nodes.items()}
        edge_shares = {}
        for t, room in self.edges.items():
            hosts = k
            for node_type in ((t[0], t[-1]) if hetero else (None,)):
                if node_type in self.nodes:
                    hosts = min(hosts, self.nodes[node_type].pad)
            if room.pad > 0 and hosts == 0 and _has_edge_attrs(
                    specs.get(t if hetero else None, [])):
                raise RuntimeError(_no_host_message(
                    room, self, trims_nodes))
            edge_shares[t] = split_hosted(room.pad, k, hosts)
        return PaddingPlan(k, hetero, specs, node_shares, edge_shares)


def _has_edge_attrs(specs: List[AttrSpec]) -> bool:
    return any(s.level is Level.EDGE for s in specs)


def _oversize_message(room: Room, num_graphs: int, budget_graphs: int,
                      trim_nodes: bool = False,
                      trim_edges: bool = False) -> str:
    option = "trim_nodes" if room.kind == "nodes" else "trim_edges"
    fix = f"Increase num_{room.kind} in FixedSizeOptions"
    if (trim_nodes, trim_edges)[room.kind == "edges"]:
        fix += " (trimming is on but could not make them fit)."
    elif trim_nodes or trim_edges:
        # Trimming the other kind is on: the fix is to trim both.
        fix += (f", or set {option} too (OverSizeStrategy."
                "TrimNodesAndEdges) to trim the samples to fit.")
    else:
        fix += (f", or set {option} (OverSizeStrategy.Trim*) to trim the "
                "samples to fit.")
    return (
        "The fixed sizes given don't allocate enough space for the number "
        f"of {room.label} required to fit {num_graphs} sample(s) into a batch"
        f" ({budget_graphs} including extra padded graph(s)): the samples "
        f"hold {room.real} {room.kind} but the fixed size allows "
        f"{room.limit} {room.kind}. {fix}")


def _no_host_message(room: Room, batch: "BatchRoom",
                     trims_nodes: bool = False) -> str:
    full = ", ".join(f"{r.label} ({r.real}/{r.limit})"
                     for r in batch.nodes.values() if r.pad == 0)
    return (
        f"Cannot pad {room.pad} {room.label}: the real graphs fill every "
        f"node slot of {full}, so no padding node is left to hold padding "
        "edges (they would point past the last node). Reserve at least one "
        "node for padding: increase num_nodes in FixedSizeOptions by one"
        + (" (trimming cannot free one: every graph keeps at least one "
           "node)." if trims_nodes else
           ", or trim nodes (OverSizeStrategy.TrimNodes)."))

