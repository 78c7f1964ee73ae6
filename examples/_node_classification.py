"""Pieces shared by the Cora node-classification examples (``cora_gcn.py``,
``cora_sage.py``, ``cora_cluster_gcn.py``): per-split accuracies, the
record of one training side, the data set record, full-graph evaluation on
the simulated IPU and the summary table.

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
from typing import Any, Dict, Sequence, Tuple

import torch
from torch_geometric.data import Data

import poptorch

from _example_common import (TrainingLog, ipu_options, loss_change,  # noqa
                             percent, results_table)

__all__ = ["accuracies", "dataset_record", "evaluate_on_ipu",
           "format_node_summary", "side_record"]

SPLITS = ("train", "val", "test")


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
