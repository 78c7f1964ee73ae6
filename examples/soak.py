"""Soak test: many training steps of the main job's model with the Async
loader, watching the process's resident memory.

A leak of a few kilobytes per step (a tensor kept per call, a growing
cache, shared-memory slots never released) is invisible in the test suite
and fatal in a week-long run. This script trains the main job's model
(``molecule_model.MoleculeGNN`` on the NCI molecules, packed fixed-size
batches, ``DataLoaderMode.Async``) for ``--steps`` optimizer steps, prints
the resident set size every ``--every`` steps, and fails (exit code 1) when
it grows by more than ``--tolerance`` between the first report (after
warm-up: compilation, allocator pools, the loader's ring) and the last.

Usage::

    python examples/soak.py                     # 10,000 steps, about 5 minutes on 2 cores
    python examples/soak.py --steps 2000 --every 200
"""
import argparse
import os
import sys
import time
from typing import List, Optional

import torch

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric.datasets import NCITPSA

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from molecule_model import MoleculeGNN  # noqa: E402

_INPUTS = ("x", "edge_index", "edge_attr", "batch", "graphs_mask", "y")


def resident_mib() -> float:
    """This process's resident set size, in MiB (Linux ``/proc``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000,
                        help="optimizer steps in all")
    parser.add_argument("--every", type=int, default=1_000,
                        help="steps between memory reports")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="allowed growth after the first report")
    parser.add_argument("--batch-size", type=int, default=128,
                        help="graphs per batch on average")
    parser.add_argument("--data-root", default=None,
                        help="dataset cache (default: "
                             "$POPTORCH_SIM_DATA_ROOT or ./datasets)")
    args = parser.parse_args(argv)
    if args.steps < 2 * args.every or args.every < 1:
        parser.error("--steps must be at least twice --every (> 0): the "
                     "first report is the baseline")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(0)
    dataset = NCITPSA(root=args.data_root)
    sizes = pyg_ipu.FixedSizeOptions.for_batch_size(dataset, args.batch_size)
    opts = poptorch.Options().randomSeed(0)
    # The worker process and its shared-memory ring are what may leak: use
    # them even where no CPU is free for a worker (Async would then load
    # in this process).
    os.environ.setdefault("POPTORCH_ASYNC_PLACEMENT", "worker")
    loader = pyg_ipu.FixedSizeDataLoader(
        dataset, batch_size=sizes.num_graphs, fixed_size_options=sizes,
        fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
        shuffle=True, exclude_keys=["smiles"], options=opts,
        mode=poptorch.DataLoaderMode.Async)
    y = torch.cat([d.y.view(-1) for d in dataset])
    model = MoleculeGNN(sizes.num_graphs, 64, 3, float(y.mean()),
                        float(y.std()))
    train = poptorch.trainingModel(
        model, opts, poptorch.optim.Adam(model.parameters(), lr=1e-3))
    reports, steps, start = [], 0, time.perf_counter()
    try:
        while steps < args.steps:
            for batch in loader:
                train(*[batch[name] for name in _INPUTS])
                steps += 1
                if steps % args.every == 0:
                    reports.append(resident_mib())
                    print(f"step {steps:6d}: resident {reports[-1]:8.1f} "
                          f"MiB ({time.perf_counter() - start:.0f} s)",
                          flush=True)
                if steps == args.steps:
                    break
    finally:
        loader.terminate()
    growth = reports[-1] / reports[0] - 1
    print(f"growth after the first report: {growth:+.1%} (limit "
          f"{args.tolerance:.0%})")
    return 0 if growth <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
