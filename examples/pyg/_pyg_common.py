"""The harness shared by the PyG scripts in ``examples/pyg/reference/`` and
their converted versions in ``examples/pyg/``: flags, offline data, logging,
and the ``--cpu-reference`` comparison. It imports no PopTorch, so the
reference scripts stay plain PyG.

Both versions of a script call the same functions with the same lines, so
the diff between them is only the conversion:

- :func:`parse_args` parses the common flags plus the script's own and
  seeds torch;
- :func:`train_epochs` is PyG's epoch loop: the script's ``train()``, then
  its ``test()``, logged each epoch, then finished;
  :func:`mask_accuracies` is the Planetoid scripts' evaluation;
- :func:`log` prints one epoch's metrics, as ``torch_geometric.logging.log``
  does, and records them;
- :func:`finish` prints the final metrics. In a converted script run with
  ``--cpu-reference`` it then runs the unconverted script on the same data
  with the same flags and seed (in this process, with plain PyG on the CPU)
  and prints both results side by side; ``--json PATH`` writes them.

Example::

    >>> args = parse_args(["--epochs", "3"], lr=0.01)
    >>> args.epochs, args.lr, args.cpu_reference
    (3, 0.01, False)
"""
import argparse
import copy
import json
import os
import os.path as osp
import runpy
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

__all__ = ["data_root", "finish", "log", "mask_accuracies", "molecules",
           "parse_args", "train_epochs"]

HERE = osp.dirname(osp.abspath(__file__))
_REPO_DATASETS = osp.join(HERE, "..", "..", "datasets")

#: What this process's current script has logged: its flags, per-epoch
#: metrics and final metrics.
_RUN: Dict[str, Any] = {}


def data_root(args: argparse.Namespace) -> str:
    """``--data-root``, else ``$POPTORCH_SIM_DATA_ROOT``, else the
    repository's ``datasets/`` (which holds Cora's raw files)."""
    return osp.abspath(args.data_root or os.environ.get(
        "POPTORCH_SIM_DATA_ROOT") or _REPO_DATASETS)


def parse_args(argv: Optional[Sequence[str]] = None,
               **defaults: Any) -> argparse.Namespace:
    """The common flags and the script's own (``defaults``: name ->
    default; ``batch_size=32`` becomes ``--batch-size``), with torch seeded
    by ``--seed``."""
    parser = argparse.ArgumentParser(
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--epochs", type=int, default=defaults.pop("epochs",
                                                                   100))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--subset", type=int, default=None,
                        help="use only the first N graphs of the data set")
    parser.add_argument("--cpu-reference", action="store_true",
                        help="also run the unconverted script (plain PyG on "
                             "the CPU) and print both results")
    parser.add_argument("--json", default=None,
                        help="write the results to this file")
    for name, default in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}",
                            type=type(default), default=default)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    _RUN.clear()
    _RUN.update(args=vars(args), history=[], start=time.perf_counter())
    return args


def log(**metrics: Any) -> None:
    """Prints ``Epoch: 001, Loss: 0.6931, ...`` and records the metrics."""
    now = time.perf_counter()
    metrics = {k: float(v) if k != "Epoch" else int(v)
               for k, v in metrics.items()}
    metrics["seconds"] = now - _RUN.get("last", _RUN["start"])
    _RUN["last"] = now
    _RUN["history"].append(metrics)
    print(", ".join(f"{k}: {v:03d}" if k == "Epoch" else f"{k}: {v:.4f}"
                    for k, v in metrics.items() if k != "seconds"))


def _results() -> Dict[str, Any]:
    history = _RUN["history"]
    return {"history": history, "final": dict(_RUN.get("final", {})),
            "median_seconds_per_epoch": statistics.median(
                [h["seconds"] for h in history]) if history else None}


def _reference_script() -> Optional[str]:
    """The unconverted script of the running converted one (None when the
    running script is a reference itself)."""
    script = osp.abspath(sys.argv[0])
    if osp.basename(osp.dirname(script)) == "reference":
        return None
    return osp.join(osp.dirname(script), "reference", osp.basename(script))


def _run_reference(path: str) -> Dict[str, Any]:
    argv = [a for a in sys.argv[1:] if a != "--cpu-reference"]
    if "--json" in argv:
        del argv[argv.index("--json"):argv.index("--json") + 2]
    saved_argv, saved_run = sys.argv, copy.deepcopy(_RUN)
    print(f"\n--cpu-reference: {osp.relpath(path)} (plain PyG, CPU)")
    sys.argv = [path] + argv
    try:
        runpy.run_path(path, run_name="__main__")
        return _results()
    finally:
        sys.argv = saved_argv
        _RUN.clear()
        _RUN.update(saved_run)


def _table(sides: List[Tuple[str, Dict[str, Any]]]) -> str:
    names = sides[0][1]["final"].keys()
    rows = [("", *[title for title, _ in sides])]
    rows += [(name, *[f"{s['final'][name]:.4f}" for _, s in sides])
             for name in names]
    rows.append(("median s/epoch", *[
        f"{s['median_seconds_per_epoch']:.4f}" for _, s in sides]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths))
                     for row in rows)


def finish(**final: float) -> None:
    """Prints the final metrics; with ``--cpu-reference`` (in a converted
    script) runs the reference script and prints both side by side;
    with ``--json`` writes everything."""
    _RUN["final"] = {k: float(v) for k, v in final.items()}
    results = _results()
    print(", ".join(f"{k}: {v:.4f}" for k, v in _RUN["final"].items()))
    if results["median_seconds_per_epoch"] is not None:
        print(f"Median time per epoch: "
              f"{results['median_seconds_per_epoch']:.4f}s")
    args = _RUN["args"]
    reference = _reference_script()
    record = {"script": osp.basename(sys.argv[0]), "args": args,
              "results": results, "cpu_reference": None}
    if reference is not None and args["cpu_reference"]:
        record["cpu_reference"] = _run_reference(reference)
        print("\n" + _table([("simulated IPU", results),
                              ("plain PyG (CPU)", record["cpu_reference"])]))
    if args["json"]:
        # Written next to the target and renamed over it (this module
        # imports no PopTorch, so not through its atomic_write): a failed
        # write keeps the previous record.
        partial = args["json"] + ".partial"
        with open(partial, "w", encoding="utf-8") as file:
            json.dump(record, file, indent=2)
        os.replace(partial, args["json"])


def train_epochs(epochs: int, train: Callable[[], float],
                 evaluate: Callable[[], Dict[str, float]],
                 select: Optional[Tuple[str, str]] = None) -> None:
    """PyG's epoch loop, shared so that each script keeps only its own
    ``train()`` and ``test()``: for epochs 1 to ``epochs``, ``loss =
    train()``, then the metrics ``evaluate()`` returns, logged with
    :func:`log`; then :func:`finish` with the last loss and metrics.

    ``select=(by, metric)`` is the model selection of PyG's Planetoid
    examples: ``metric`` is logged and finished as it was at the epoch of
    the highest ``by`` so far (0 until one is above 0), and the final
    metrics are that best ``by`` and that ``metric``.

    Example (``train`` and ``test`` as in the batched scripts)::

        train_epochs(args.epochs, train, lambda: dict(
            Train=test(train_loader), Test=test(test_loader)))
    """
    loss, metrics = float("nan"), {}
    best = None if select is None else dict.fromkeys(select, 0.0)
    for epoch in range(1, epochs + 1):
        loss = train()
        metrics = dict(evaluate())
        if select is not None:
            by, metric = select
            if metrics[by] > best[by]:
                best = {by: metrics[by], metric: metrics[metric]}
            metrics[metric] = best[metric]
        log(Epoch=epoch, Loss=loss, **metrics)
    finish(Loss=loss, **(metrics if best is None else best))


def mask_accuracies(pred: torch.Tensor, data: Any) -> Dict[str, float]:
    """The accuracy of the predicted classes ``pred`` on each of ``data``'s
    node masks, as PyG's Planetoid examples compute it: ``{"Train": ...,
    "Val": ..., "Test": ...}``."""
    return {name: int((pred[mask] == data.y[mask]).sum()) / int(mask.sum())
            for name, mask in [("Train", data.train_mask),
                               ("Val", data.val_mask),
                               ("Test", data.test_mask)]}


def molecules(args: argparse.Namespace, task: str = "classification"
              ) -> Tuple[Any, Any, Any]:
    """The NCI molecules that ship in the RDKit wheel (no download) as
    ``(dataset, train, test)``, 90/10: one-hot atom features, and ``y`` the
    class ``TPSA > median`` (``task="classification"``) or the standardised
    TPSA (``"regression"``)."""
    from poptorch_geometric.datasets import NCITPSA  # data only
    dataset = NCITPSA(root=data_root(args))
    if args.subset:
        dataset = dataset[:args.subset]
    tpsa = dataset.y.view(-1)
    dataset.transform = _MoleculeFeatures(task, tpsa)
    perm = torch.randperm(len(dataset))
    num_test = max(1, len(dataset) // 10)
    return dataset, dataset[perm[num_test:]], dataset[perm[:num_test]]


class _MoleculeFeatures:
    """One-hot atom and bond features, the label, and no SMILES string (a
    per-graph Python string is not a tensor a model can take)."""

    def __init__(self, task: str, tpsa: torch.Tensor) -> None:
        from torch_geometric.utils.smiles import e_map, x_map
        self.task = task
        self.median = float(tpsa.median())
        self.mean, self.std = float(tpsa.mean()), float(tpsa.std())
        self.x_sizes = [len(v) for v in x_map.values()]
        self.e_sizes = [len(v) for v in e_map.values()]

    @staticmethod
    def _one_hot(codes: torch.Tensor, sizes: List[int]) -> torch.Tensor:
        return torch.cat([torch.nn.functional.one_hot(codes[:, i], n)
                          for i, n in enumerate(sizes)], dim=1).float()

    def __call__(self, data: Any) -> Any:
        data = copy.copy(data)
        del data.smiles
        data.x = self._one_hot(data.x, self.x_sizes)
        data.edge_attr = self._one_hot(data.edge_attr, self.e_sizes)
        y = data.y.view(-1)
        data.y = (y > self.median).long() if self.task == "classification" \
            else (y - self.mean) / self.std
        return data
