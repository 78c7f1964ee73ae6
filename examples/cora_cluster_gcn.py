"""Node classification on Cora with Cluster-GCN batches of fixed size on the
simulated IPU.

Ordinary PyG Cluster-GCN code with the PopTorch wrapping added: METIS splits
the graph into ``--num-parts`` clusters (``poptorch_geometric.ClusterData``,
PyG's ClusterData on ``pymetis``), every batch merges ``--clusters-per-batch``
random clusters with all the edges between them, and
``poptorch_geometric.FixedSizeClusterLoader`` pads each merged subgraph to
one fixed size, so the model compiles once. ``cora_gcn.py``'s GCN (self-loops
come with the data, so each cluster keeps its nodes' own) is trained with
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
import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.loader import ClusterLoader

import poptorch_geometric as pyg_ipu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _example_common import example_parser, ipu_options  # noqa: E402
from _node_classification import (  # noqa: E402
    add_training_arguments, evaluate_on_cpu, format_node_summary, load_cora,
    run_example, side_record, summary_record, train_on_cpu,
    train_padded_on_ipu)
from cora_gcn import GCN  # noqa: E402


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = example_parser(__doc__)
    add_training_arguments(parser, epochs=40, hidden=64)
    parser.add_argument("--num-parts", type=int, default=32,
                        help="METIS clusters")
    parser.add_argument("--clusters-per-batch", type=int, default=4)
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs = 8
    return args


def _inputs(batch: Data) -> Tuple[torch.Tensor, ...]:
    return batch.x, batch.edge_index, batch.y, batch.train_mask


def _train_on_ipu(model: GCN, clusters: pyg_ipu.ClusterData,
                  data: Data, args: argparse.Namespace
                  ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    # The largest merged subgraph over many random groupings, plus padding.
    sizes = pyg_ipu.FixedSizeOptions.from_loader(
        ClusterLoader(clusters, batch_size=args.clusters_per_batch,
                      shuffle=True), sample_limit=200)
    loader = pyg_ipu.FixedSizeClusterLoader(
        clusters, sizes, batch_size=args.clusters_per_batch, shuffle=True,
        options=ipu_options(args))
    return train_padded_on_ipu(model, loader, _inputs, data, args)


def _train_on_cpu(model: GCN, clusters: pyg_ipu.ClusterData,
                  data: Data, args: argparse.Namespace) -> Dict[str, Any]:
    """Plain PyG: ClusterLoader (no padding), eager model, torch's Adam."""
    torch.manual_seed(args.seed)
    loader = ClusterLoader(clusters, batch_size=args.clusters_per_batch,
                           shuffle=True)
    log = train_on_cpu(model, loader, _inputs, args)
    return side_record(log, evaluate_on_cpu(model, data))


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Trains on the simulated IPU (and with ``args.cpu_reference`` with
    plain PyG on the CPU, from the same initial weights); returns the
    summary (raises ``DatasetUnavailable`` without the Cora files)."""
    dataset, data = load_cora(args, T.Compose([T.AddSelfLoops(),
                                               T.NormalizeFeatures()]))
    clusters = pyg_ipu.ClusterData(data, num_parts=args.num_parts,
                                   log=False)
    torch.manual_seed(args.seed)
    model = GCN(dataset.num_features, args.hidden, dataset.num_classes,
                args.dropout)
    reference = copy.deepcopy(model) if args.cpu_reference else None
    ipu, details = _train_on_ipu(model, clusters, data, args)
    cpu = _train_on_cpu(reference, clusters, data, args) if reference \
        else None
    return summary_record("cora_cluster_gcn", args, dataset, data, ipu, cpu,
                          num_parts=args.num_parts,
                          clusters_per_batch=args.clusters_per_batch,
                          **details)


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
    return run_example(argv, parse_args, run, format_summary)


if __name__ == "__main__":
    sys.exit(main())
