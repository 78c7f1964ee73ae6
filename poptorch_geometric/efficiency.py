"""How well fixed-size batches use their slots.

Example::

    >>> from poptorch_geometric.datasets import SyntheticMolecules
    >>> from poptorch_geometric.pyg_dataloader import FixedSizeDataLoader
    >>> ds = SyntheticMolecules(64)
    >>> loader = FixedSizeDataLoader(ds, batch_size=9)
    >>> report = batching_efficiency(loader)
    >>> report.real_graphs, report.graph_slots
    (64, 72)
"""
import dataclasses
from typing import Any, Iterable, Optional

import torch
from torch_geometric.data import HeteroData

from ._padding.trim import TrimCounts

__all__ = ["BatchingEfficiency", "batching_efficiency"]


@dataclasses.dataclass
class BatchingEfficiency:
    """Real graphs, nodes and edges against the slots of the batches of one
    epoch, with the samples the loader skipped or trimmed."""
    num_batches: int = 0
    real_graphs: int = 0
    graph_slots: int = 0
    real_nodes: int = 0
    node_slots: int = 0
    real_edges: int = 0
    edge_slots: int = 0
    skipped_graphs: int = 0
    trimmed: TrimCounts = dataclasses.field(default_factory=TrimCounts)

    @property
    def graph_efficiency(self) -> float:
        """Real graphs / graph slots."""
        return self.real_graphs / max(self.graph_slots, 1)

    @property
    def node_efficiency(self) -> float:
        """Real nodes / node slots."""
        return self.real_nodes / max(self.node_slots, 1)

    @property
    def edge_efficiency(self) -> float:
        """Real edges / edge slots."""
        return self.real_edges / max(self.edge_slots, 1)

    def add_batch(self, batch: Any) -> None:
        """Counts one (possibly combined) batch from its masks."""
        graphs_mask = _mask(batch, "graphs_mask")
        if isinstance(batch, HeteroData):
            nodes = [_mask(s, "nodes_mask") for s in batch.node_stores]
            edges = [_mask(s, "edges_mask") for s in batch.edge_stores]
        else:
            nodes = [_mask(batch, "nodes_mask")]
            edges = [_mask(batch, "edges_mask")]
        self.num_batches += 1
        self.real_graphs += int(graphs_mask.sum())
        self.graph_slots += graphs_mask.numel()
        self.real_nodes += sum(int(m.sum()) for m in nodes)
        self.node_slots += sum(m.numel() for m in nodes)
        self.real_edges += sum(int(m.sum()) for m in edges)
        self.edge_slots += sum(m.numel() for m in edges)

    def __str__(self) -> str:
        rows = [("graphs", self.real_graphs, self.graph_slots,
                 self.graph_efficiency),
                ("nodes", self.real_nodes, self.node_slots,
                 self.node_efficiency),
                ("edges", self.real_edges, self.edge_slots,
                 self.edge_efficiency)]
        lines = [f"{self.num_batches} batch(es)",
                 f"{'':8}{'real':>10}{'slots':>10}{'efficiency':>12}"]
        lines += [f"{name:8}{real:>10}{slots:>10}{eff:>11.1%}"
                  for name, real, slots, eff in rows]
        lines.append(f"skipped graphs: {self.skipped_graphs}; trimmed: "
                     f"{self.trimmed.graphs} graph(s), {self.trimmed.nodes} "
                     f"node(s), {self.trimmed.edges} edge(s)")
        return "\n".join(lines)


def _mask(store: Any, key: str) -> torch.Tensor:
    if key not in store:
        raise ValueError(
            f"The batch has no '{key}': measure a loader that adds padding "
            "masks (add_pad_masks=True).")
    return store[key]


def batching_efficiency(loader: Iterable,
                        max_batches: Optional[int] = None
                        ) -> BatchingEfficiency:
    """Iterates one epoch of ``loader`` (or ``max_batches`` batches) and
    reports real graphs, nodes and edges over slots, read from the batches'
    padding masks, with the graphs its sampler skipped
    (``StreamPackingSampler.skipped_indices``) and what its collater trimmed
    during the epoch (exact with ``num_workers=0``: worker processes trim
    copies of the collater, and log it themselves).
    """
    report = BatchingEfficiency()
    collater = getattr(loader, "fixed_size_collater", None)
    before = dataclasses.replace(collater.trimmed) if collater else None
    for batch in loader:
        report.add_batch(batch)
        if max_batches is not None and report.num_batches >= max_batches:
            break
    sampler = getattr(loader, "batch_sampler", None)
    report.skipped_graphs = len(getattr(sampler, "skipped_indices", []))
    if collater is not None:
        after = collater.trimmed
        report.trimmed = TrimCounts(after.graphs - before.graphs,
                                    after.nodes - before.nodes,
                                    after.edges - before.edges)
    return report


