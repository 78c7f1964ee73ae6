"""Pieces shared by the Cora node-classification examples (``cora_gcn.py``,
``cora_sage.py``, ``cora_cluster_gcn.py``): per-split accuracies, the
record of one training side, the data set record, mini-batch training on
the simulated IPU and eagerly on the CPU, full-graph evaluation, the
summary table and the scripts' ``main``.

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> data = Data(y=torch.tensor([0, 1, 1]),
    ...             train_mask=torch.tensor([True, True, False]),
    ...             val_mask=torch.tensor([False, False, True]),
    ...             test_mask=torch.tensor([False, False, True]))
    >>> accuracies(torch.tensor([[2., 0.], [0., 1.], [3., 0.]]), data)
    {'train_accuracy': 1.0, 'val_accuracy': 0.0, 'test_accuracy': 0.0}
"""
import argparse
import sys
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence,
                    Tuple)

import torch
from torch_geometric.data import Data

import poptorch
from poptorch_geometric.datasets import default_root

from _example_common import (CPU_COLUMN, IPU_COLUMN, TrainingLog,  # noqa
                             ipu_options, loss_change, percent,
                             results_table, train_epochs, write_json)
from _planetoid import DatasetUnavailable, load_planetoid  # noqa

__all__ = ["accuracies", "add_training_arguments", "dataset_record",
           "evaluate_on_cpu", "evaluate_on_ipu", "format_node_summary",
           "load_cora", "run_example", "side_record", "summary_record",
           "train_on_cpu", "train_on_ipu"]

Inputs = Callable[[Data], Tuple[torch.Tensor, ...]]

SPLITS = ("train", "val", "test")


def add_training_arguments(parser: Any, epochs: int, hidden: int) -> None:
    """``--epochs``, ``--hidden``, ``--lr``, ``--weight-decay`` and
    ``--dropout`` with these defaults (Adam at 0.01 and 5e-4, dropout 0.5).
    """
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--hidden", type=int, default=hidden)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--dropout", type=float, default=0.5)


def load_cora(args: argparse.Namespace,
              transform: Callable) -> Tuple[Any, Data]:
    """Checks ``--epochs`` and loads Cora from the data root.

    Raises:
        DatasetUnavailable: the Cora raw files are missing and could not be
            downloaded.
    """
    if args.epochs < 1:
        raise ValueError(f"--epochs must be at least 1, got {args.epochs}.")
    dataset = load_planetoid(args.data_root or default_root(), "Cora",
                             transform=transform)
    return dataset, dataset[0]


def summary_record(example: str, args: argparse.Namespace, dataset: Any,
                   data: Data, ipu: Dict[str, Any],
                   cpu: Optional[Dict[str, Any]],
                   **details: Any) -> Dict[str, Any]:
    """A Cora example's JSON record: ``details`` go between the two sides
    and the run settings."""
    return {"example": example, "epochs": args.epochs,
            "dataset": dataset_record(dataset, data),
            "simulated_ipu": ipu, "cpu_reference": cpu, **details,
            "backend": args.backend, "host_device": args.host_device,
            "seed": args.seed}


def accuracies(logits: torch.Tensor, data: Data) -> Dict[str, float]:
    """Accuracy of ``logits`` on each split mask of ``data``."""
    correct = logits.argmax(dim=-1) == data.y
    return {f"{split}_accuracy": float(correct[data[f"{split}_mask"]].float()
                                       .mean())
            for split in SPLITS}


def side_record(log: TrainingLog,
                split_accuracies: Dict[str, float]) -> Dict[str, Any]:
    """The record of one side (simulated IPU or CPU reference)."""
    return {"loss_history": log.losses,
            "final_train_loss": log.losses[-1],
            **split_accuracies,
            "seconds_per_epoch": log.seconds_per_epoch}


def dataset_record(dataset: Any, data: Data) -> Dict[str, Any]:
    """Name, sizes and split sizes of a Planetoid data set."""
    return {"name": dataset.name, "nodes": data.num_nodes,
            "edges": data.num_edges, "features": dataset.num_features,
            "classes": dataset.num_classes,
            **{f"{split}_nodes": int(data[f"{split}_mask"].sum())
               for split in SPLITS}}


def evaluate_on_ipu(model: torch.nn.Module, data: Data,
                    args: argparse.Namespace,
                    inputs: Sequence[str] = ("x", "edge_index")
                    ) -> Tuple[Dict[str, float], int]:
    """Split accuracies of ``model`` (in eval mode) on the whole graph, run
    by ``poptorch.inferenceModel``; and its number of compilations."""
    model.eval()
    eval_model = poptorch.inferenceModel(model, ipu_options(args))
    logits = eval_model(*(data[name] for name in inputs))
    return accuracies(logits, data), eval_model.compilations()


def train_on_ipu(model: torch.nn.Module, loader: Iterable, inputs: Inputs,
                 args: argparse.Namespace) -> Tuple[TrainingLog, Any]:
    """``args.epochs`` epochs of ``poptorch.trainingModel`` (Adam) over the
    batches of ``loader``; ``model(*inputs(batch))`` returns ``(out,
    loss)``. Returns the log and the training model."""
    optimizer = poptorch.optim.Adam(model.parameters(), lr=args.lr,
                                    weight_decay=args.weight_decay)
    train_model = poptorch.trainingModel(model, ipu_options(args), optimizer)

    def epoch() -> Tuple[float, int]:
        losses = [float(train_model(*inputs(batch))[1].detach())
                  for batch in loader]
        return sum(losses) / len(losses), len(losses)

    log = train_epochs(args.epochs, epoch, IPU_COLUMN, not args.no_progress)
    return log, train_model


def train_padded_on_ipu(model: torch.nn.Module, loader: Any,
                        inputs: Inputs, data: Data,
                        args: argparse.Namespace
                        ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """:func:`train_on_ipu` over a fixed-size sampling loader from the
    random state ``args.seed`` (where the CPU reference starts), then
    full-graph evaluation. Returns the side's record and the details:
    compilations, the fixed sizes and how many batches were trimmed."""
    torch.manual_seed(args.seed)
    log, train_model = train_on_ipu(model, loader, inputs, args)
    split_accuracies, eval_compilations = evaluate_on_ipu(model, data, args)
    opts = loader.fixed_size_options
    return side_record(log, split_accuracies), {
        "compilations": {"train": train_model.compilations(),
                         "inference": eval_compilations},
        "fixed_sizes": {"num_nodes": opts.num_nodes,
                        "num_edges": opts.num_edges,
                        "num_graphs": opts.num_graphs},
        "trimmed_batches": loader.fixed_size_collater.trimmed.graphs}


def train_on_cpu(model: torch.nn.Module, loader: Iterable, inputs: Inputs,
                 args: argparse.Namespace) -> TrainingLog:
    """The same training, eagerly with torch's Adam on the CPU."""
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr,
                                 weight_decay=args.weight_decay)

    def epoch() -> Tuple[float, int]:
        losses = []
        for batch in loader:
            optimizer.zero_grad()
            _, loss = model(*inputs(batch))
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        return sum(losses) / len(losses), len(losses)

    return train_epochs(args.epochs, epoch, CPU_COLUMN, not args.no_progress)


def evaluate_on_cpu(model: torch.nn.Module, data: Data) -> Dict[str, float]:
    """Split accuracies of ``model`` (in eval mode) on the whole graph."""
    model.eval()
    with torch.no_grad():
        return accuracies(model(data.x, data.edge_index), data)


def run_example(argv: Optional[List[str]],
                parse_args: Callable[[Optional[List[str]]],
                                     argparse.Namespace],
                run: Callable[[argparse.Namespace], Dict[str, Any]],
                format_summary: Callable[[Dict[str, Any]], str]) -> int:
    """A Cora example's ``main``: runs it, prints the table, writes the
    JSON record; exit status 2 when the raw files are missing."""
    args = parse_args(argv)
    try:
        summary = run(args)
    except DatasetUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    write_json(args.json, summary)
    return 0


def format_node_summary(title: str, summary: Dict[str, Any]) -> str:
    """The results table of a Cora example, with a CPU column when there is
    one."""
    return results_table(title, summary, [
        ("train loss", loss_change),
        ("train accuracy", percent("train_accuracy")),
        ("val accuracy", percent("val_accuracy")),
        ("test accuracy", percent("test_accuracy")),
        ("time per epoch",
         lambda s: f"{s['seconds_per_epoch'] * 1e3:.1f} ms"),
    ])
