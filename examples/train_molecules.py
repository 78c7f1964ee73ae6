"""Train a GNN to predict the polar surface area (TPSA) of molecules on the
simulated IPU.

The data are the 4,999 NCI molecules with TPSA labels that ship inside the
RDKit wheel (no download). Batches come from PopTorch Geometric's
``FixedSizeDataLoader`` with stream packing, so every batch has the same
shape (compile once, little padding), and the model runs with
``poptorch.trainingModel`` / ``poptorch.inferenceModel``.

Usage::

    python examples/train_molecules.py                 # about a minute on 2 CPU cores
    python examples/train_molecules.py --quick         # a few seconds
    python examples/train_molecules.py --backend compile --device-iterations 4
    torchrun --nproc_per_node 2 examples/train_molecules.py   # 2 processes

Under ``torchrun`` (or PopRun) every process trains on its own share of the
molecules with ``--replication`` replicas (so ``2 x --replication`` in all),
gradients are summed across the processes at every step, and process 0
prints the summary of the whole run.

The last step of an epoch may not have a packed batch for every replica,
accumulation step and device iteration: the loader completes it with
padding-only mini-batches. The model is called with the whole batch, so
PopTorch sees its ``graphs_mask`` and leaves them out of the update (the
``Mean`` reduction divides by the real mini-batches), and the train loss
averages the real mini-batches' losses only: the same update and loss as
fewer replicas on the same packed batches.
"""
import argparse
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional

import torch
from tqdm import tqdm

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric.datasets import NCITPSA

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _example_common import (CalledWithBatch,  # noqa: E402
                             device_estimate, positive_int, write_json)
from molecule_model import MoleculeGNN  # noqa: E402

_INPUTS = ("x", "edge_index", "edge_attr", "batch", "graphs_mask", "y")


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(
            f"must be a positive number, got {text}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"must be between 0 and 1 (exclusive), got {text}")
    return value


#: What --quick changes, for the flags the command line leaves unset.
_QUICK = {"epochs": 5, "limit": 1000}
_DEFAULTS = {"epochs": 40, "limit": None}


class _HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default; flags whose default depends on something
    else (None) say so in their own help."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=_HelpWithDefaults)
    parser.add_argument("--epochs", type=positive_int, default=None,
                        help="default: 40, or 5 with --quick")
    parser.add_argument("--batch-size", type=positive_int, default=128,
                        help="graphs per batch on average, as PyG's "
                             "DataLoader(batch_size) takes them: the fixed "
                             "sizes come from "
                             "FixedSizeOptions.for_batch_size")
    parser.add_argument("--device-iterations", type=positive_int,
                        default=1, help="optimizer steps per call")
    parser.add_argument("--gradient-accumulation", type=positive_int,
                        default=1, help="micro-batches per optimizer step")
    parser.add_argument("--replication", type=positive_int, default=1,
                        help="model replicas (simulated IPUs)")
    parser.add_argument("--backend", choices=("auto", "interpret",
                                              "compile"),
                        default=None,
                        help="default: $POPTORCH_SIM_BACKEND, or auto "
                             "(interpret while the compiled step builds "
                             "in the background, then compiled)")
    parser.add_argument("--host-device", choices=("cpu", "cuda"),
                        default="cpu", help="where the simulated IPU runs")
    parser.add_argument("--lr", type=_positive_float, default=3e-3,
                        help="Adam learning rate (cosine schedule)")
    parser.add_argument("--hidden", type=positive_int, default=64,
                        help="hidden channels")
    parser.add_argument("--layers", type=positive_int, default=3,
                        help="message-passing layers")
    parser.add_argument("--val-fraction", type=_fraction, default=0.1,
                        help="share of the molecules held out")
    parser.add_argument("--data-root", default=None,
                        help="dataset cache (default: $POPTORCH_SIM_DATA_ROOT "
                             "or ./datasets)")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="use only the first N molecules (default: all, "
                             "or 1,000 with --quick)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the split, the model and the device")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: 5 epochs on 1,000 molecules, "
                             "unless --epochs or --limit say otherwise")
    parser.add_argument("--json", default=None,
                        help="also write the summary to this JSON file")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars")
    args = parser.parse_args(argv)
    # --quick fills in only what the command line left unset.
    for name, default in (_QUICK if args.quick else _DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.limit is not None:
        _check_split(parser, args.limit, args.val_fraction)
    if args.backend is None:
        args.backend = poptorch.Options().Simulator.execution_backend
    return args


def _options(args: argparse.Namespace, training: bool) -> poptorch.Options:
    opts = poptorch.Options().randomSeed(args.seed)
    # The validation set is scored once, in a few calls: an auto build of
    # the inference model would never be used, and the script would wait
    # for it at its end.
    backend = "interpret" if args.backend == "auto" and not training \
        else args.backend
    opts.Simulator.backend(backend).hostDevice(args.host_device)
    if training:
        opts.deviceIterations(args.device_iterations)
        opts.replicationFactor(args.replication)
        opts.Training.gradientAccumulation(args.gradient_accumulation)
        # Every mini-batch's loss comes back, to average the real ones.
        opts.outputMode(poptorch.OutputMode.All)
    return opts


def _loader(dataset, sizes, options, shuffle: bool, share: bool = True):
    """Packed fixed-size batches; with several processes, each process
    reads its own share unless ``share`` is False."""
    return pyg_ipu.FixedSizeDataLoader(
        dataset, batch_size=sizes.num_graphs, shuffle=shuffle,
        fixed_size_options=sizes,
        fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
        exclude_keys=["smiles"], options=options,
        auto_distributed_partitioning=share)


def _inputs(batch) -> List[torch.Tensor]:
    return [batch[name] for name in _INPUTS]


def _over_processes(values: List[float], op: str = "SUM") -> List[float]:
    """Per-process numbers combined over the processes of a distributed
    run (``torchrun``); unchanged in a single process."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return list(values)
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op))
    return tensor.tolist()


def _train(args, train_model, train_loader, optimizer, schedule,
           show: bool) -> Dict[str, Any]:
    """Trains for ``args.epochs``; returns the loss history and graphs seen
    (over all processes), the slowest process's seconds, and this
    process's graphs and micro-batches."""
    history, graphs_seen, batches_seen, train_time = [], 0, 0, 0.0
    first_step = (0.0, 0)  # (seconds, graphs) of the step that compiles
    num_graphs = train_loader.fixed_size_options.num_graphs
    steps = _expected_steps(args, len(train_loader.dataset))
    for epoch in range(args.epochs):
        losses, start = [], time.perf_counter()
        bar = tqdm(iter(train_loader), total=steps, leave=False,
                   desc=f"epoch {epoch + 1}/{args.epochs}", disable=not show)
        for steps, batch in enumerate(bar, 1):
            _, loss = train_model(batch)
            # One loss per mini-batch (OutputMode.All); padding-only ones
            # (loss 0) are not part of the epoch's mean.
            real = pyg_ipu.num_real_graphs_per_mini_batch(batch) > 0
            losses += loss.view(-1)[real].tolist()
            graphs = int(batch.graphs_mask.sum())
            graphs_seen += graphs
            batches_seen += len(batch.graphs_mask) // num_graphs
            if not first_step[1]:
                first_step = (time.perf_counter() - start, graphs)
            if losses:
                bar.set_postfix(loss=f"{losses[-1]:.4f}")
        train_time += time.perf_counter() - start
        schedule.step()
        train_model.setOptimizer(optimizer)  # the new LR reaches the device
        total, count = _over_processes([sum(losses), len(losses)])
        history.append(total / max(count, 1))
        if show:
            tqdm.write(f"epoch {epoch + 1}: train loss {history[-1]:.4f}")
    # Throughput leaves out the first step, which compiles the model.
    all_graphs, after_first = _over_processes(
        [graphs_seen, graphs_seen - first_step[1]])
    train_time, first_seconds = _over_processes(
        [train_time - first_step[0], first_step[0]], "MAX")
    return {"history": history, "graphs": all_graphs,
            "graphs_after_first_step": after_first, "seconds": train_time,
            "first_step_seconds": first_seconds,
            "local_graphs": graphs_seen, "local_batches": batches_seen}


def _expected_steps(args, num_molecules: int) -> int:
    """Steps per epoch the budgets were made for (PyG's step count, over
    the processes and per call): the progress bar's total, as a shuffled
    epoch has no length before it is drawn."""
    batches = math.ceil(num_molecules / args.batch_size)
    processes = max(1, int(os.environ.get("WORLD_SIZE", "1")))
    combined = (args.device_iterations * args.gradient_accumulation *
                args.replication)
    return max(1, math.ceil(batches / processes / combined))


def _evaluate(eval_model, val_loader, mean: float) -> List[float]:
    """Absolute error, error of predicting ``mean`` and molecules, summed
    over the validation set."""
    abs_error = baseline_error = count = 0.0
    for batch in val_loader:
        prediction = eval_model(*_inputs(batch)[:5])
        mask = batch.graphs_mask.bool()
        target = batch.y.view(-1)[mask]
        abs_error += float((prediction[mask] - target).abs().sum())
        baseline_error += float((target - mean).abs().sum())
        count += int(mask.sum())
    return [abs_error, baseline_error, count]


def _slot_efficiency(loader) -> Dict[str, float]:
    """Real nodes, edges and graphs over slots, over all processes."""
    e = pyg_ipu.batching_efficiency(loader)
    counts = _over_processes([e.real_nodes, e.node_slots, e.real_edges,
                              e.edge_slots, e.real_graphs, e.graph_slots])
    return {f"{kind}_slot_efficiency": real / max(slots, 1) for kind, real,
            slots in zip(("node", "edge", "graph"), counts[::2],
                         counts[1::2])}


def _num_val(num_molecules: int, val_fraction: float) -> int:
    """Molecules held out for validation: at least one."""
    return max(1, int(num_molecules * val_fraction))


#: Molecules the training split needs: the labels are standardised by
#: their spread, which one molecule does not have.
_MIN_TRAIN = 2


def _check_split(parser: argparse.ArgumentParser, limit: int,
                 val_fraction: float) -> None:
    """Exits with an argparse error unless ``--limit`` leaves one molecule
    to validate on and two to train on."""
    if limit - _num_val(limit, val_fraction) >= _MIN_TRAIN:
        return
    least = next(n for n in range(limit + 1, limit + 10**6)
                 if n - _num_val(n, val_fraction) >= _MIN_TRAIN)
    parser.error(
        f"argument --limit: must be at least {least} with --val-fraction "
        f"{val_fraction}, got {limit}: the split holds out "
        f"{_num_val(limit, val_fraction)} molecule(s) for validation and "
        f"needs {_MIN_TRAIN} to train on (the labels are standardised by "
        "their spread)")


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Trains and evaluates; returns the summary."""
    torch.manual_seed(args.seed)
    dataset = NCITPSA(root=args.data_root)
    if args.limit:
        dataset = dataset[:args.limit]
    perm = torch.randperm(len(dataset))
    num_val = _num_val(len(dataset), args.val_fraction)
    val_set, train_set = dataset[perm[:num_val]], dataset[perm[num_val:]]
    train_y = torch.cat([d.y.view(-1) for d in train_set])
    # As many steps per epoch as PyG's DataLoader(batch_size) would take,
    # with packed fixed-size batches.
    sizes = pyg_ipu.FixedSizeOptions.for_batch_size(
        train_set, batch_size=args.batch_size)

    train_loader = _loader(train_set, sizes, _options(args, True), True)
    # Every process scores the whole (small) validation set.
    val_loader = _loader(val_set, sizes, _options(args, False), False,
                         share=False)
    model = MoleculeGNN(sizes.num_graphs, args.hidden, args.layers,
                        float(train_y.mean()), float(train_y.std()))
    optimizer = poptorch.optim.Adam(model.parameters(), lr=args.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=max(args.epochs, 1))
    # Called with the whole batch, so that PopTorch sees its graphs_mask.
    train_model = poptorch.trainingModel(CalledWithBatch(model, _INPUTS),
                                         _options(args, True), optimizer)
    processes = _options(args, True).Distributed
    trained = _train(args, train_model, train_loader, optimizer, schedule,
                     show=not args.no_progress and processes.processId == 0)

    model.eval()
    eval_model = poptorch.inferenceModel(model, _options(args, False))
    abs_error, baseline_error, count = _evaluate(eval_model, val_loader,
                                                 float(train_y.mean()))
    history = trained["history"]
    return {
        "epochs": args.epochs,
        "processes": processes.numProcesses,
        "train_molecules": len(train_set),
        "val_molecules": len(val_set),
        "final_train_loss": history[-1] if history else math.nan,
        "loss_history": history,
        "val_mae": abs_error / count,
        "val_mae_predicting_mean": baseline_error / count,
        "first_step_seconds": trained["first_step_seconds"],
        "train_graphs_per_second": trained["graphs_after_first_step"] /
                                   max(trained["seconds"], 1e-9),
        # All processes together read each molecule at most once an epoch.
        "train_graphs_per_epoch": trained["graphs"] / max(args.epochs, 1),
        **_slot_efficiency(train_loader),
        "budgets": {"num_nodes": sizes.num_nodes, "num_edges": sizes.num_edges,
                    "num_graphs": sizes.num_graphs},
        "compilations": {"train": train_model.compilations(),
                         "inference": eval_model.compilations()},
        "backend": args.backend,
        # Per process: the graphs its micro-batches held on average.
        "simulated_ipu": device_estimate(
            train_model, trained["local_graphs"] /
            max(trained["local_batches"], 1)),
    }


def _backend_line(summary: Dict[str, Any]) -> str:
    compilations = summary["compilations"]
    if summary["backend"] == "interpret":
        return ("interpret (runs the traced graph as it is: nothing to "
                "compile; --backend compile or POPTORCH_SIM_BACKEND=compile "
                "compiles it with inductor)")
    if summary["backend"] == "auto":
        if not compilations["train"]:
            return ("auto (interpret all along: the run ended before the "
                    "compiled step was built in the background)")
        return ("auto (interpret for the first steps, compiled once built "
                "in the background; inductor compilations: train "
                f"{compilations['train']}; the few validation calls run "
                "interpret)")
    return (f"compile (inductor compilations: train "
            f"{compilations['train']}, inference "
            f"{compilations['inference']}; 1 each means no "
            "recompilation)")


def print_summary(summary: Dict[str, Any]) -> None:
    gain = 1 - summary["val_mae"] / summary["val_mae_predicting_mean"]
    budgets = summary["budgets"]
    lines = [
        "",
        "=== TPSA regression on the simulated IPU ===",
        f"molecules          {summary['train_molecules']} train / "
        f"{summary['val_molecules']} validation",
        f"epochs             {summary['epochs']}"
        + (f" on {summary['processes']} processes"
           if summary["processes"] > 1 else ""),
        f"train loss         {summary['loss_history'][0]:.4f} -> "
        f"{summary['final_train_loss']:.4f} (standardised MSE)",
        f"validation MAE     {summary['val_mae']:.2f} A^2 (predicting the mean:"
        f" {summary['val_mae_predicting_mean']:.2f}; "
        + (f"{gain:.0%} lower)" if gain > 0 else "no better yet)"),
        f"throughput         {summary['train_graphs_per_second']:.0f} "
        "training graphs/s (after the first step, which traces"
        + (" and compiles" if summary["backend"] == "compile" else "")
        + f": {summary['first_step_seconds']:.1f} s)",
        f"batch budgets      {budgets['num_graphs']} graphs, "
        f"{budgets['num_nodes']} nodes, {budgets['num_edges']} edges",
        f"slot efficiency    nodes {summary['node_slot_efficiency']:.1%}, "
        f"edges {summary['edge_slot_efficiency']:.1%}, graphs "
        f"{summary['graph_slot_efficiency']:.1%}",
        f"backend            {_backend_line(summary)}",
        f"simulated IPU      {summary['simulated_ipu']['summary']}",
    ]
    print("\n".join(lines))


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        summary = run(args)
    except KeyboardInterrupt:
        print("\nInterrupted: no summary written.", file=sys.stderr)
        return 130
    if poptorch.Options().Distributed.processId != 0:
        return 0  # process 0 reports for the whole run
    print_summary(summary)
    if args.json:
        write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
