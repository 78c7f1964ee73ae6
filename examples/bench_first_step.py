"""Benchmark: seconds from the first call of a training model to its first
result, per backend, with a cold and with a warm compilation cache.

Each measurement runs in a fresh Python process (so nothing stays in memory
from an earlier one) on the main job's model and a packed NCI batch, in
three settings:

* cold: the process gets an empty temporary directory, and with it an
  empty inductor cache and no machine-wide precompiled headers (which
  inductor keeps under the temporary directory, outside its cache): a first
  run on a new machine. It starts building the headers in the background
  (``inductor.precompiled_headers``); the benchmark waits for them before the
  next run;
* warm: a second process reuses that directory, as a user's second run of
  a script does;
* new model: a third process keeps the directory (the machine's headers)
  but gets an empty inductor cache, as a new model, or a changed one, does
  on a machine that has compiled before.

The ``interpret`` backend compiles nothing, so its figures are the cost of
tracing alone; nor does ``auto``'s first step (its build starts at the
second call, in the background: each ``auto`` run waits for it before it
ends, so that no compiler it started slows the next run).

A cold first step on 2 cores keeps both busy (tracing and code generation
on one, inductor's ISA check and then the C++ builds on both), so its time
follows the machine's speed, which swings by up to 2x over a day: one
sample says little. Each figure is the median of ``samples`` pairs of runs
(cold then warm, each pair in its own directory; the backends take turns),
and the record keeps every sample.

Usage::

    python examples/bench_first_step.py [--backends interpret compile]
        [--samples 3]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

from _example_common import positive_int
from poptorch_core._executor.backends.inductor.precompiled_headers import \
    wait_for_header_builds

_SCRIPT = r"""
import json, sys, time
import torch
import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric.datasets import NCITPSA
sys.path.insert(0, {examples!r})
from molecule_model import MoleculeGNN
dataset = NCITPSA(root={root!r})[:1000]
sizes = pyg_ipu.FixedSizeOptions.for_batch_size(dataset, 128)
loader = pyg_ipu.FixedSizeDataLoader(
    dataset, batch_size=sizes.num_graphs, fixed_size_options=sizes,
    fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
    exclude_keys=["smiles"])
batch = next(iter(loader))
inputs = [batch[k] for k in ("x", "edge_index", "edge_attr", "batch",
                             "graphs_mask", "y")]
model = MoleculeGNN(sizes.num_graphs, 64, 3, 0.0, 1.0)
opts = poptorch.Options()
opts.Simulator.backend({backend!r})
train = poptorch.trainingModel(
    model, opts, poptorch.optim.Adam(model.parameters(), lr=1e-3))
start = time.perf_counter()
train(*inputs)
first = time.perf_counter() - start
start = time.perf_counter()
train(*inputs)
second = time.perf_counter() - start
# auto: the second call started a build; let it finish, so that nothing
# it started (C++ builds) runs on into the next measurement.
tiers = train._state.program.tiers
if tiers is not None:
    tiers.wait()
print(json.dumps({{"first_step_s": first, "second_step_s": second}}))
"""


def _run(backend: str, temp_dir: str, root: Optional[str],
         cache: str = "inductor") -> Dict:
    examples = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TMPDIR=temp_dir, POPTORCH_LOG_LEVEL="ERR",
               TORCHINDUCTOR_CACHE_DIR=os.path.join(temp_dir, cache))
    env.pop("POPTORCH_SIM_BACKEND", None)
    code = _SCRIPT.format(examples=examples, root=root, backend=backend)
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=900,
                            check=False)
    if result.returncode != 0:
        raise RuntimeError(f"first-step run ({backend}) failed:\n"
                           f"{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def first_step_seconds(backends: List[str], root: Optional[str] = None,
                       samples: int = 3) -> Dict[str, Dict]:
    """``{backend: {"cold_s", "warm_s", "new_model_s", "steady_step_s",
    "cold_samples_s", "warm_samples_s", "new_model_samples_s"}}``: the first
    call's seconds on a new machine, with a filled inductor cache, and with
    an empty inductor cache but the machine's precompiled headers (see the
    module docstring), and the second call's (a steady step) for scale,
    each the median of ``samples`` measurements (all kept in the
    ``*_samples_s`` lists)."""
    if samples < 1:
        raise ValueError(f"samples ({samples}) must be at least 1.")
    runs: Dict[str, Dict[str, List[float]]] = {
        backend: {"cold": [], "warm": [], "new_model": [], "steady": []}
        for backend in backends}
    for _ in range(samples):
        for backend in backends:
            with tempfile.TemporaryDirectory(prefix="first-step-") as temp:
                cold = _run(backend, temp, root)
                _wait_for_header_builds(temp)
                warm = _run(backend, temp, root)
                new_model = _run(backend, temp, root, "inductor-new-model")
            runs[backend]["cold"].append(cold["first_step_s"])
            runs[backend]["warm"].append(warm["first_step_s"])
            runs[backend]["new_model"].append(new_model["first_step_s"])
            runs[backend]["steady"].append(warm["second_step_s"])
    return {backend: {"cold_s": statistics.median(r["cold"]),
                      "warm_s": statistics.median(r["warm"]),
                      "new_model_s": statistics.median(r["new_model"]),
                      "steady_step_s": statistics.median(r["steady"]),
                      "cold_samples_s": r["cold"],
                      "warm_samples_s": r["warm"],
                      "new_model_samples_s": r["new_model"]}
            for backend, r in runs.items()}


def _wait_for_header_builds(temp_dir: str) -> None:
    """Waits for the precompiled headers that a first run in ``temp_dir``
    started building (inductor's machine-wide directory under it)."""
    for directory in glob.glob(os.path.join(
            glob.escape(temp_dir), "torchinductor_*", "precompiled_headers")):
        if not wait_for_header_builds(directory):
            raise RuntimeError(f"precompiled headers still building in "
                               f"{directory} after 10 minutes")


def _seconds(values: List[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values) + " s"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+",
                        default=["interpret", "compile", "auto"],
                        choices=("interpret", "compile", "auto"))
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--samples", type=positive_int, default=3,
                        help="cold, new-model and warm runs per backend "
                             "(medians)")
    args = parser.parse_args(argv)
    for backend, r in first_step_seconds(args.backends, args.data_root,
                                         args.samples).items():
        print(f"{backend:10} first step: cold {r['cold_s']:6.2f} s, new "
              f"model {r['new_model_s']:6.2f} s, warm {r['warm_s']:6.2f} s "
              f"(medians of {args.samples}; cold "
              f"{_seconds(r['cold_samples_s'])}, new model "
              f"{_seconds(r['new_model_samples_s'])}, warm "
              f"{_seconds(r['warm_samples_s'])}; a later step: "
              f"{r['steady_step_s'] * 1e3:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
