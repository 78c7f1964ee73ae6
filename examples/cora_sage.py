"""Node classification on Cora with GraphSAGE and fixed-size neighbour
sampling on the simulated IPU.

Ordinary PyG mini-batch code with the PopTorch wrapping added: batches of
training nodes come from ``poptorch_geometric.FixedSizeNeighborLoader``
(``num_neighbors=[10, 10]``: the subgraph PyG's ``NeighborLoader`` samples
around the seed nodes, padded to one fixed size so the model compiles
once), and the model is trained with ``poptorch.trainingModel``. The loss
covers the seed nodes only, which are the first ``batch_size`` nodes of
every batch (a constant mask: no data-dependent shape). Evaluation runs
the trained model on the whole graph with ``poptorch.inferenceModel``.

``--cpu-reference`` trains the same model from the same weights with PyG's
``NeighborLoader`` (no padding) on the CPU.

The Planetoid raw files are read from ``<data root>/Cora/raw/``; PyG
downloads them only when they are missing.

Usage::

    python examples/cora_sage.py                  # 20 epochs, ~30 s on 2 cores
    python examples/cora_sage.py --cpu-reference
    python examples/cora_sage.py --quick --json sage.json
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
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import SAGEConv

import poptorch_geometric as pyg_ipu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _example_common import (  # noqa: E402
    example_parser, ipu_options, masked_mean_loss)
from _node_classification import (  # noqa: E402
    add_training_arguments, evaluate_on_cpu, format_node_summary, load_cora,
    run_example, side_record, summary_record, train_on_cpu,
    train_padded_on_ipu)


class GraphSAGE(torch.nn.Module):
    """Two SAGEConv layers (mean aggregation) with dropout.

    ``forward(x, edge_index, y)`` returns ``(logits, loss)`` in training
    mode, the loss being the cross-entropy of the first ``num_seeds`` nodes
    (the seed nodes of a sampled batch); ``forward(x, edge_index)`` returns
    the logits otherwise.

    Example::

        >>> model = GraphSAGE(1433, 64, 7, num_seeds=32)
    """

    def __init__(self, in_channels: int, hidden_channels: int,
                 out_channels: int, num_seeds: int,
                 dropout: float = 0.5) -> None:
        super().__init__()
        self.num_seeds = num_seeds
        self.dropout = dropout
        self.conv1 = SAGEConv(in_channels, hidden_channels)
        self.conv2 = SAGEConv(hidden_channels, out_channels)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                y: Optional[torch.Tensor] = None) -> Any:
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.dropout, training=self.training)
        logits = self.conv2(x, edge_index)
        if not self.training:
            return logits
        per_node = F.cross_entropy(logits, y, reduction="none")
        seeds = torch.arange(x.size(0), device=x.device) < self.num_seeds
        return logits, masked_mean_loss(per_node, seeds)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = example_parser(__doc__)
    add_training_arguments(parser, epochs=20, hidden=64)
    parser.add_argument("--batch-size", type=int, default=16,
                        help="seed (training) nodes per batch")
    parser.add_argument("--num-neighbors", type=int, nargs="+",
                        default=[10, 10], help="fanout per hop")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs = 4
    if len(args.num_neighbors) != 2:
        parser.error("--num-neighbors takes one fanout per layer (2)")
    return args


def _inputs(batch: Data) -> Tuple[torch.Tensor, ...]:
    return batch.x, batch.edge_index, batch.y


def _train_on_ipu(model: GraphSAGE, data: Data, args: argparse.Namespace
                  ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    # The fixed sizes: the largest of 1000 sampled batches, plus padding.
    loader = pyg_ipu.FixedSizeNeighborLoader(
        data, args.num_neighbors, input_nodes=data.train_mask,
        batch_size=args.batch_size, shuffle=True,
        options=ipu_options(args))
    return train_padded_on_ipu(model, loader, _inputs, data, args)


def _train_on_cpu(model: GraphSAGE, data: Data,
                  args: argparse.Namespace) -> Dict[str, Any]:
    """Plain PyG: NeighborLoader (the same sampler, no padding), eager
    model, torch's Adam."""
    torch.manual_seed(args.seed)
    loader = NeighborLoader(
        data, args.num_neighbors, input_nodes=data.train_mask,
        batch_size=args.batch_size, shuffle=True, drop_last=True,
        neighbor_sampler=pyg_ipu.TorchNeighborSampler(data,
                                                      args.num_neighbors))
    log = train_on_cpu(model, loader, _inputs, args)
    return side_record(log, evaluate_on_cpu(model, data))


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Trains on the simulated IPU (and with ``args.cpu_reference`` with
    plain PyG on the CPU, from the same initial weights); returns the
    summary (raises ``DatasetUnavailable`` without the Cora files)."""
    dataset, data = load_cora(args, T.NormalizeFeatures())
    torch.manual_seed(args.seed)
    model = GraphSAGE(dataset.num_features, args.hidden,
                      dataset.num_classes, args.batch_size, args.dropout)
    reference = copy.deepcopy(model) if args.cpu_reference else None
    ipu, details = _train_on_ipu(model, data, args)
    cpu = _train_on_cpu(reference, data, args) if reference else None
    return summary_record("cora_sage", args, dataset, data, ipu, cpu,
                          batch_size=args.batch_size,
                          num_neighbors=args.num_neighbors, **details)


def format_summary(summary: Dict[str, Any]) -> str:
    """The results as a table, with a CPU column when there is one."""
    sizes = summary["fixed_sizes"]
    return format_node_summary(
        f"Cora node classification, GraphSAGE with neighbour sampling "
        f"{summary['num_neighbors']}, {summary['batch_size']} seeds per "
        f"batch padded to {sizes['num_nodes']} nodes and "
        f"{sizes['num_edges']} edges, {summary['epochs']} epochs (backend "
        f"{summary['backend']})", summary)


def main(argv: Optional[List[str]] = None) -> int:
    return run_example(argv, parse_args, run, format_summary)


if __name__ == "__main__":
    sys.exit(main())
