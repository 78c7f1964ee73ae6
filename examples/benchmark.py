"""The GNN benchmark: the simulated IPU stack against plain PyG, in one run.

Every figure is measured in this one process; the sections other than
training use the embedded NCI TPSA molecules and the NCI model
(``molecule_model.MoleculeGNN``), and run when ``--models`` includes
``nci_gine``:

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
* training throughput of five models (``_bench_models.py``: the NCI GINE
  model, GCN and GAT full-batch on Cora, GraphSAGE with the neighbour
  loader on a 1M-node power-law graph, and a point-cloud model that builds
  its radius graph in ``forward``), each trained by a plain PyG loop, by
  the same loop with the model under ``torch.compile(dynamic=True)`` and
  under ``torch.compile()`` (automatic dynamic shapes: the peers a PyG user
  tries for speed), and by ``poptorch.trainingModel`` with fixed-size
  loaders, per backend (``interpret``, ``compile``, ``auto``; the NCI model
  with ``DataLoaderMode.Sync`` and ``Async``). The ``auto`` setups build
  their compiled step during their warm-up epoch, which the measured rounds
  wait for: they measure its steady state, and the switch is one of their
  first measured epoch's compilations. The setups take turns epoch by
  epoch (``_bench_training.py``); each gets its rate, its paired ratios
  over the PyG eager loop and over the best PyG-compiled setup, its first
  epoch's time and its compilations (and graph breaks, for the peers).
  On the NCI model both sides take the same number of optimizer steps per
  epoch: the packing budgets come from ``FixedSizeOptions.for_batch_size``
  (batches of 128 graphs on average, like PyG's ``batch_size=128``), and
  each backend's ``Async`` over ``Sync`` is the median of the two setups'
  ratios in each round;
* executor overhead: a training step of the ``interpret`` backend over the
  same step run eagerly on the same fixed-size batch; and the interpret
  backend's ceiling: a plain PyG iteration (reading and collating 128
  graphs, then the eager step) over the interpret step alone, the ratio
  ``interpret`` would reach if its loading cost nothing;
* first step: seconds from a training model's first call to its first
  result per backend, on a new machine (nothing cached), for a new model
  (an empty inductor cache, the machine's precompiled headers) and with a
  warm inductor cache (``bench_first_step.py``: medians of
  ``--first-step-samples`` triples of fresh processes, every sample kept),
  and ``auto``'s over ``interpret``'s;
* the simulated IPU's estimate for the trained model (``simulationReport``):
  memory of the fullest IPU and roofline graphs/s on a Mk2 IPU;
* sampling loaders (``bench_sampling.py``): seed nodes/s of the neighbour
  loaders at fanout [15, 10] and subgraphs/s of the cluster loaders on a
  1M-node power-law graph (100k with ``--quick``), their peak memory and
  padding efficiency; ``--no-sampling`` skips them.

``--markdown`` writes every figure of the run to ``docs/benchmarks.md``
(``_bench_report.py``).

Usage::

    python examples/benchmark.py --quick                 # NCI only, minutes
    python examples/benchmark.py --markdown              # the full run
    python examples/benchmark.py --models cora_gcn point_cloud --no-sampling
"""
import argparse
import copy
import json
import os
import shlex
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import torch
from torch_geometric.loader.dataloader import Collater

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_core._executor.background_compile import wait_for_builds
from poptorch_core._executor.backends.inductor.precompiled_headers import \
    wait_for_header_builds

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_sampling  # noqa: E402
from _bench_models import (GRAPHS_PER_BATCH, MODELS, all_setups,  # noqa
                           nci_dataset, nci_inputs, nci_model)
from _bench_report import machine, markdown, print_training  # noqa: E402
from _bench_training import best_pyg_compiled, measure, \
    model_ratios  # noqa: E402
from _example_common import atomic_write, write_json  # noqa: E402
from bench_first_step import first_step_seconds  # noqa: E402
from bench_collation import (collation_throughput,  # noqa: E402
                             long_tailed_graphs, slot_efficiency)
from _example_common import int_at_least, positive_int  # noqa: E402

#: The simulator backends the benchmark can run: each one named in
#: ``--backends`` adds its rows to every model.
BACKENDS = ("interpret", "compile", "auto")
#: Keys of every JSON record; ``NCI_KEYS`` too when ``nci_gine`` runs.
RECORD_KEYS = ("config", "training", "ratios")
NCI_KEYS = ("collation", "packing", "packing_long_tailed", "overhead",
            "first_step", "simulated_ipu")
#: Where ``--markdown`` writes the page by default.
MARKDOWN = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "docs", "benchmarks.md")


# --- Training throughput -----------------------------------------------------

def training(args: argparse.Namespace) -> Dict[str, Dict[str, Any]]:
    """Each model's section: its title, unit, configuration and rounds,
    every setup's record (``_bench_training.measure``) and the name of the
    best PyG-compiled setup."""
    sections = {}
    for name in args.models:
        progress(f"{name}: data and setups")
        bench = MODELS[name](args)
        setups = all_setups(bench, args.backends, args.pyg_compile_backend)
        results = measure(
            setups, args.epochs,
            progress=lambda stage, name=name: progress(f"{name}: {stage}"),
            # On a machine that has never compiled, the first compilation
            # starts building inductor's precompiled headers in the
            # background; and the auto setups' builds, started by their
            # warm-up epochs, must not share the cores with the measured
            # rounds (they switch at their first measured call).
            after_warm_up=_wait_for_builds)
        sections[name] = {"title": bench.title, "unit": bench.unit,
                          "config": bench.config, "rounds": args.epochs,
                          "best_pyg_compiled": best_pyg_compiled(results),
                          "setups": results}
    return sections


def _wait_for_builds() -> None:
    _wait_for_headers()
    if not wait_for_builds(600):
        progress("auto's compiled step still building after 10 minutes")


def _wait_for_headers() -> None:
    if not wait_for_header_builds():
        progress("precompiled headers still building after 10 minutes")


# --- Executor overhead -------------------------------------------------------

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
    batch = nci_inputs(next(iter(loader)))
    eager = nci_model(dataset, sizes.num_graphs, args.hidden)
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
    pyg_inputs = nci_inputs(pyg_batch)
    pyg_model = nci_model(dataset, pyg_batch.num_graphs, args.hidden)
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


# --- Report ------------------------------------------------------------------

def _ratios(record: Dict[str, Any]) -> Dict[str, float]:
    ratios: Dict[str, float] = {}
    if "collation" in record:
        ratios["collation_fast_path_over_pyg"] = \
            record["collation"]["tight_over_pyg"]
        ratios["collation_from_storage_over_pyg"] = \
            record["collation"]["tight_from_storage_over_pyg"]
    for model, section in record["training"].items():
        ratios.update(model_ratios(model, section))
        setups = section["setups"]
        for backend in record["config"]["backends"]:
            sync, asynchronous = (setups.get(f"{backend}_{mode}")
                                  for mode in ("sync", "async"))
            if sync and asynchronous:
                # Per round: both over the same PyG epoch, so that cancels.
                ratios[f"training_{model}_{backend}_async_over_sync"] = \
                    statistics.median(
                        a / s for a, s in zip(
                            asynchronous["over_pyg_eager_per_round"],
                            sync["over_pyg_eager_per_round"]))
    first = record.get("first_step", {})
    if "auto" in first and "interpret" in first:
        # The goal of auto: the first step costs what interpret's costs.
        for key in ("cold", "new_model", "warm"):
            ratios[f"training_auto_first_step_over_interpret_{key}"] = \
                first["auto"][f"{key}_s"] / first["interpret"][f"{key}_s"]
    if "overhead" in record:
        ratios["executor_overhead_interpret_over_eager"] = \
            record["overhead"]["interpret_over_eager"]
        ratios["training_interpret_ceiling_over_pyg_eager"] = \
            record["overhead"]["interpret_ceiling_over_pyg"]
    return ratios


def print_table(record: Dict[str, Any]) -> None:
    ratios = record["ratios"]
    print(f"\ntorch {torch.__version__}, {record['config']['threads']} "
          f"thread(s)")
    if "collation" in record:
        _print_nci(record)
    print_training(record)
    for key, value in ratios.items():
        if key.endswith("_async_over_sync"):
            label = key[len("training_"):-len("_async_over_sync")]
            print(f"{label + ': Async / Sync (paired rounds)':52}"
                  f"{'':>12}{value:>8.2f}")
    if "sampling" in record:
        bench_sampling.print_rows(record["sampling"])


def _print_nci(record: Dict[str, Any]) -> None:
    c, ratios = record["collation"], record["ratios"]
    print(f"NCI TPSA, {record['training']['nci_gine']['config']['molecules']}"
          f" molecules, {GRAPHS_PER_BATCH} graphs per batch")
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
    print(f"simulated IPU: {record['simulated_ipu']['summary']}")


_START = time.perf_counter()


def progress(stage: str) -> None:
    """One line on stderr per stage of the run, with the time so far (the
    full run takes minutes)."""
    print(f"[benchmark {time.perf_counter() - _START:6.0f} s] {stage} ...",
          file=sys.stderr, flush=True)


_WORDS = {"pyg": "PyG", "eager": "eager loop", "sync": "Sync",
          "async": "Async", "over": "/", "interpret": "interpret",
          "compile": "compile", "nci": "NCI", "gine": "GINE", "gcn": "GCN",
          "gat": "GAT", "sage": "GraphSAGE", "cora": "Cora"}


def ratio_label(key: str) -> str:
    """``training_nci_gine_compile_sync_over_pyg_eager`` -> ``Training,
    NCI GINE compile Sync / PyG eager loop``: readable words for a chart."""
    head, _, rest = key.partition("_")
    words = [_WORDS.get(word, word) for word in rest.split("_")]
    return f"{head.capitalize()}, {' '.join(words)}"


def plot(record: Dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ratios = record["ratios"]
    names = list(ratios)
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(names) + 1.5))
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
                        help="the NCI model only, on 2,000 molecules, one "
                             "measured epoch")
    parser.add_argument("--models", nargs="+", choices=tuple(MODELS),
                        default=None,
                        help="the models of the training rows (default: "
                             "all; nci_gine with --quick); the NCI-only "
                             "sections run with nci_gine")
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
                        choices=BACKENDS)
    parser.add_argument("--pyg-compile-backend", default="inductor",
                        help="torch.compile backend of the PyG-compiled "
                             "rows (eager and aot_eager compile no code: "
                             "quick runs of the benchmark itself)")
    parser.add_argument("--full-batch-steps", type=positive_int, default=10,
                        help="full-batch training epochs per measured "
                             "epoch of the Cora models")
    parser.add_argument("--sage-nodes", type=int_at_least(1000),
                        default=1_000_000,
                        help="nodes of the GraphSAGE model's power-law "
                             "graph (10 edges per node)")
    parser.add_argument("--sage-batch-size", type=positive_int, default=1024,
                        help="seed nodes per GraphSAGE batch")
    parser.add_argument("--sage-steps", type=positive_int, default=8,
                        help="GraphSAGE batches per measured epoch")
    parser.add_argument("--point-cloud-molecules", type=int_at_least(32),
                        default=500,
                        help="molecules embedded in 3-D for the point-cloud "
                             "model")
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
    parser.add_argument("--markdown", nargs="?", const=MARKDOWN,
                        default=None, metavar="PATH.md",
                        help="also write every figure to this page "
                             "(default docs/benchmarks.md)")
    parser.add_argument("--from-record", default=None, metavar="PATH.json",
                        help="measure nothing: print the table and write "
                             "--plot and --markdown from this JSON record "
                             "of an earlier run")
    bench_sampling.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.limit = args.limit or 2000
        args.epochs, args.repeats, args.overhead_rounds = 1, 3, 30
        args.first_step_samples = 1
        args.long_tailed_graphs = min(args.long_tailed_graphs, 1000)
    if args.models is None:
        args.models = ["nci_gine"] if args.quick else list(MODELS)
    if args.backends is None:
        args.backends = list(BACKENDS)
    return args


def _nci_sections(args: argparse.Namespace) -> Dict[str, Any]:
    dataset = nci_dataset(args)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # collation runs single-threaded in workers
    progress(f"collation ({args.repeats} passes)")
    collation = collation_throughput(dataset, args.repeats)
    torch.set_num_threads(threads)
    progress("packing efficiency per lookahead window")
    return {"collation": collation,
            "packing": slot_efficiency(dataset),
            "packing_long_tailed": slot_efficiency(
                long_tailed_graphs(args.long_tailed_graphs))}


def run(args: argparse.Namespace,
        command: Optional[str] = None) -> Dict[str, Any]:
    if args.threads:
        torch.set_num_threads(args.threads)
    record: Dict[str, Any] = {"config": {
        "command": command, "models": args.models, "epochs": args.epochs,
        "backends": args.backends,
        "pyg_compile_backend": args.pyg_compile_backend,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "quick": args.quick, "machine": machine()}}
    nci = "nci_gine" in args.models
    if nci:
        record.update(_nci_sections(args))
    record["training"] = training(args)
    if nci:
        progress(f"executor overhead ({args.overhead_rounds} rounds)")
        dataset = nci_dataset(args)
        sizes = pyg_ipu.FixedSizeOptions.for_batch_size(dataset,
                                                        GRAPHS_PER_BATCH)
        record["overhead"] = executor_overhead(dataset, sizes, args)
        progress(f"first step per backend, cold, new model and warm "
                 f"({args.first_step_samples} triple(s) of fresh processes)")
        record["first_step"] = first_step_seconds(
            args.backends, args.data_root, args.first_step_samples)
        record["simulated_ipu"] = next(
            result["simulated_ipu"]
            for result in record["training"]["nci_gine"]["setups"].values()
            if "simulated_ipu" in result)
    record["ratios"] = _ratios(record)
    if not args.no_sampling:
        progress("sampling loaders on the large synthetic graph")
        record["sampling"] = bench_sampling.sampling_benchmark(args)
        record["ratios"].update(record["sampling"]["ratios"])
    return record


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.from_record:
        # The outputs of a run already made: its figures, its command.
        with open(args.from_record, encoding="utf-8") as file:
            record = json.load(file)
        args.out = None
    else:
        record = run(args, " ".join(["python examples/benchmark.py",
                                     shlex.join(argv)]).strip())
    print_table(record)
    if args.out:
        write_json(args.out, record)
        print(f"\nJSON record: {args.out}")
    if args.plot:
        plot(record, args.plot)
        print(f"chart: {args.plot}")
    if args.markdown:
        os.makedirs(os.path.dirname(args.markdown) or ".", exist_ok=True)
        with atomic_write(args.markdown, "w", encoding="utf-8") as file:
            file.write(markdown(record))
        print(f"page: {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
