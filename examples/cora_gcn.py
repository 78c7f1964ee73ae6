"""Node classification on Cora with a two-layer GCN on the simulated IPU.

Ordinary PyG code with the PopTorch wrapping added: the full graph is one
batch, trained with ``poptorch.trainingModel`` and evaluated with
``poptorch.inferenceModel``. Two IPU habits show: self-loops are added once
by the data transform (``GCNConv(add_self_loops=False)``, since adding them
in the model would change the edge count inside the graph), and the loss is
masked by weighting with the float train mask, not by boolean indexing
(whose result has a data-dependent shape).

The Planetoid raw files are read from ``<data root>/Cora/raw/``; PyG
downloads them only when they are missing.

Usage::

    python examples/cora_gcn.py                  # 200 epochs, ~20 s on 2 cores
    python examples/cora_gcn.py --cpu-reference  # and plain PyG, side by side
    python examples/cora_gcn.py --quick --json cora.json
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
from torch_geometric.nn import GCNConv

import poptorch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _example_common import (  # noqa: E402
    CPU_COLUMN, IPU_COLUMN, example_parser, ipu_options, masked_mean_loss,
    train_epochs)
from _node_classification import (  # noqa: E402
    accuracies, add_training_arguments, format_node_summary, load_cora,
    run_example, side_record, summary_record)


class GCN(torch.nn.Module):
    """Kipf & Welling's two-layer GCN with dropout.

    ``forward(x, edge_index, y, train_mask)`` returns ``(logits, loss)`` in
    training mode; ``forward(x, edge_index)`` returns the logits otherwise.

    Example::

        >>> model = GCN(in_channels=1433, hidden_channels=16, out_channels=7)
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
    add_training_arguments(parser, epochs=200, hidden=16)
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs = 20
    return args


def _train_on_ipu(model: GCN, data: Data, args: argparse.Namespace
                  ) -> Tuple[Dict[str, Any], Dict[str, int]]:
    optimizer = poptorch.optim.Adam(model.parameters(), lr=args.lr,
                                    weight_decay=args.weight_decay)
    train_model = poptorch.trainingModel(model, ipu_options(args), optimizer)

    def epoch() -> Tuple[float, int]:
        _, loss = train_model(data.x, data.edge_index, data.y,
                              data.train_mask)
        return float(loss.detach()), 1

    log = train_epochs(args.epochs, epoch, IPU_COLUMN,
                       not args.no_progress)
    model.eval()
    eval_model = poptorch.inferenceModel(model, ipu_options(args))
    logits = eval_model(data.x, data.edge_index)
    compilations = {"train": train_model.compilations(),
                    "inference": eval_model.compilations()}
    return side_record(log, accuracies(logits, data)), compilations


def _train_on_cpu(model: GCN, data: Data,
                  args: argparse.Namespace) -> Dict[str, Any]:
    torch.manual_seed(args.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr,
                                 weight_decay=args.weight_decay)

    def epoch() -> Tuple[float, int]:
        optimizer.zero_grad()
        _, loss = model(data.x, data.edge_index, data.y, data.train_mask)
        loss.backward()
        optimizer.step()
        return float(loss.detach()), 1

    log = train_epochs(args.epochs, epoch, CPU_COLUMN, not args.no_progress)
    model.eval()
    with torch.no_grad():
        logits = model(data.x, data.edge_index)
    return side_record(log, accuracies(logits, data))


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Trains on the simulated IPU (and with ``args.cpu_reference`` on the
    CPU with plain PyG, from the same initial weights); returns the summary.

    Raises:
        DatasetUnavailable: the Cora raw files are missing and could not be
            downloaded.
    """
    dataset, data = load_cora(args, T.Compose([T.AddSelfLoops(),
                                               T.NormalizeFeatures()]))
    torch.manual_seed(args.seed)
    model = GCN(dataset.num_features, args.hidden, dataset.num_classes,
                args.dropout)
    reference = copy.deepcopy(model) if args.cpu_reference else None
    ipu, compilations = _train_on_ipu(model, data, args)
    cpu = _train_on_cpu(reference, data, args) if reference else None
    return summary_record("cora_gcn", args, dataset, data, ipu, cpu,
                          compilations=compilations)


def format_summary(summary: Dict[str, Any]) -> str:
    """The results as a table, with a CPU column when there is one."""
    data = summary["dataset"]
    title = (f"Cora node classification, GCN, {summary['epochs']} epochs "
             f"({data['nodes']} nodes, {data['edges']} edges; backend "
             f"{summary['backend']})")
    return format_node_summary(title, summary)


def main(argv: Optional[List[str]] = None) -> int:
    return run_example(argv, parse_args, run, format_summary)


if __name__ == "__main__":
    sys.exit(main())
