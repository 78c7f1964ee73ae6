"""Benchmark of fixed-size collation and packing on the NCI TPSA molecules.

Two figures, both ratios or fractions measured in one run:

* collation throughput: graphs/s of ``FixedSizeCollater`` (the vectorised
  fast path, padding and masks included) over PyG's ``Collater`` on the
  same batches of 128 consecutive molecules, given lists of graph objects
  and, as ``FixedSizeDataLoader`` gives them, lists that know their rows in
  the dataset's storage (read with one ``index_select`` per attribute);
* slot efficiency: real nodes, edges and graphs over the slots of one
  shuffled epoch of fixed-size batches at 128 graph slots per batch, for
  StreamPack with ``FixedSizeOptions.for_packing`` budgets at several
  lookahead windows (0 is PopTorch's greedy packing; each row also gives
  the sampler's time per batch and a whole loading epoch's, timed in
  turns) and for PadToMax with
  ``FixedSizeOptions.from_dataset`` budgets; the same rows for a synthetic
  long-tailed size distribution (:func:`long_tailed_graphs`), where
  packing is harder than on molecules.

Usage::

    python examples/bench_collation.py [--root datasets] [--repeats 7]
        [--threads 1] [--out bench_out/collation.json]

Collation runs with one torch thread by default, as it does in DataLoader
workers (torch sets one thread there).
"""
import argparse
import math
import statistics
import time
from typing import Callable, Dict, List, Sequence, Tuple

import torch
from torch_geometric.data import Data
from torch_geometric.loader.dataloader import Collater

from poptorch_geometric import (FixedSizeCollater, FixedSizeOptions,
                                FixedSizeStrategy, batching_efficiency)
from poptorch_geometric._fastpath.graph_cache import CachedGraphs
from poptorch_geometric.datasets import NCITPSA
from poptorch_geometric.pyg_dataloader import FixedSizeDataLoader

from _example_common import write_json

GRAPHS_PER_BATCH = 128


def _time_all(collate: Callable, batches: Sequence[List]) -> float:
    start = time.perf_counter()
    for batch in batches:
        collate(batch)
    return time.perf_counter() - start


def collation_throughput(dataset, repeats: int) -> Dict[str, float]:
    """Graphs/s of both collaters over all full 128-graph batches; the
    passes alternate so that load on the machine hits both alike."""
    graphs = list(dataset)
    starts = range(0, len(graphs) - GRAPHS_PER_BATCH + 1, GRAPHS_PER_BATCH)
    batches = [graphs[i:i + GRAPHS_PER_BATCH] for i in starts]
    # What FixedSizeDataLoader hands its collater: the same graphs, tagged
    # with their storage rows.
    cached = CachedGraphs(dataset)
    storage_batches = [cached.__getitems__(range(i, i + GRAPHS_PER_BATCH))
                       for i in starts]
    pyg = Collater(dataset=None)
    # Tight budgets: the largest batch plus one padding graph, node and edge.
    tight = FixedSizeOptions(
        num_nodes=max(sum(g.num_nodes for g in b) for b in batches) + 1,
        num_edges=max(sum(g.num_edges for g in b) for b in batches) + 1,
        num_graphs=GRAPHS_PER_BATCH + 1)
    worst = FixedSizeOptions.from_dataset(dataset, GRAPHS_PER_BATCH + 1)
    ours = {
        "tight": FixedSizeCollater(tight, add_masks_to_batch=True),
        "worst_case": FixedSizeCollater(worst, add_masks_to_batch=True),
        "tight_reference_path": FixedSizeCollater(
            tight, add_masks_to_batch=True, fast_path=False),
    }
    inputs = {name: batches for name in ours}
    ours["tight_from_storage"] = ours["tight"]
    inputs["tight_from_storage"] = storage_batches
    times: Dict[str, List[float]] = {"pyg": [], **{k: [] for k in ours}}
    _time_all(pyg, batches[:2])  # warm-up
    for name, collate in ours.items():
        _time_all(collate, inputs[name][:2])
    for _ in range(repeats):
        times["pyg"].append(_time_all(pyg, batches))
        for name, collate in ours.items():
            times[name].append(_time_all(collate, inputs[name]))
    num_graphs = len(batches) * GRAPHS_PER_BATCH
    result = {"batches": len(batches),
              "tight_num_nodes": tight.num_nodes,
              "tight_num_edges": tight.num_edges,
              "worst_case_num_nodes": worst.num_nodes,
              "worst_case_num_edges": worst.num_edges}
    pyg_time = statistics.median(times["pyg"])
    result["pyg_graphs_per_s"] = num_graphs / pyg_time
    for name in ours:
        median = statistics.median(times[name])
        result[f"{name}_graphs_per_s"] = num_graphs / median
        result[f"{name}_over_pyg"] = pyg_time / median
    return result


#: Lookahead windows of the StreamPack rows (0: PopTorch's greedy packing).
WINDOWS = (0, 64, 256, 1024)


def long_tailed_graphs(count: int = 4000, seed: int = 0) -> List[Data]:
    """``count`` random graphs whose node counts follow a log-normal law
    (median 20, a few hundred at most: sigma 0.9) with 1.5-3 edges per
    node, a long tail that greedy packing fills worse than molecules."""
    generator = torch.Generator().manual_seed(seed)
    normal = torch.randn(count, generator=generator)
    nodes = (math.log(20) + 0.9 * normal).exp().long().clamp(2, 2000)
    edges_per_node = 1.5 + 1.5 * torch.rand(count, generator=generator)
    return [Data(x=torch.zeros(int(n), 1),
                 edge_index=torch.randint(0, int(n), (2, int(n * r)),
                                          generator=generator))
            for n, r in zip(nodes, edges_per_node)]


def _sampler_and_loading_seconds(loader, repeats: int = 15
                                 ) -> Tuple[float, float]:
    """Median seconds per batch of the loader's packing sampler alone and of
    a whole loading epoch (sampling, reading and collation), timed in turns
    so that the machine's drift hits both alike (sizes are read from the
    dataset once, before timing). An epoch of sampling takes about a
    millisecond, so one hiccup of a busy machine moves a median of a few
    epochs: 15 keep it steady at little cost."""
    sampler = loader.batch_sampler
    batches = len(list(sampler))
    sampling, loading = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in sampler:
            pass
        sampling.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in loader:
            pass
        loading.append(time.perf_counter() - start)
    return (statistics.median(sampling) / batches,
            statistics.median(loading) / batches)


def slot_efficiency(dataset) -> Dict[str, Dict[str, float]]:
    """One shuffled epoch (seeded, as training loads) of StreamPack at each
    lookahead window of :data:`WINDOWS` (``FixedSizeOptions.for_packing``
    budgets for that window) and of PadToMax (worst-case budgets), at 128
    graph slots per batch; StreamPack rows also time the sampler and the
    whole loader."""
    setups = {"pad_to_max": (FixedSizeOptions.from_dataset(
        dataset, GRAPHS_PER_BATCH), FixedSizeStrategy.PadToMax)}
    for window in WINDOWS:
        name = "stream_pack" + (f"_w{window}" if window else "_greedy")
        setups[name] = (FixedSizeOptions.for_packing(
            dataset, GRAPHS_PER_BATCH, lookahead=window),
            FixedSizeStrategy.StreamPack)
    out = {}
    for name, (opts, strategy) in setups.items():
        loader = FixedSizeDataLoader(
            dataset, batch_size=GRAPHS_PER_BATCH, fixed_size_options=opts,
            fixed_size_strategy=strategy, shuffle=True,
            generator=torch.Generator().manual_seed(0))
        report = batching_efficiency(loader)
        out[name] = {
            "num_nodes": opts.num_nodes, "num_edges": opts.num_edges,
            "num_graphs": opts.num_graphs, "batches": report.num_batches,
            "lookahead": opts.packing_lookahead,
            "node_efficiency": report.node_efficiency,
            "edge_efficiency": report.edge_efficiency,
            "graph_efficiency": report.graph_efficiency,
            "real_graphs": report.real_graphs,
            "skipped_graphs": report.skipped_graphs,
            "trimmed_graphs": report.trimmed.graphs,
        }
        if strategy == FixedSizeStrategy.StreamPack:
            (out[name]["sampler_s_per_batch"],
             out[name]["loading_s_per_batch"]) = \
                _sampler_and_loading_seconds(loader)
    return out


def _print_table(record: Dict) -> None:
    c = record["collation"]
    print(f"NCI TPSA: {record['dataset_size']} molecules, "
          f"{c['batches']} batches of {GRAPHS_PER_BATCH}, "
          f"{record['threads']} torch thread(s)")
    print(f"{'collation':28}{'graphs/s':>12}{'/ PyG':>8}")
    print(f"{'PyG Collater':28}{c['pyg_graphs_per_s']:>12.0f}{1.0:>8.2f}")
    for name, label in [("tight", "fixed-size, fast path"),
                        ("tight_from_storage", "fixed-size, from storage"),
                        ("worst_case", "fixed-size, worst-case size"),
                        ("tight_reference_path", "fixed-size, reference")]:
        print(f"{label:28}{c[name + '_graphs_per_s']:>12.0f}"
              f"{c[name + '_over_pyg']:>8.2f}")
    print(f"\n{'slot efficiency':20}{'nodes':>8}{'edges':>8}{'graphs':>8}"
          f"{'batches':>9}{'skipped':>9}{'sampler ms':>12}"
          "  budgets (nodes/edges/graphs)")
    for name, r in record["efficiency"].items():
        sampler = r.get("sampler_s_per_batch")
        sampler = f"{sampler * 1e3:>12.3f}" if sampler else f"{'':>12}"
        print(f"{name:20}{r['node_efficiency']:>8.1%}"
              f"{r['edge_efficiency']:>8.1%}{r['graph_efficiency']:>8.1%}"
              f"{r['batches']:>9}{r['skipped_graphs']:>9}{sampler}  "
              f"{r['num_nodes']}/{r['num_edges']}/{r['num_graphs']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=None,
                        help="data root (default: $POPTORCH_SIM_DATA_ROOT "
                        "or datasets/)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="bench_out/collation.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dataset = NCITPSA(root=args.root)
    record = {
        "dataset_size": len(dataset),
        "threads": args.threads,
        "collation": collation_throughput(dataset, args.repeats),
        "efficiency": slot_efficiency(dataset),
    }
    _print_table(record)
    write_json(args.out, record)
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
