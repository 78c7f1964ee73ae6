"""Node classification on Cora with Cluster-GCN batches of fixed size on the
simulated IPU.

Ordinary PyG Cluster-GCN code with the PopTorch wrapping added: METIS splits
the graph into ``--num-parts`` clusters (``poptorch_geometric.ClusterData``,
PyG's ClusterData on ``pymetis``), every batch merges ``--clusters-per-batch``
random clusters with all the edges between them, and
``poptorch_geometric.FixedSizeClusterLoader`` pads each merged subgraph to
one fixed size, so the model compiles once. The GCN is trained with
``poptorch.trainingModel`` on the training nodes of each batch (a float
mask: padding nodes are never training nodes), then evaluated on the whole
graph with ``poptorch.inferenceModel``.

``--cpu-reference`` trains the same model from the same weights with PyG's
``ClusterLoader`` (no padding) on the CPU.

The Planetoid raw files are read from ``<data root>/Cora/raw/``; PyG
downloads them only when they are missing.

Usage::

    python examples/cora_cluster_gcn.py                 # ~30 s on 2 cores
    python examples/cora_cluster_gcn.py --cpu-reference
    python examples/cora_cluster_gcn.py --quick --json cluster.json
"""
import argparse
import copy
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.loader import ClusterLoader
from torch_geometric.nn import GCNConv

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric.datasets import default_root

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _example_common import (  # noqa: E402
    CPU_COLUMN, IPU_COLUMN, example_parser, ipu_options, masked_mean_loss,
    train_epochs, write_json)
from _node_classification import (  # noqa: E402
    accuracies, dataset_record, evaluate_on_ipu, format_node_summary,
    side_record)
from _planetoid import DatasetUnavailable, load_planetoid  # noqa: E402


class ClusterGCN(torch.nn.Module):
    """Two GCN layers with dropout; self-loops come with the data.

    ``forward(x, edge_index, y, train_mask)`` returns ``(logits, loss)`` in
    training mode (the loss over the nodes of ``train_mask``);
    ``forward(x, edge_index)`` returns the logits otherwise.

    Example::

        >>> model = ClusterGCN(1433, 64, 7)
    """

    def __init__(self, in_channels: int, hidden_channels: int,
                 out_channels: int, dropout: float = 0.5) -> None:
        super().__init__()
        self.dropout = dropout
        self.conv1 = GCNConv(in_channels, hidden_channels,
                             add_self_loops=False)
        self.conv2 = GCNConv(hidden_channels, out_channels,
                             add_self_loops=False)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                y: Optional[torch.Tensor] = None,
                train_mask: Optional[torch.Tensor] = None) -> Any:
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.dropout, training=self.training)
        logits = self.conv2(x, edge_index)
        if not self.training:
            return logits
        per_node = F.cross_entropy(logits, y, reduction="none")
        return logits, masked_mean_loss(per_node, train_mask)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = example_parser(__doc__)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--num-parts", type=int, default=32,
                        help="METIS clusters")
    parser.add_argument("--clusters-per-batch", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--dropout", type=float, default=0.5)
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs = 8
    return args


def _batch_inputs(batch: Data) -> Tuple[torch.Tensor, ...]:
    return batch.x, batch.edge_index, batch.y, batch.train_mask


def _train_on_ipu(model: ClusterGCN, clusters: pyg_ipu.ClusterData,
                  data: Data, args: argparse.Namespace
                  ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    # The largest merged subgraph over many random groupings, plus padding.
    sizes = pyg_ipu.FixedSizeOptions.from_loader(
        ClusterLoader(clusters, batch_size=args.clusters_per_batch,
                      shuffle=True), sample_limit=200)
    loader = pyg_ipu.FixedSizeClusterLoader(
        clusters, sizes, batch_size=args.clusters_per_batch, shuffle=True,
        options=ipu_options(args))
    # Training draws the cluster groups the CPU reference draws.
    torch.manual_seed(args.seed)
    optimizer = poptorch.optim.Adam(model.parameters(), lr=args.lr,
                                    weight_decay=args.weight_decay)
    train_model = poptorch.trainingModel(model, ipu_options(args), optimizer)

    def epoch() -> Tuple[float, int]:
        losses = [float(train_model(*_batch_inputs(batch))[1].detach())
                  for batch in loader]
        return sum(losses) / len(losses), len(losses)

    log = train_epochs(args.epochs, epoch, IPU_COLUMN, not args.no_progress)
    split_accuracies, eval_compilations = evaluate_on_ipu(model, data, args)
    return side_record(log, split_accuracies), {
        "compilations": {"train": train_model.compilations(),
                         "inference": eval_compilations},
        "fixed_sizes": {"num_nodes": sizes.num_nodes,
                        "num_edges": sizes.num_edges,
                        "num_graphs": sizes.num_graphs},
        "trimmed_batches": loader.fixed_size_collater.trimmed.graphs}


def _train_on_cpu(model: ClusterGCN, clusters: pyg_ipu.ClusterData,
                  data: Data, args: argparse.Namespace) -> Dict[str, Any]:
    """Plain PyG: ClusterLoader (no padding), eager model, torch's Adam."""
    torch.manual_seed(args.seed)
    loader = ClusterLoader(clusters, batch_size=args.clusters_per_batch,
                           shuffle=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr,
                                 weight_decay=args.weight_decay)

    def epoch() -> Tuple[float, int]:
        losses = []
        for batch in loader:
            optimizer.zero_grad()
            _, loss = model(*_batch_inputs(batch))
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        return sum(losses) / len(losses), len(losses)

    log = train_epochs(args.epochs, epoch, CPU_COLUMN, not args.no_progress)
    model.eval()
    with torch.no_grad():
        logits = model(data.x, data.edge_index)
    return side_record(log, accuracies(logits, data))


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Trains on the simulated IPU (and with ``args.cpu_reference`` with
    plain PyG on the CPU, from the same initial weights); returns the
    summary.

    Raises:
        DatasetUnavailable: the Cora raw files are missing and could not be
            downloaded.
    """
    if args.epochs < 1:
        raise ValueError(f"--epochs must be at least 1, got {args.epochs}.")
    root = args.data_root or default_root()
    dataset = load_planetoid(root, "Cora", transform=T.Compose(
        [T.AddSelfLoops(), T.NormalizeFeatures()]))
    data = dataset[0]
    clusters = pyg_ipu.ClusterData(data, num_parts=args.num_parts,
                                   log=False)
    torch.manual_seed(args.seed)
    model = ClusterGCN(dataset.num_features, args.hidden,
                       dataset.num_classes, args.dropout)
    reference = copy.deepcopy(model) if args.cpu_reference else None
    ipu, details = _train_on_ipu(model, clusters, data, args)
    return {
        "example": "cora_cluster_gcn",
        "epochs": args.epochs,
        "num_parts": args.num_parts,
        "clusters_per_batch": args.clusters_per_batch,
        "dataset": dataset_record(dataset, data),
        "simulated_ipu": ipu,
        "cpu_reference": (_train_on_cpu(reference, clusters, data, args)
                          if reference is not None else None),
        **details,
        "backend": args.backend,
        "host_device": args.host_device,
        "seed": args.seed,
    }


def format_summary(summary: Dict[str, Any]) -> str:
    """The results as a table, with a CPU column when there is one."""
    sizes = summary["fixed_sizes"]
    return format_node_summary(
        f"Cora node classification, Cluster-GCN, {summary['num_parts']} "
        f"METIS clusters, {summary['clusters_per_batch']} per batch padded "
        f"to {sizes['num_nodes']} nodes and {sizes['num_edges']} edges, "
        f"{summary['epochs']} epochs (backend {summary['backend']})",
        summary)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        summary = run(args)
    except DatasetUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
