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
from _example_common import write_json  # noqa: E402
from molecule_model import MoleculeGNN  # noqa: E402

_INPUTS = ("x", "edge_index", "edge_attr", "batch", "graphs_mask", "y")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.
                                     ArgumentDefaultsHelpFormatter)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=128,
                        help="graphs per batch on average, as PyG's "
                             "DataLoader(batch_size) takes them: the fixed "
                             "sizes come from "
                             "FixedSizeOptions.for_batch_size")
    parser.add_argument("--device-iterations", type=int, default=1)
    parser.add_argument("--gradient-accumulation", type=int, default=1)
    parser.add_argument("--replication", type=int, default=1)
    parser.add_argument("--backend", choices=("interpret", "compile"),
                        default="interpret")
    parser.add_argument("--host-device", choices=("cpu", "cuda"),
                        default="cpu")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--data-root", default=None,
                        help="dataset cache (default: $POPTORCH_SIM_DATA_ROOT "
                             "or ./datasets)")
    parser.add_argument("--limit", type=int, default=None,
                        help="use only the first N molecules")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="5 epochs on 1,000 molecules: a smoke test")
    parser.add_argument("--json", default=None,
                        help="also write the summary to this JSON file")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.limit = 5, args.limit or 1000
    return args


def _options(args: argparse.Namespace, training: bool) -> poptorch.Options:
    opts = poptorch.Options().randomSeed(args.seed)
    opts.Simulator.backend(args.backend).hostDevice(args.host_device)
    if training:
        opts.deviceIterations(args.device_iterations)
        opts.replicationFactor(args.replication)
        opts.Training.gradientAccumulation(args.gradient_accumulation)
    return opts


def _loader(dataset, sizes, options, shuffle: bool):
    return pyg_ipu.FixedSizeDataLoader(
        dataset, batch_size=sizes.num_graphs, shuffle=shuffle,
        fixed_size_options=sizes,
        fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
        exclude_keys=["smiles"], options=options)


def _inputs(batch) -> List[torch.Tensor]:
    return [batch[name] for name in _INPUTS]


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Trains and evaluates; returns the summary."""
    torch.manual_seed(args.seed)
    dataset = NCITPSA(root=args.data_root)
    if args.limit:
        dataset = dataset[:args.limit]
    perm = torch.randperm(len(dataset))
    num_val = max(1, int(len(dataset) * args.val_fraction))
    val_set, train_set = dataset[perm[:num_val]], dataset[perm[num_val:]]
    train_y = torch.cat([d.y.view(-1) for d in train_set])
    # As many steps per epoch as PyG's DataLoader(batch_size) would take,
    # with packed fixed-size batches.
    sizes = pyg_ipu.FixedSizeOptions.for_batch_size(
        train_set, batch_size=args.batch_size)

    train_loader = _loader(train_set, sizes, _options(args, True), True)
    val_loader = _loader(val_set, sizes, _options(args, False), False)
    model = MoleculeGNN(sizes.num_graphs, args.hidden, args.layers,
                        float(train_y.mean()), float(train_y.std()))
    optimizer = poptorch.optim.Adam(model.parameters(), lr=args.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=max(args.epochs, 1))
    train_model = poptorch.trainingModel(model, _options(args, True),
                                         optimizer)

    history, graphs_seen, train_time = [], 0, 0.0
    steps = None  # shuffled packing has no length before the first epoch
    for epoch in range(args.epochs):
        losses, start = [], time.perf_counter()
        bar = tqdm(iter(train_loader), total=steps, leave=False,
                   desc=f"epoch {epoch + 1}/{args.epochs}",
                   disable=args.no_progress)
        for batch in bar:
            _, loss = train_model(*_inputs(batch))
            losses.append(float(loss.mean()))
            graphs_seen += int(batch.graphs_mask.sum())
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        train_time += time.perf_counter() - start
        steps = len(losses)
        schedule.step()
        train_model.setOptimizer(optimizer)  # the new LR reaches the device
        history.append(sum(losses) / max(len(losses), 1))
        if not args.no_progress:
            tqdm.write(f"epoch {epoch + 1}: train loss {history[-1]:.4f}")

    model.eval()
    eval_model = poptorch.inferenceModel(model, _options(args, False))
    abs_error = baseline_error = count = 0.0
    mean = float(train_y.mean())
    for batch in val_loader:
        prediction = eval_model(*_inputs(batch)[:5])
        mask = batch.graphs_mask.bool()
        target = batch.y.view(-1)[mask]
        abs_error += float((prediction[mask] - target).abs().sum())
        baseline_error += float((target - mean).abs().sum())
        count += int(mask.sum())
    efficiency = pyg_ipu.batching_efficiency(train_loader)
    return {
        "epochs": args.epochs,
        "train_molecules": len(train_set),
        "val_molecules": len(val_set),
        "final_train_loss": history[-1] if history else math.nan,
        "loss_history": history,
        "val_mae": abs_error / count,
        "val_mae_predicting_mean": baseline_error / count,
        "train_graphs_per_second": graphs_seen / max(train_time, 1e-9),
        "node_slot_efficiency": efficiency.node_efficiency,
        "edge_slot_efficiency": efficiency.edge_efficiency,
        "graph_slot_efficiency": efficiency.graph_efficiency,
        "budgets": {"num_nodes": sizes.num_nodes, "num_edges": sizes.num_edges,
                    "num_graphs": sizes.num_graphs},
        "compilations": {"train": train_model.compilations(),
                         "inference": eval_model.compilations()},
        "backend": args.backend,
    }


def print_summary(summary: Dict[str, Any]) -> None:
    gain = 1 - summary["val_mae"] / summary["val_mae_predicting_mean"]
    budgets = summary["budgets"]
    lines = [
        "",
        "=== TPSA regression on the simulated IPU ===",
        f"molecules          {summary['train_molecules']} train / "
        f"{summary['val_molecules']} validation",
        f"epochs             {summary['epochs']}",
        f"train loss         {summary['loss_history'][0]:.4f} -> "
        f"{summary['final_train_loss']:.4f} (standardised MSE)",
        f"validation MAE     {summary['val_mae']:.2f} A^2 (predicting the mean:"
        f" {summary['val_mae_predicting_mean']:.2f}; "
        + (f"{gain:.0%} lower)" if gain > 0 else "no better yet)"),
        f"throughput         {summary['train_graphs_per_second']:.0f} "
        "training graphs/s",
        f"batch budgets      {budgets['num_graphs']} graphs, "
        f"{budgets['num_nodes']} nodes, {budgets['num_edges']} edges",
        f"slot efficiency    nodes {summary['node_slot_efficiency']:.1%}, "
        f"edges {summary['edge_slot_efficiency']:.1%}, graphs "
        f"{summary['graph_slot_efficiency']:.1%}",
        f"backend            {summary['backend']} (compilations: train "
        f"{summary['compilations']['train']}, inference "
        f"{summary['compilations']['inference']})",
    ]
    print("\n".join(lines))


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    summary = run(args)
    print_summary(summary)
    if args.json:
        write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
