"""Graph classification with fixed-size (PadToMax) batches on the simulated
IPU.

Ordinary PyG code with the PopTorch wrapping added: a GIN over the embedded
NCI molecules (no download; they ship inside the RDKit wheel), labelled 1
when a molecule's polar surface area (TPSA) is above the data set's median,
so the two classes are balanced. Batches come from PopTorch Geometric's
``FixedSizeDataLoader`` with ``FixedSizeStrategy.PadToMax`` and sizes from
``FixedSizeOptions.from_dataset``: every batch has ``batch_size - 1`` real
graphs plus padding up to the same numbers of nodes, edges and graphs, so
the model compiles once. Padding graphs are kept out of the loss with
``graphs_mask``; padding nodes only reach padding graphs.

``--cpu-reference`` trains the same model, from the same initial weights,
with PyG's own ``DataLoader`` (no padding) on the CPU, and prints both
results side by side, including how much of the fixed-size batches is
padding.

Usage::

    python examples/graph_classification.py      # ~15 s on 2 CPU cores
    python examples/graph_classification.py --cpu-reference
    python examples/graph_classification.py --quick --json gc.json
"""
import argparse
import copy
import os
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader as PyGDataLoader
from torch_geometric.nn import GINConv, global_mean_pool
from torch_geometric.utils.smiles import x_map

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric.datasets import NCITPSA
from poptorch_geometric.pyg_dataloader import \
    FixedSizeDataLoader as TorchFixedSizeDataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _example_common import (  # noqa: E402
    CPU_COLUMN, IPU_COLUMN, CalledWithBatch, TrainingLog, example_parser,
    ipu_options, loss_change, masked_mean_loss, percent, results_table,
    train_epochs, write_json)

_EXCLUDE = ["smiles"]


class AboveThreshold:
    """A transform that replaces the regression target ``y`` by the binary
    label ``y > threshold`` (float, shape ``[1]``)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def __call__(self, data: Data) -> Data:
        data = copy.copy(data)
        data.y = (data.y.view(-1) > self.threshold).float()
        return data


class GIN(torch.nn.Module):
    """GIN over atom embeddings, mean pooling and a linear classifier.

    ``forward(x, edge_index, batch, graphs_mask, y)`` returns
    ``(logits, loss)`` in training mode and the logits otherwise. The pooled
    size is ``graphs_mask.size(0)``, which is fixed for padded batches.

    Example::

        >>> model = GIN(hidden_channels=32, num_layers=2)
    """

    def __init__(self, hidden_channels: int = 64, num_layers: int = 3) -> None:
        super().__init__()
        # One embedding table for all nine categorical atom features of
        # ``from_smiles``: each column's codes are offset into its own rows.
        cardinalities = torch.tensor([len(v) for v in x_map.values()])
        self.register_buffer("offsets", cardinalities.cumsum(0)
                             - cardinalities)
        self.atom_embedding = torch.nn.Embedding(int(cardinalities.sum()),
                                                 hidden_channels)
        self.convs = torch.nn.ModuleList(
            GINConv(torch.nn.Sequential(
                torch.nn.Linear(hidden_channels, hidden_channels),
                torch.nn.ReLU(),
                torch.nn.Linear(hidden_channels, hidden_channels)))
            for _ in range(num_layers))
        self.classifier = torch.nn.Linear(hidden_channels, 1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                batch: torch.Tensor, graphs_mask: torch.Tensor,
                y: Optional[torch.Tensor] = None) -> Any:
        h = self.atom_embedding(x + self.offsets).sum(dim=1)
        for conv in self.convs:
            h = h + F.relu(conv(h, edge_index))
        pooled = global_mean_pool(h, batch, size=graphs_mask.size(0))
        logits = self.classifier(pooled).squeeze(-1)
        if not self.training:
            return logits
        per_graph = F.binary_cross_entropy_with_logits(
            logits, y.view(-1), reduction="none")
        return logits, masked_mean_loss(per_graph, graphs_mask)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = example_parser(__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="graph slots per batch (one is kept for padding)")
    parser.add_argument("--device-iterations", type=int, default=1)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--limit", type=int, default=None,
                        help="use only the first N molecules")
    parser.add_argument("--no-shuffle", action="store_true",
                        help="same batch order on both sides (with it the "
                             "two columns agree to float precision)")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.limit = 2, args.limit or 1000
    return args


def _datasets(args: argparse.Namespace):
    """The labelled data set and its train and validation splits."""
    dataset = NCITPSA(root=args.data_root)
    if args.limit:
        dataset = dataset[:args.limit]
    dataset.transform = AboveThreshold(float(dataset.y.median()))
    perm = torch.randperm(len(dataset))
    num_val = max(1, int(len(dataset) * args.val_fraction))
    return dataset, dataset[perm[num_val:]], dataset[perm[:num_val]]


def _epoch(batches: Iterable, step: Callable[[Any], List[float]]
           ) -> Tuple[float, int]:
    """One pass of ``step`` (the losses of a batch's real mini-batches)
    over ``batches``: the mean loss and the number of real graphs seen."""
    losses, graphs = [], 0
    for batch in batches:
        losses += step(batch)
        graphs += int(batch.graphs_mask.sum())
    return sum(losses) / max(len(losses), 1), graphs


def _accuracy(batches: Iterable,
              predict: Callable[[Any], torch.Tensor]) -> float:
    correct = total = 0
    for batch in batches:
        mask = batch.graphs_mask.bool()
        predicted = predict(batch) > 0
        correct += int((predicted == batch.y.view(-1).bool())[mask].sum())
        total += int(mask.sum())
    return correct / max(total, 1)


def _side(log: TrainingLog, accuracy: float) -> Dict[str, Any]:
    return {"loss_history": log.losses,
            "final_train_loss": log.losses[-1],
            "val_accuracy": accuracy,
            "train_graphs_per_second": log.samples_per_second}


def _train_on_ipu(model: GIN, train_set, val_set,
                  sizes: pyg_ipu.FixedSizeOptions,
                  args: argparse.Namespace) -> Dict[str, Any]:
    def loader(dataset, options, shuffle):
        return pyg_ipu.FixedSizeDataLoader(
            dataset, batch_size=args.batch_size, shuffle=shuffle,
            fixed_size_options=sizes,
            fixed_size_strategy=pyg_ipu.FixedSizeStrategy.PadToMax,
            exclude_keys=_EXCLUDE, options=options)

    train_options = ipu_options(args, args.device_iterations)
    # Every step's loss comes back (not only the last of the call's
    # device iterations), so the epoch loss averages the same steps as PyG;
    # padding-only mini-batches (a data set smaller than one call) are left
    # out of the mean, as PopTorch leaves them out of the update.
    train_options.outputMode(poptorch.OutputMode.All)
    train_loader = loader(train_set, train_options, not args.no_shuffle)
    optimizer = poptorch.optim.Adam(model.parameters(), lr=args.lr)
    train_model = poptorch.trainingModel(
        CalledWithBatch(model, ("x", "edge_index", "batch", "graphs_mask",
                                "y")), train_options, optimizer)
    efficiency = pyg_ipu.BatchingEfficiency()

    def step(batch) -> List[float]:
        efficiency.add_batch(batch)
        _, loss = train_model(batch)
        real = pyg_ipu.num_real_graphs_per_mini_batch(batch) > 0
        return loss.detach().view(-1)[real].tolist()

    log = train_epochs(args.epochs, lambda: _epoch(train_loader, step),
                       IPU_COLUMN, not args.no_progress)
    model.eval()
    eval_options = ipu_options(args)
    eval_model = poptorch.inferenceModel(model, eval_options)
    # The PopTorch-side loader drops a last partial batch (drop_last=True,
    # as PopTorch); the torch-side one pads it to the same fixed size, so
    # every validation graph is scored.
    val_loader = TorchFixedSizeDataLoader(
        val_set, batch_size=args.batch_size, fixed_size_options=sizes,
        exclude_keys=_EXCLUDE)
    accuracy = _accuracy(val_loader, lambda b: eval_model(
        b.x, b.edge_index, b.batch, b.graphs_mask))
    return {
        **_side(log, accuracy),
        "node_slot_efficiency": efficiency.node_efficiency,
        "edge_slot_efficiency": efficiency.edge_efficiency,
        "graph_slot_efficiency": efficiency.graph_efficiency,
        "budgets": {"num_nodes": sizes.num_nodes,
                    "num_edges": sizes.num_edges,
                    "num_graphs": sizes.num_graphs},
        "compilations": {"train": train_model.compilations(),
                         "inference": eval_model.compilations()},
    }


def _with_all_graphs_real(batch) -> Any:
    batch.graphs_mask = torch.ones(batch.num_graphs, dtype=torch.bool)
    return batch


def _train_on_cpu(model: GIN, train_set, val_set,
                  args: argparse.Namespace) -> Dict[str, Any]:
    torch.manual_seed(args.seed)
    # As many real graphs per step as a fixed-size batch holds.
    train_loader = PyGDataLoader(train_set, batch_size=args.batch_size - 1,
                                 shuffle=not args.no_shuffle, drop_last=True,
                                 exclude_keys=_EXCLUDE)
    val_loader = PyGDataLoader(val_set, batch_size=args.batch_size - 1,
                               exclude_keys=_EXCLUDE)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def step(batch) -> List[float]:
        optimizer.zero_grad()
        _, loss = model(batch.x, batch.edge_index, batch.batch,
                        batch.graphs_mask, batch.y)
        loss.backward()
        optimizer.step()
        return [float(loss.detach())]

    log = train_epochs(
        args.epochs,
        lambda: _epoch(map(_with_all_graphs_real, train_loader), step),
        CPU_COLUMN, not args.no_progress)
    model.eval()
    with torch.no_grad():
        accuracy = _accuracy(
            map(_with_all_graphs_real, val_loader),
            lambda b: model(b.x, b.edge_index, b.batch, b.graphs_mask))
    return _side(log, accuracy)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Trains on the simulated IPU (and with ``args.cpu_reference`` on the
    CPU with plain PyG, from the same initial weights); returns the
    summary."""
    if args.epochs < 1:
        raise ValueError(f"--epochs must be at least 1, got {args.epochs}.")
    torch.manual_seed(args.seed)
    dataset, train_set, val_set = _datasets(args)
    # One budget for every batch: any batch_size - 1 graphs of the data set.
    sizes = pyg_ipu.FixedSizeOptions.from_dataset(dataset, args.batch_size)
    model = GIN(args.hidden, args.layers)
    reference = copy.deepcopy(model) if args.cpu_reference else None
    torch.manual_seed(args.seed)
    ipu = _train_on_ipu(model, train_set, val_set, sizes, args)
    return {
        "example": "graph_classification",
        "epochs": args.epochs,
        "train_graphs": len(train_set),
        "val_graphs": len(val_set),
        "simulated_ipu": ipu,
        "cpu_reference": (_train_on_cpu(reference, train_set, val_set, args)
                          if reference is not None else None),
        "backend": args.backend,
        "host_device": args.host_device,
        "device_iterations": args.device_iterations,
        "batch_size": args.batch_size,
        "seed": args.seed,
    }


def format_summary(summary: Dict[str, Any]) -> str:
    """The results as a table, with a CPU column when there is one."""
    def padding(key: str) -> Callable[[Dict[str, Any]], str]:
        # PyG's batches have no padding: every slot is real.
        return lambda s: percent(key)(s) if key in s else "100% (no padding)"

    budgets = summary["simulated_ipu"]["budgets"]
    title = (f"NCI TPSA > median, GIN, {summary['epochs']} epochs, "
             f"{summary['train_graphs']} train / {summary['val_graphs']} val "
             f"graphs; PadToMax batches of {budgets['num_graphs']} graphs, "
             f"{budgets['num_nodes']} nodes, {budgets['num_edges']} edges")
    return results_table(title, summary, [
        ("train loss", loss_change),
        ("val accuracy", percent("val_accuracy")),
        ("train graphs/s", lambda s: f"{s['train_graphs_per_second']:.0f}"),
        ("node slots used", padding("node_slot_efficiency")),
        ("edge slots used", padding("edge_slot_efficiency")),
        ("graph slots used", padding("graph_slot_efficiency")),
    ])


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    summary = run(args)
    print(format_summary(summary))
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
