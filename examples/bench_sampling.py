"""Benchmark of the sampling loaders on a large power-law graph.

On ``poptorch_geometric.datasets.power_law_graph`` (1M nodes and 10M edges
by default; 100k and 1M with ``--quick``):

* neighbour loader: sampled seed nodes/s at fanout [15, 10] and 1024 seeds
  per batch, for PyG's ``NeighborLoader`` on ``TorchNeighborSampler``
  (unpadded) and for ``PyGFixedSizeNeighborLoader`` (padded to the largest
  of 50 sampled batches plus one), in the main process (one torch thread)
  and with 2 loader workers (2 cores);
* cluster loader: subgraphs/s of PyG's ``ClusterLoader`` and of
  ``FixedSizeClusterLoader`` over METIS clusters (``ClusterData`` on
  pymetis, 10 clusters per batch), and the partitioning time (the partition
  is cached on disk under the data root, so later runs skip it);
* for every loader run: items per wall-clock second and per CPU second
  (the run's process plus its workers, whose start-up and prefetching
  count too: a machine shared with other work slows the first, hardly the
  second), the peak resident memory of the process running it and its
  resident memory after a fifth and after all of the batches (equal when
  memory does not grow with the number of batches), and for the padded
  loaders the padding efficiency (real nodes and edges over slots) and the
  number of batches that had to be trimmed.

Each loader runs in a forked process of its own, so that its peak memory is
its own. Padded over unpadded throughput is a ratio of one run; absolute
rates depend on the machine and its load.

Usage::

    python examples/bench_sampling.py --quick          # about a minute
    python examples/bench_sampling.py --out bench_out/sampling.json
"""
import argparse
import gc
import multiprocessing
import os
import resource
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional

import torch
from torch_geometric.loader import ClusterLoader, NeighborLoader

import poptorch_geometric as pyg_ipu
from poptorch_geometric.datasets import default_root, power_law_graph

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _example_common import positive_int, write_json  # noqa: E402

#: Keys of the record's ``sampling`` section.
RECORD_KEYS = ("config", "graph", "neighbor", "cluster", "ratios")


def add_arguments(parser: Any) -> None:
    """The flags of this benchmark (also used by ``benchmark.py``)."""
    group = parser.add_argument_group("sampling loaders")
    group.add_argument("--sampling-nodes", type=positive_int, default=None,
                       help="nodes of the power-law graph (default 1M, "
                            "100k with --quick)")
    group.add_argument("--sampling-edges-per-node", type=positive_int,
                       default=10)
    group.add_argument("--sampling-batches", type=positive_int, default=None,
                       help="measured batches per loader (default 100, 30 "
                            "with --quick)")
    group.add_argument("--sampling-batch-size", type=positive_int,
                       default=1024,
                       help="seed nodes per neighbour batch")
    group.add_argument("--sampling-workers", type=positive_int, default=2,
                       help="loader workers of the multi-process runs")
    group.add_argument("--cluster-nodes", type=positive_int, default=1000,
                       help="average nodes per METIS cluster")
    group.add_argument("--clusters-per-batch", type=positive_int, default=10)
    group.add_argument("--no-sampling", action="store_true",
                       help="skip the sampling loader benchmark")


def resolve_defaults(args: argparse.Namespace) -> None:
    """Fills the scale defaults that depend on ``--quick``."""
    if args.sampling_nodes is None:
        args.sampling_nodes = 100_000 if args.quick else 1_000_000
    if args.sampling_batches is None:
        args.sampling_batches = 30 if args.quick else 100


# --- Memory -----------------------------------------------------------------

def rss_mb() -> float:
    """This process's resident memory now (Linux; else its peak)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except OSError:
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak resident memory."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2 ** 20 if sys.platform == "darwin" else peak / 2 ** 10


# --- One loader run, in a forked process ------------------------------------

def _measure(make_loader: Callable[[], Iterable], batches: int,
             count: Callable[[Any], int],
             padded: bool) -> Dict[str, Any]:
    """Times ``batches`` batches after two warm-up ones (wall clock and CPU
    time); tracks resident memory and, for padded batches, slot use."""
    torch.set_num_threads(1)  # as in loader workers
    start_rss = rss_mb()
    loader = make_loader()
    iterator = _epochs(loader)
    for _ in range(2):
        next(iterator)
    items, real_nodes, real_edges, checkpoints = 0, 0, 0, {}
    start, cpu_start = time.perf_counter(), time.process_time()
    for i in range(1, batches + 1):
        batch = next(iterator)
        items += count(batch)
        if padded:
            real_nodes += int(batch.nodes_mask.sum())
            real_edges += int(batch.edges_mask.sum())
        if i in (max(batches // 5, 1), batches):
            checkpoints[i] = rss_mb()
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start + _worker_cpu_seconds(
        iterator)
    result = {"per_s": items / seconds, "per_cpu_s": items / cpu_seconds,
              "batches": batches, "seconds": seconds,
              "cpu_seconds": cpu_seconds, "start_rss_mb": start_rss,
              # getrusage may lag the page counts of /proc by a page.
              "peak_rss_mb": max(peak_rss_mb(), *checkpoints.values()),
              "rss_after_fifth_mb": checkpoints[max(batches // 5, 1)],
              "rss_after_all_mb": checkpoints[batches]}
    if padded:
        opts = loader.fixed_size_options
        result["node_efficiency"] = real_nodes / (batches * opts.num_nodes)
        result["edge_efficiency"] = real_edges / (batches * opts.num_edges)
        result["trimmed_batches"] = loader.fixed_size_collater.trimmed.graphs
    return result


def _worker_cpu_seconds(iterator: Any) -> float:
    """CPU time of the loader's worker processes, whole lives (start-up and
    prefetching included), once they are shut down and reaped."""
    iterator.close()
    gc.collect()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _epochs(loader: Iterable) -> Iterable:
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


def _in_child(target: Callable[..., Dict[str, Any]],
              *args: Any) -> Dict[str, Any]:
    """Runs ``target(*args)`` in a forked process and returns its result.
    (Not a Pool: a pool's processes may not start loader workers.)"""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)

    def child() -> None:
        try:
            sender.send(("ok", target(*args)))
        except BaseException as error:  # reported by the parent
            sender.send(("error", repr(error)))

    process = context.Process(target=child)
    process.start()
    status, result = receiver.recv()
    process.join()
    if status != "ok":
        raise RuntimeError(f"benchmark process failed: {result}")
    return result


# Set before forking: forked processes inherit the module's globals, so the
# graph and loader factories need no pickling.
_SETUPS: Dict[str, Callable[[], Iterable]] = {}


def _run_setup(name: str, batches: int, padded: bool,
               count_seeds: bool) -> Dict[str, Any]:
    count = (lambda b: int(b.batch_size)) if count_seeds else (lambda b: 1)
    return _measure(_SETUPS[name], batches, count, padded)


def _run_all(setups: Dict[str, Callable[[], Iterable]], batches: int,
             count_seeds: bool) -> Dict[str, Dict[str, Any]]:
    _SETUPS.clear()
    _SETUPS.update(setups)
    return {name: _in_child(_run_setup, name, batches,
                            name.startswith("fixed_size"), count_seeds)
            for name in setups}


# --- Neighbour loader --------------------------------------------------------

def neighbor_benchmark(graph, args: argparse.Namespace) -> Dict[str, Any]:
    """Seed nodes/s of the unpadded and padded neighbour loaders."""
    fanouts = [15, 10]
    start = time.perf_counter()
    sampler = pyg_ipu.TorchNeighborSampler(graph, fanouts)
    csc_s = time.perf_counter() - start
    size_batches = 50
    torch.manual_seed(0)
    sizes = pyg_ipu.FixedSizeOptions.from_loader(NeighborLoader(
        graph, fanouts, batch_size=args.sampling_batch_size, shuffle=True,
        neighbor_sampler=sampler), sample_limit=size_batches)

    def loader(fixed: bool, workers: int) -> Callable[[], Iterable]:
        common = dict(batch_size=args.sampling_batch_size, shuffle=True,
                      num_workers=workers,
                      persistent_workers=False)
        if fixed:
            return lambda: pyg_ipu.PyGFixedSizeNeighborLoader(
                graph, fanouts, fixed_size_options=sizes,
                add_pad_masks=True, neighbor_sampler=sampler, **common)
        return lambda: NeighborLoader(graph, fanouts,
                                      neighbor_sampler=sampler, **common)

    setups = {}
    for workers in (0, args.sampling_workers):
        for fixed in (False, True):
            name = f"{'fixed_size' if fixed else 'pyg'}_{workers}_workers"
            setups[name] = loader(fixed, workers)
    runs = _run_all(setups, args.sampling_batches, count_seeds=True)
    return {"fanouts": fanouts, "batch_size": args.sampling_batch_size,
            "csc_build_s": csc_s,
            "fixed_sizes": {"num_nodes": sizes.num_nodes,
                            "num_edges": sizes.num_edges,
                            "from_batches": size_batches},
            "runs": runs}


# --- Cluster loader ----------------------------------------------------------

def cluster_benchmark(graph, args: argparse.Namespace) -> Dict[str, Any]:
    """Subgraphs/s of PyG's ClusterLoader and of FixedSizeClusterLoader."""
    num_parts = max(graph.num_nodes // args.cluster_nodes, 2)
    cache = os.path.join(args.data_root or default_root(), "power_law_metis")
    cached_before = set(os.listdir(cache)) if os.path.isdir(cache) else set()
    start = time.perf_counter()
    clusters = pyg_ipu.ClusterData(graph, num_parts=num_parts,
                                   save_dir=cache, log=False)
    partition_s = time.perf_counter() - start
    # A new file in the cache means METIS ran; otherwise it was read back.
    from_cache = set(os.listdir(cache)) <= cached_before
    per_batch = args.clusters_per_batch
    torch.manual_seed(0)
    sizes = pyg_ipu.FixedSizeOptions.from_loader(
        ClusterLoader(clusters, batch_size=per_batch, shuffle=True),
        sample_limit=50)

    def loader(fixed: bool, workers: int) -> Callable[[], Iterable]:
        common = dict(batch_size=per_batch, shuffle=True,
                      num_workers=workers, persistent_workers=False)
        if fixed:
            return lambda: pyg_ipu.FixedSizeClusterLoader(clusters, sizes,
                                                          **common)
        return lambda: ClusterLoader(clusters, **common)

    setups = {}
    for workers in (0, args.sampling_workers):
        for fixed in (False, True):
            name = f"{'fixed_size' if fixed else 'pyg'}_{workers}_workers"
            setups[name] = loader(fixed, workers)
    return {"num_parts": num_parts, "clusters_per_batch": per_batch,
            "partition_s": partition_s, "partition_from_cache": from_cache,
            "fixed_sizes": {"num_nodes": sizes.num_nodes,
                            "num_edges": sizes.num_edges,
                            "from_batches": 50},
            "runs": _run_all(setups, args.sampling_batches,
                             count_seeds=False)}


# --- Record and table --------------------------------------------------------

def sampling_benchmark(args: argparse.Namespace) -> Dict[str, Any]:
    """The ``sampling`` section of the benchmark record."""
    resolve_defaults(args)
    nodes = args.sampling_nodes
    start = time.perf_counter()
    graph = power_law_graph(nodes, nodes * args.sampling_edges_per_node,
                            seed=0)
    record: Dict[str, Any] = {
        "config": {"nodes": nodes, "workers": args.sampling_workers,
                   "batches": args.sampling_batches, "quick": args.quick},
        "graph": {"nodes": graph.num_nodes, "edges": graph.num_edges,
                  "features": graph.x.shape[1],
                  "generate_s": time.perf_counter() - start},
        "neighbor": neighbor_benchmark(graph, args),
        "cluster": cluster_benchmark(graph, args),
    }
    record["ratios"] = {
        f"{kind}_fixed_size_over_pyg_{w}_workers":
            record[kind]["runs"][f"fixed_size_{w}_workers"]["per_s"]
            / record[kind]["runs"][f"pyg_{w}_workers"]["per_s"]
        for kind in ("neighbor", "cluster")
        for w in (0, args.sampling_workers)}
    return record


def print_rows(record: Dict[str, Any]) -> None:
    """The benchmark table's rows for the sampling loaders."""
    graph = record["graph"]
    print(f"\nsampling loaders on a power-law graph of {graph['nodes']:,} "
          f"nodes and {graph['edges']:,} edges")
    print(f"{'measure':52}{'value':>12}{'per CPU s':>11}{'peak MB':>9}"
          f"{'growth':>8}")
    units = {"neighbor": "seeds/s", "cluster": "subgraphs/s"}
    for kind in ("neighbor", "cluster"):
        for name, run in record[kind]["runs"].items():
            label = f"{kind} {name.replace('_', ' ')} ({units[kind]})"
            growth = run["rss_after_all_mb"] - run["rss_after_fifth_mb"]
            print(f"{label:52}{run['per_s']:>12.0f}{run['per_cpu_s']:>11.0f}"
                  f"{run['peak_rss_mb']:>9.0f}{growth:>+8.1f}")
        fixed = record[kind]["runs"]["fixed_size_0_workers"]
        print(f"{kind + ' padding (node/edge slots used)':52}"
              f"{fixed['node_efficiency']:>11.1%} "
              f"{fixed['edge_efficiency']:>8.1%}")
    source = "read from the disk cache" \
        if record["cluster"].get("partition_from_cache") else "computed"
    print(f"{'cluster METIS partition (s, ' + source + ')':52}"
          f"{record['cluster']['partition_s']:>12.1f}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--out", default="bench_out/sampling.json")
    add_arguments(parser)
    args = parser.parse_args(argv)
    record = sampling_benchmark(args)
    print_rows(record)
    if args.out:
        write_json(args.out, record)
        print(f"\nJSON record: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
