"""The GNN benchmark: the simulated IPU stack against plain PyG, in one run.

Every figure is a ratio or a fraction measured in this process on the same
data (the embedded NCI TPSA molecules) and the same model
(``molecule_model.MoleculeGNN``):

* collation: graphs/s of PopTorch Geometric's fixed-size fast path over
  PyG's ``Collater`` on the same 128-graph batches (padding included),
  given lists of graphs and, as ``FixedSizeDataLoader`` does, lists that
  read from the dataset's storage;
* packing efficiency: real nodes/edges/graphs over slots of a shuffled
  epoch for StreamPack (``FixedSizeOptions.for_packing``) at lookahead
  windows 0 (PopTorch's greedy packing), 64, 256 and 1024, with the
  sampler's time per batch against the rest of the loader's (reading and
  collation from storage, timed in turns with it), and for PadToMax
  (worst-case budgets); the same for a synthetic long-tailed size
  distribution (``bench_collation.long_tailed_graphs``);
* training throughput: graphs/s of ``poptorch.trainingModel`` fed by
  ``poptorch_geometric.FixedSizeDataLoader`` (StreamPack), with the
  ``interpret``, ``compile`` and ``auto`` backends (``auto`` with Sync
  loading only), over a plain PyG eager loop with
  PyG's ``DataLoader``. Both take the same number of optimizer steps per
  epoch: the packing budgets come from ``FixedSizeOptions.for_batch_size``
  (batches of 128 graphs on average, like PyG's ``batch_size=128``);
  and each backend's ``DataLoaderMode.Async`` over ``Sync``, the median of
  the two setups' ratios in each round (the setups take turns epoch by
  epoch, in reverse order every other round). The ``auto`` setup's first
  ``AUTO_FIRST_EPOCHS`` epochs, from its first call (interpret while its
  compiled step builds in the background, from inductor's cache once the
  ``compile`` setups have compiled the same graph), count too
  (``over_pyg_eager_first_epochs``); its build is waited for before the
  measured rounds, which it would otherwise slow;
* executor overhead: a training step of the ``interpret`` backend over the
  same step run eagerly on the same fixed-size batch; and the interpret
  backend's ceiling: a plain PyG iteration (reading and collating 128
  graphs, then the eager step) over the interpret step alone, the ratio
  ``interpret`` would reach if its loading cost nothing;
* compilations: how many times the ``compile`` backend compiled during the
  measured epochs (fixed shapes: once);
* first step: seconds from a training model's first call to its first
  result per backend, on a new machine (nothing cached), for a new model
  (an empty inductor cache, the machine's precompiled headers) and with a
  warm inductor cache (``bench_first_step.py``: medians of
  ``--first-step-samples`` triples of fresh processes, every sample kept);
* the simulated IPU's estimate for the trained model (``simulationReport``):
  memory of the fullest IPU and roofline graphs/s on a Mk2 IPU;
* sampling loaders (``bench_sampling.py``): seed nodes/s of the neighbour
  loaders at fanout [15, 10] and subgraphs/s of the cluster loaders on a
  1M-node power-law graph (100k with ``--quick``), their peak memory and
  padding efficiency; ``--no-sampling`` skips them.

Usage::

    python examples/benchmark.py --quick                 # about two minutes
    python examples/benchmark.py --out bench_out/benchmark.json --plot bench_out/benchmark.png
"""
import argparse
import copy
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch_geometric.loader import DataLoader as PyGDataLoader
from torch_geometric.loader.dataloader import Collater

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_core.data._placement import async_placement
from poptorch_core.executor.backends._precompiled_headers import \
    wait_for_header_builds
from poptorch_geometric.datasets import NCITPSA

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_sampling  # noqa: E402
from _example_common import atomic_write, write_json  # noqa: E402
from bench_first_step import first_step_seconds  # noqa: E402
from bench_collation import (collation_throughput,  # noqa: E402
                             long_tailed_graphs, slot_efficiency)
from _example_common import (device_estimate, int_at_least,  # noqa: E402
                             positive_int)
from molecule_model import MoleculeGNN  # noqa: E402

GRAPHS_PER_BATCH = 128
#: Epochs of the ``auto`` setup timed from its first call.
AUTO_FIRST_EPOCHS = 5
_INPUTS = ("x", "edge_index", "edge_attr", "batch", "graphs_mask", "y")
#: Keys of the JSON record that tests and dashboards rely on.
RECORD_KEYS = ("config", "collation", "packing", "packing_long_tailed",
               "training", "overhead",
               "first_step", "compilations", "ratios", "simulated_ipu")


def _inputs(batch) -> List[torch.Tensor]:
    return [batch[name] for name in _INPUTS]


def _new_model(dataset_y: torch.Tensor, num_graphs: int, hidden: int
               ) -> MoleculeGNN:
    torch.manual_seed(0)
    return MoleculeGNN(num_graphs, hidden, 3, float(dataset_y.mean()),
                       float(dataset_y.std()))


# --- Training throughput -------------------------------------------------------

class _Setup:
    """One training setup: ``epoch()`` trains one epoch and returns the real
    graphs it saw and the optimizer steps it took."""

    def __init__(self, epoch: Callable[[], Tuple[int, int]],
                 compilations: Callable[[], int] = lambda: 0,
                 close: Callable[[], None] = lambda: None,
                 estimate: Optional[Callable[[float], Dict]] = None,
                 tiers: Any = None):
        self.epoch, self.compilations, self.close = epoch, compilations, close
        #: graphs per micro-batch -> the simulated IPU's estimate.
        self.estimate = estimate
        #: The ``auto`` backend's state (``executor._tiered``), or None.
        self.tiers = tiers


def _pyg_eager(dataset, model: MoleculeGNN) -> _Setup:
    """Plain PyG: its DataLoader, the eager model, torch's Adam."""
    loader = PyGDataLoader(dataset, batch_size=GRAPHS_PER_BATCH, shuffle=True,
                           exclude_keys=["smiles"])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def epoch() -> Tuple[int, int]:
        graphs = steps = 0
        for batch in loader:
            model.num_graphs = batch.num_graphs
            optimizer.zero_grad()
            batch.graphs_mask = torch.ones(batch.num_graphs, dtype=torch.bool)
            _, loss = model(*_inputs(batch))
            loss.backward()
            optimizer.step()
            graphs += batch.num_graphs
            steps += 1
        return graphs, steps

    return _Setup(epoch)


def _executor(dataset, model: MoleculeGNN, sizes, backend: str,
              mode: poptorch.DataLoaderMode, device_iterations: int
              ) -> _Setup:
    """PopTorch: fixed-size StreamPack loader feeding a trainingModel."""
    opts = poptorch.Options().deviceIterations(device_iterations)
    opts.Simulator.backend(backend)
    loader = pyg_ipu.FixedSizeDataLoader(
        dataset, batch_size=sizes.num_graphs, shuffle=True,
        fixed_size_options=sizes,
        fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
        exclude_keys=["smiles"], options=opts, mode=mode)
    ipu_model = poptorch.trainingModel(
        model, opts, poptorch.optim.Adam(model.parameters(), lr=1e-3))

    def epoch() -> Tuple[int, int]:
        graphs = steps = 0
        for batch in loader:
            ipu_model(*_inputs(batch))
            graphs += int(batch.graphs_mask.sum())
            steps += device_iterations
        return graphs, steps

    return _Setup(epoch, ipu_model.compilations, loader.terminate,
                  lambda graphs: device_estimate(ipu_model, graphs),
                  tiers=lambda: ipu_model._state.program.tiers)


def _rounds(setups: Dict[str, _Setup], rounds: int
            ) -> Dict[str, List[Tuple[int, int, float]]]:
    """``rounds`` rounds of one epoch per setup: ``{name: [(graphs, steps,
    seconds), ...]}``, one entry per round. The setups take turns, in
    reverse order every other round: in a fixed order each setup would
    always follow the same one (Async the Sync setup of its backend, and
    the first op after a switch of code paths runs on cold caches, 60-100
    us on a 2-core VM) and drift within a round would always favour the
    same end."""
    out: Dict[str, List[Tuple[int, int, float]]] = {n: [] for n in setups}
    names = list(setups)
    for round_ in range(rounds):
        progress(f"training: measured epoch {round_ + 1} of {rounds} "
                 f"of each of {len(setups)} setups")
        for name in (names if round_ % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            graphs, steps = setups[name].epoch()
            out[name].append((graphs, steps, time.perf_counter() - start))
    return out


def training_throughput(dataset, sizes, args) -> Dict[str, Any]:
    """Graphs/s per setup: after one warm-up epoch each (compilation, PyG's
    templates, caches), the setups take turns epoch by epoch (:func:`_rounds`)
    so that load on the machine hits them alike; the median epoch counts.
    Each round of turns also gives each setup's ratio over the PyG loop's
    epoch of the same round, and ``over_pyg_eager`` is the median of those
    paired ratios (steadier than a ratio of medians when the machine's speed
    drifts)."""
    y = torch.cat([d.y.view(-1) for d in dataset])
    setups = {"pyg_eager": _pyg_eager(
        dataset, _new_model(y, GRAPHS_PER_BATCH, args.hidden))}
    for backend in args.backends:
        for mode in (poptorch.DataLoaderMode.Sync,) if backend == "auto" \
                else (poptorch.DataLoaderMode.Sync,
                      poptorch.DataLoaderMode.Async):
            setups[f"{backend}_{mode.name.lower()}"] = _executor(
                dataset, _new_model(y, sizes.num_graphs, args.hidden), sizes,
                backend, mode, args.device_iterations)
    results: Dict[str, Dict[str, Any]] = {}
    for name, setup in setups.items():
        auto = name.startswith("auto")
        progress(f"training {name}: " + (f"first {AUTO_FIRST_EPOCHS} epochs"
                                         if auto else "warm-up epoch"))
        epochs = []
        for _ in range(AUTO_FIRST_EPOCHS if auto else 1):
            start = time.perf_counter()
            graphs, _ = setup.epoch()
            epochs.append((graphs, time.perf_counter() - start))
        results[name] = {"first_epoch_s": epochs[0][1],
                         "compilations_first_epoch": setup.compilations()}
        if auto:
            results[name]["first_epochs"] = epochs
    for name, setup in setups.items():
        if setup.tiers is not None and setup.tiers() is not None:
            tiers = setup.tiers()
            if not tiers.wait(600):
                progress(f"{name}: compiled step still building")
            results[name]["auto_steps_before_switch"] = \
                tiers.interpreted_calls
            results[name]["auto_build_s"] = tiers._build.seconds \
                if tiers._build is not None else None
    # On a machine that has never compiled, the first compilation starts
    # building inductor's precompiled headers in the background.
    if not wait_for_header_builds():
        progress("precompiled headers still building after 10 minutes")
    measured = _rounds(setups, args.epochs)
    pyg_rates = [g / t for g, _, t in measured["pyg_eager"]]
    for name, setup in setups.items():
        result = results[name]
        rates = [g / t for g, _, t in measured[name]]
        result["steps_per_epoch"] = measured[name][-1][1]
        result["graphs_per_s"] = statistics.median(rates)
        result["over_pyg_eager_per_round"] = [
            rate / pyg for rate, pyg in zip(rates, pyg_rates)]
        result["over_pyg_eager"] = statistics.median(
            result["over_pyg_eager_per_round"])
        result["compilations_measured_epochs"] = \
            setup.compilations() - result["compilations_first_epoch"]
        if "first_epochs" in result:
            graphs = sum(g for g, _ in result["first_epochs"])
            seconds = sum(t for _, t in result["first_epochs"])
            result["over_pyg_eager_first_epochs"] = \
                graphs / seconds / statistics.median(pyg_rates)
        if setup.estimate is not None:
            result["simulated_ipu"] = setup.estimate(
                statistics.mean(g / s for g, s, _ in measured[name]))
        setup.close()
    return results


# --- Executor overhead ---------------------------------------------------------

def _interleaved_medians(fns: Dict[str, Callable[[], None]], rounds: int
                         ) -> Dict[str, float]:
    """Median seconds of each of ``fns``, called in turns ``rounds`` times
    (after three warm-up turns) so that drift hits them alike."""
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for _ in range(3):
        for fn in fns.values():
            fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def executor_overhead(dataset, sizes, args) -> Dict[str, float]:
    """One training step of the interpret backend over the same step run
    eagerly, on the same fixed-size batch of up to 128 graphs; and, timed
    in the same turns, one iteration of the plain PyG loop split into its
    loading (reading 128 graphs from the dataset and PyG's ``Collater``, as
    its ``DataLoader`` does without workers) and its eager step.

    ``interpret_ceiling_over_pyg`` is the PyG iteration over the interpret
    step alone: what the interpret backend's training ratio would be if its
    own loading cost nothing. ``interpret`` runs the graph op by op with
    ATen's kernels, as the eager step does: only the ops its graph passes
    drop make its step cheaper. Fusing kernels is the ``compile``
    backend's job."""
    loader = pyg_ipu.FixedSizeDataLoader(
        dataset, batch_size=sizes.num_graphs, fixed_size_options=sizes,
        fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
        exclude_keys=["smiles"])
    batch = _inputs(next(iter(loader)))
    y = torch.cat([d.y.view(-1) for d in dataset])
    eager = _new_model(y, sizes.num_graphs, args.hidden)
    simulated = copy.deepcopy(eager)
    eager_opt = torch.optim.Adam(eager.parameters(), lr=1e-3)
    ipu_model = poptorch.trainingModel(
        simulated, optimizer=torch.optim.Adam(simulated.parameters(), lr=1e-3))
    indices = range(min(GRAPHS_PER_BATCH, len(dataset)))
    collater = Collater(dataset, exclude_keys=["smiles"])

    def pyg_loading():
        return collater([dataset[i] for i in indices])

    pyg_batch = pyg_loading()
    pyg_batch.graphs_mask = torch.ones(pyg_batch.num_graphs, dtype=torch.bool)
    pyg_inputs = _inputs(pyg_batch)
    pyg_model = _new_model(y, pyg_batch.num_graphs, args.hidden)
    pyg_opt = torch.optim.Adam(pyg_model.parameters(), lr=1e-3)

    def step(model, optimizer, inputs):
        optimizer.zero_grad()
        _, loss = model(*inputs)
        loss.backward()
        optimizer.step()

    times = _interleaved_medians({
        "interpret": lambda: ipu_model(*batch),
        "eager": lambda: step(eager, eager_opt, batch),
        "pyg_loading": pyg_loading,
        "pyg_step": lambda: step(pyg_model, pyg_opt, pyg_inputs)},
        args.overhead_rounds)
    return {"interpret_step_ms": times["interpret"] * 1e3,
            "eager_step_ms": times["eager"] * 1e3,
            "interpret_over_eager": times["interpret"] / times["eager"],
            "pyg_loading_ms": times["pyg_loading"] * 1e3,
            "pyg_step_ms": times["pyg_step"] * 1e3,
            "interpret_ceiling_over_pyg":
            (times["pyg_loading"] + times["pyg_step"]) /
            times["interpret"]}


# --- Report --------------------------------------------------------------------

def _ratios(record: Dict[str, Any]) -> Dict[str, float]:
    training = record["training"]
    ratios = {"collation_fast_path_over_pyg":
              record["collation"]["tight_over_pyg"],
              "collation_from_storage_over_pyg":
              record["collation"]["tight_from_storage_over_pyg"]}
    for name, result in training.items():
        if name != "pyg_eager":
            ratios[f"training_{name}_over_pyg_eager"] = \
                result["over_pyg_eager"]
    ratios["training_best_over_pyg_eager"] = max(
        r["over_pyg_eager"] for n, r in training.items() if n != "pyg_eager")
    for name, result in training.items():
        if "over_pyg_eager_first_epochs" in result:
            ratios[f"training_{name}_first_{AUTO_FIRST_EPOCHS}_epochs_over_"
                   "pyg_eager"] = result["over_pyg_eager_first_epochs"]
    first = record.get("first_step", {})
    if "auto" in first and "interpret" in first:
        for key in ("cold", "warm"):
            ratios[f"training_auto_first_step_over_interpret_{key}"] = \
                first["auto"][f"{key}_s"] / first["interpret"][f"{key}_s"]
    for backend in record["config"]["backends"]:
        sync, asynchronous = (training.get(f"{backend}_{mode}")
                              for mode in ("sync", "async"))
        if sync and asynchronous:
            # Per round: both over the same PyG epoch, so that cancels.
            ratios[f"training_{backend}_async_over_sync"] = \
                statistics.median(
                    a / s for a, s in zip(
                        asynchronous["over_pyg_eager_per_round"],
                        sync["over_pyg_eager_per_round"]))
    ratios["executor_overhead_interpret_over_eager"] = \
        record["overhead"]["interpret_over_eager"]
    ratios["training_interpret_ceiling_over_pyg_eager"] = \
        record["overhead"]["interpret_ceiling_over_pyg"]
    return ratios


def print_table(record: Dict[str, Any]) -> None:
    c, ratios = record["collation"], record["ratios"]
    async_in = ("a worker process" if record["config"].get(
        "async_placement") == "worker" else "this process")
    print(f"\nNCI TPSA, {record['config']['molecules']} molecules, "
          f"{GRAPHS_PER_BATCH} graphs per batch, torch "
          f"{torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"Async loading in {async_in}")
    print(f"{'measure':52}{'value':>12}{'ratio':>9}")
    print(f"{'collation, PyG Collater (graphs/s)':52}"
          f"{c['pyg_graphs_per_s']:>12.0f}{1.0:>9.2f}")
    print(f"{'collation, fixed-size fast path (graphs/s)':52}"
          f"{c['tight_graphs_per_s']:>12.0f}"
          f"{ratios['collation_fast_path_over_pyg']:>9.2f}")
    print(f"{'collation, fixed-size from storage (graphs/s)':52}"
          f"{c['tight_from_storage_graphs_per_s']:>12.0f}"
          f"{ratios['collation_from_storage_over_pyg']:>9.2f}")
    for row_label, rows in [("packing {} (node/edge slots used)",
                             record["packing"]),
                            ("long-tailed sizes, {} (slots used)",
                             record.get("packing_long_tailed", {}))]:
        for name, r in rows.items():
            print(f"{row_label.format(name):52}"
                  f"{r['node_efficiency']:>11.1%}"
                  f" {r['edge_efficiency']:>8.1%}")
            if r.get("sampler_s_per_batch"):
                sampler = r["sampler_s_per_batch"]
                rest = r["loading_s_per_batch"] - sampler
                print(f"{'  sampler / reading and collation (ms per batch)':52}"
                      f"{sampler * 1e3:>5.3f}/{rest * 1e3:<6.3f}"
                      f"{sampler / rest:>9.3f}")
    for name, r in record["training"].items():
        label = f"training {name} ({r['steps_per_epoch']} steps/epoch)"
        print(f"{label + ' (graphs/s)':52}"
              f"{r['graphs_per_s']:>12.0f}{r['over_pyg_eager']:>9.2f}")
        if "over_pyg_eager_first_epochs" in r:
            label = (f"  its first {len(r['first_epochs'])} epochs, from "
                     f"the first call (s)")
            print(f"{label:52}"
                  f"{sum(t for _, t in r['first_epochs']):>12.2f}"
                  f"{r['over_pyg_eager_first_epochs']:>9.2f}")
    for backend in record["config"]["backends"]:
        key = f"training_{backend}_async_over_sync"
        if key in ratios:
            label = f"training {backend}, Async / Sync (paired rounds)"
            print(f"{label:52}{'':>12}{ratios[key]:>9.2f}")
    o = record["overhead"]
    print(f"{'executor step, interpret / eager (ms)':52}"
          f"{o['interpret_step_ms']:>6.2f}/{o['eager_step_ms']:<5.2f}"
          f"{o['interpret_over_eager']:>9.3f}")
    print(f"{'PyG iteration (loading+step) / interpret step (ms)':52}"
          f"{o['pyg_loading_ms']:>5.2f}+{o['pyg_step_ms']:<6.2f}"
          f"{o['interpret_ceiling_over_pyg']:>9.3f}")
    for backend, r in record["first_step"].items():
        label = f"first step, {backend} (s, cold/new model/warm, " \
            f"{len(r['cold_samples_s'])} runs)"
        print(f"{label:52}{r['cold_s']:>6.1f}/{r['new_model_s']:.1f}/"
              f"{r['warm_s']:.1f}")
    for key in ("cold", "warm"):
        name = f"training_auto_first_step_over_interpret_{key}"
        if name in ratios:
            print(f"{f'first step, auto / interpret ({key})':52}"
                  f"{'':>12}{ratios[name]:>9.2f}")
    for name, count in record["compilations"].items():
        print(f"{'compilations, ' + name:52}{count:>12}")
    print(f"simulated IPU: {record['simulated_ipu']['summary']}")
    if "sampling" in record:
        bench_sampling.print_rows(record["sampling"])


_START = time.perf_counter()


def progress(stage: str) -> None:
    """One line on stderr per stage of the run, with the time so far (the
    full run takes minutes)."""
    print(f"[benchmark {time.perf_counter() - _START:6.0f} s] {stage} ...",
          file=sys.stderr, flush=True)


_WORDS = {"pyg": "PyG", "eager": "eager loop", "sync": "Sync",
          "async": "Async", "over": "/", "interpret": "interpret",
          "compile": "compile", "auto": "auto"}


def ratio_label(key: str) -> str:
    """``training_compile_sync_over_pyg_eager`` -> ``Training, compile
    Sync / PyG eager loop``: readable words for a chart."""
    head, _, rest = key.partition("_")
    words = [_WORDS.get(word, word) for word in rest.split("_")]
    return f"{head.capitalize()}, {' '.join(words)}"


def plot(record: Dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ratios = record["ratios"]
    names = list(ratios)
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(names) + 1.5))
    bars = ax.barh([ratio_label(n) for n in names],
                   [ratios[n] for n in names], color="#4c72b0")
    ax.bar_label(bars, fmt="%.2f", padding=3)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.margins(x=0.15)
    ax.set_xlabel("ratio (higher is better, except executor overhead)")
    ax.set_title("poptorch-sim benchmark (ratios in one run)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with atomic_write(path) as file:
        fig.savefig(file, format="png", dpi=120)
    plt.close(fig)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smaller run that finishes in under a minute")
    parser.add_argument("--epochs", type=positive_int, default=9,
                        help="measured training epochs per setup (rounds "
                             "of paired ratios: on a busy 2-core machine "
                             "single rounds ranged 1.36-1.82x for one "
                             "setup, so a median needs several)")
    parser.add_argument("--limit", type=int_at_least(GRAPHS_PER_BATCH),
                        default=None,
                        help="use only the first N molecules (at least "
                             f"{GRAPHS_PER_BATCH}, one batch)")
    parser.add_argument("--hidden", type=positive_int, default=64)
    parser.add_argument("--device-iterations", type=positive_int, default=1)
    parser.add_argument("--backends", nargs="+", default=None,
                        choices=("interpret", "compile", "auto"))
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="collation passes (median)")
    parser.add_argument("--overhead-rounds", type=positive_int, default=60)
    parser.add_argument("--first-step-samples", type=positive_int, default=3,
                        help="cold, new-model and warm first-step runs "
                             "per backend "
                             "(fresh processes; the record keeps their "
                             "medians and every sample)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch intra-op threads for the training "
                             "measurements (default: torch's choice)")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--long-tailed-graphs", type=positive_int,
                        default=4000,
                        help="graphs of the synthetic long-tailed packing "
                             "rows")
    parser.add_argument("--out", default="bench_out/benchmark.json")
    parser.add_argument("--plot", default=None, metavar="PATH.png",
                        help="also write a PNG chart of the ratios to this "
                             "path")
    bench_sampling.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.limit = args.limit or 2000
        args.epochs, args.repeats, args.overhead_rounds = 1, 3, 30
        args.first_step_samples = 1
        args.long_tailed_graphs = min(args.long_tailed_graphs, 1000)
    if args.backends is None:
        args.backends = ["interpret", "compile", "auto"]
    return args


def run(args: argparse.Namespace) -> Dict[str, Any]:
    dataset = NCITPSA(root=args.data_root)
    if args.limit:
        dataset = dataset[:args.limit]
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # collation runs single-threaded in workers
    progress(f"collation ({args.repeats} passes)")
    collation = collation_throughput(dataset, args.repeats)
    torch.set_num_threads(threads)
    progress("packing efficiency per lookahead window")
    packing = slot_efficiency(dataset)
    packing_long_tailed = slot_efficiency(
        long_tailed_graphs(args.long_tailed_graphs))
    sizes = pyg_ipu.FixedSizeOptions.for_batch_size(dataset, GRAPHS_PER_BATCH)
    record: Dict[str, Any] = {
        "config": {"molecules": len(dataset), "epochs": args.epochs,
                   "hidden": args.hidden, "backends": args.backends,
                   "device_iterations": args.device_iterations,
                   "graphs_per_batch": GRAPHS_PER_BATCH, "threads": threads,
                   # Where the Async setups start loading: a worker process,
                   # or this process when no CPU is free for one (until
                   # loading takes 30% of two epochs in a row).
                   "async_placement": async_placement(),
                   "fixed_sizes": {"num_graphs": sizes.num_graphs,
                                   "num_nodes": sizes.num_nodes,
                                   "num_edges": sizes.num_edges},
                   "torch": torch.__version__, "quick": args.quick},
        "collation": collation,
        "packing": packing,
        "packing_long_tailed": packing_long_tailed,
        "training": training_throughput(dataset, sizes, args),
    }
    progress(f"executor overhead ({args.overhead_rounds} rounds)")
    record["overhead"] = executor_overhead(dataset, sizes, args)
    progress(f"first step per backend, cold, new model and warm "
             f"({args.first_step_samples} triple(s) of fresh processes)")
    record["first_step"] = first_step_seconds(
        args.backends, args.data_root, args.first_step_samples)
    record["compilations"] = {
        f"{name} ({key.split('_', 1)[1].replace('_', ' ')})": result[key]
        for name, result in record["training"].items()
        if name.startswith("compile")
        for key in ("compilations_first_epoch",
                    "compilations_measured_epochs")}
    record["ratios"] = _ratios(record)
    record["simulated_ipu"] = next(
        result["simulated_ipu"] for result in record["training"].values()
        if "simulated_ipu" in result)
    if not args.no_sampling:
        progress("sampling loaders on the large synthetic graph")
        record["sampling"] = bench_sampling.sampling_benchmark(args)
        record["ratios"].update(record["sampling"]["ratios"])
    return record


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    record = run(args)
    print_table(record)
    if args.out:
        write_json(args.out, record)
        print(f"\nJSON record: {args.out}")
    if args.plot:
        plot(record, args.plot)
        print(f"chart: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
