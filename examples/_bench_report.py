"""The benchmark's record as text: the training rows of the console table,
and the generated page ``docs/benchmarks.md`` (``benchmark.py
--markdown``), which holds every figure of one run, with the command, the
machine and the versions that produced it. The page is written whole from
the record: figures are never copied into it by hand.

Example::

    >>> section = {"title": "Demo", "unit": "graphs", "rounds": 1,
    ...            "best_pyg_compiled": "pyg_compile_auto", "setups": {
    ...     "pyg_eager": {"kind": "pyg_eager", "per_s": 100.0,
    ...                   "over_pyg_eager": 1.0,
    ...                   "over_best_pyg_compiled": 0.5,
    ...                   "first_epoch_s": 0.5, "steps_per_epoch": 3,
    ...                   "compilations_first_epoch": 0,
    ...                   "compilations_measured_epochs": 0},
    ...     "pyg_compile_auto": {"kind": "pyg_compiled", "per_s": 200.0,
    ...                          "over_pyg_eager": 2.0,
    ...                          "over_best_pyg_compiled": 1.0,
    ...                          "first_epoch_s": 20.0, "steps_per_epoch": 3,
    ...                          "compilations_first_epoch": 2,
    ...                          "compilations_measured_epochs": 0,
    ...                          "graph_breaks_first_epoch": 0,
    ...                          "graph_breaks_measured_epochs": 0}}}
    >>> print(training_table(section))  # doctest: +NORMALIZE_WHITESPACE
    | setup | graphs/s | / PyG eager | / best PyG-compiled | first epoch (s) | compilations (first epoch + measured) | graph breaks |
    | --- | ---: | ---: | ---: | ---: | ---: | ---: |
    | PyG eager | 100 | 1.00 | 0.50 | 0.5 | 0 + 0 | |
    | PyG, torch.compile() (automatic dynamic) **(best PyG-compiled)** | 200 | 2.00 | 1.00 | 20.0 | 2 + 0 | 0 + 0 |
"""
import datetime
import os
import platform
from typing import Any, Dict, List, Optional

__all__ = ["machine", "markdown", "ours_ahead", "print_training",
           "setup_label", "training_table"]

_PEER_LABELS = {
    "pyg_eager": "PyG eager",
    "pyg_compile_dynamic": "PyG, torch.compile(dynamic=True)",
    "pyg_compile_auto": "PyG, torch.compile() (automatic dynamic)",
}


def setup_label(name: str) -> str:
    """A setup's name in words: ``compile_async`` -> ``simulated IPU,
    compile, Async``.

    Example::

        >>> setup_label("interpret_sync"), setup_label("pyg_eager")
        ('simulated IPU, interpret, Sync', 'PyG eager')
    """
    if name in _PEER_LABELS:
        return _PEER_LABELS[name]
    words = name.split("_")
    modes = {"sync": "Sync", "async": "Async"}
    if len(words) > 1 and words[-1] in modes:
        return f"simulated IPU, {'_'.join(words[:-1])}, {modes[words[-1]]}"
    return f"simulated IPU, {name}"


def machine() -> Dict[str, Any]:
    """What ran the benchmark: OS, processor, CPUs this process may use,
    the load average (1 minute) and the Python, torch and PyG versions."""
    import torch
    import torch_geometric
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            names = [line.split(":", 1)[1].strip() for line in f
                     if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {"os": platform.platform(), "cpu": cpu, "cpus": usable,
            "load_average_1min": os.getloadavg()[0]
            if hasattr(os, "getloadavg") else None,
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc)
            .strftime("%Y-%m-%d %H:%M UTC")}


def _count(result: Dict[str, Any], key: str) -> str:
    first = result.get(f"{key}_first_epoch")
    if first is None:
        return ""
    return f"{first} + {result[f'{key}_measured_epochs']}"


def training_table(section: Dict[str, Any]) -> str:
    """One model's setups as a markdown table."""
    unit = section["unit"]
    best = section.get("best_pyg_compiled")
    lines = [f"| setup | {unit}/s | / PyG eager | / best PyG-compiled | "
             "first epoch (s) | compilations (first epoch + measured) | "
             "graph breaks |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in section["setups"].items():
        label = setup_label(name) + (
            " **(best PyG-compiled)**" if name == best else "")
        lines.append(
            f"| {label} | {_rate(r['per_s'])} | {_ratio(r, 'pyg_eager')} | "
            f"{_ratio(r, 'best_pyg_compiled')} | {r['first_epoch_s']:.1f} | "
            f"{_count(r, 'compilations')} | {_count(r, 'graph_breaks')} |")
    return "\n".join(lines)


def _rate(value: float) -> str:
    """Three significant digits at least, thousands separated."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _ratio(result: Dict[str, Any], base: str) -> str:
    value = result.get(f"over_{base}")
    return "" if value is None else f"{value:.2f}"


def ours_ahead(section: Dict[str, Any]) -> Optional[bool]:
    """Whether the best simulated-IPU setup beat the best PyG-compiled one
    (paired rounds); None when either is missing."""
    ours = [r["over_best_pyg_compiled"] for r in section["setups"].values()
            if r["kind"] == "simulated_ipu" and
            "over_best_pyg_compiled" in r]
    return max(ours) > 1.0 if ours else None


def print_training(record: Dict[str, Any]) -> None:
    """The console rows of every model's training setups."""
    for section in record["training"].values():
        print(f"\ntraining: {section['title']} ({section['rounds']} rounds)")
        print(f"{'setup':52}{section['unit'] + '/s':>12}{'/eager':>8}"
              f"{'/peer':>8}{'1st s':>8}{'comp.':>8}")
        best = section.get("best_pyg_compiled")
        for name, r in section["setups"].items():
            label = setup_label(name) + (" (best peer)" if name == best
                                         else "")
            print(f"{label:52}{_rate(r['per_s']):>12}"
                  f"{_ratio(r, 'pyg_eager'):>8}"
                  f"{_ratio(r, 'best_pyg_compiled'):>8}"
                  f"{r['first_epoch_s']:>8.1f}"
                  f"{_count(r, 'compilations'):>8}")


def _summary(record: Dict[str, Any]) -> List[str]:
    lines = ["| model | best PyG-compiled | best simulated IPU | "
             "best simulated IPU / best PyG-compiled | "
             "best simulated IPU / best PyG row |",
             "| --- | --- | --- | ---: | ---: |"]
    ahead = ahead_of_all = compared = 0
    for name, section in record["training"].items():
        setups = section["setups"]
        ours = [n for n, r in setups.items() if r["kind"] == "simulated_ipu"
                and "over_best_pyg_compiled" in r]
        if not ours or not section.get("best_pyg_compiled"):
            continue
        best_ours = max(ours,
                        key=lambda n: setups[n]["over_best_pyg_compiled"])
        mine = setups[best_ours]
        # The lower of its two paired ratios: against whichever of PyG
        # eager and the best peer is faster.
        over_all = min(mine["over_pyg_eager"], mine["over_best_pyg_compiled"])
        ahead += bool(ours_ahead(section))
        ahead_of_all += over_all > 1.0
        compared += 1
        peer = section["best_pyg_compiled"]
        lines.append(
            f"| {name} | {setup_label(peer)}: "
            f"{_rate(setups[peer]['per_s'])} {section['unit']}/s | "
            f"{setup_label(best_ours)}: {_rate(mine['per_s'])} "
            f"{section['unit']}/s | {mine['over_best_pyg_compiled']:.2f} | "
            f"{over_all:.2f} |")
    lines += ["", f"The best simulated-IPU setup is ahead of the best "
              f"PyG-compiled one on {ahead} of {compared} models, and ahead "
              f"of every PyG row (eager too) on {ahead_of_all}. The last "
              "column is the lower of its paired ratios over PyG eager and "
              "over the best PyG-compiled setup."]
    return lines


def markdown(record: Dict[str, Any]) -> str:
    """The generated page: the run's command, machine and versions, then
    every training table, the ratios of the other sections and the
    record's flat ``ratios``."""
    config, m = record["config"], record["config"]["machine"]
    out = [
        "# Benchmarks",
        "",
        "<!-- Generated by examples/benchmark.py --markdown: do not edit, "
        "run the command again. -->",
        "",
        f"Generated by `{config['command']}` on {m['date']}.",
        "",
        f"Machine: {m['os']}, {m['cpu']}, {m['cpus']} CPUs usable, torch "
        f"{config['threads']} intra-op thread(s), load average "
        f"{_load(m)} at the start. Python {m['python']}, torch "
        f"{m['torch']}, PyG {m['torch_geometric']}. The PyG-compiled rows "
        f"use torch.compile's `{config['pyg_compile_backend']}` backend.",
        "",
        "Every figure comes from this one run. The setups of a model take "
        "turns, one epoch each per round, in reverse order every other "
        "round; a rate is the median over the rounds, and a ratio the "
        "median over the rounds of the setup's rate over the rate of the "
        "PyG eager loop (or of the best PyG-compiled setup, the one of the "
        "highest median rate) in the same round. On a machine shared with "
        "other work single rounds vary by tens of percent; the paired "
        "medians vary less, but still from run to run. The first epoch "
        "(one sample per setup) includes compilation: its time depends on "
        "the machine's load at that moment and on what inductor's caches "
        "already hold (`inductor_cache_first_epoch` in the JSON record).",
        "",
        "## Training: the simulated IPU against PyG, eager and compiled",
        "",
    ] + _summary(record)
    for name, section in record["training"].items():
        out += ["", f"### {name}: {section['title']}", "",
                f"{section['rounds']} measured rounds.", "",
                training_table(section)]
    out += _other_sections(record)
    out += ["", "## Every ratio of the record", "",
            "| ratio | value |", "| --- | ---: |"]
    out += [f"| `{key}` | {value:.3f} |"
            for key, value in record["ratios"].items()]
    return "\n".join(out) + "\n"


def _load(m: Dict[str, Any]) -> str:
    load = m.get("load_average_1min")
    return "unknown" if load is None else f"{load:.2f}"


def _other_sections(record: Dict[str, Any]) -> List[str]:
    out: List[str] = []
    if "collation" in record:
        c = record["collation"]
        out += ["", "## Collation and packing (NCI molecules)", "",
                "| measure | value |", "| --- | ---: |",
                f"| PyG Collater (graphs/s) | {c['pyg_graphs_per_s']:,.0f} |",
                f"| fixed-size fast path (graphs/s) | "
                f"{c['tight_graphs_per_s']:,.0f} |",
                f"| fixed-size from storage (graphs/s) | "
                f"{c['tight_from_storage_graphs_per_s']:,.0f} |"]
        for title, rows in (("packing", record["packing"]),
                            ("long-tailed sizes",
                             record.get("packing_long_tailed", {}))):
            out += [f"| {title}, {name} (node / edge slots used) | "
                    f"{r['node_efficiency']:.1%} / "
                    f"{r['edge_efficiency']:.1%} |"
                    for name, r in rows.items()]
    if "overhead" in record:
        o = record["overhead"]
        out += ["", "## Executor overhead (NCI step)", "",
                "| measure | ms | ratio |", "| --- | ---: | ---: |",
                f"| interpret step / eager step | "
                f"{o['interpret_step_ms']:.2f} / {o['eager_step_ms']:.2f} | "
                f"{o['interpret_over_eager']:.3f} |",
                f"| PyG iteration (loading + step) / interpret step | "
                f"{o['pyg_loading_ms']:.2f} + {o['pyg_step_ms']:.2f} / "
                f"{o['interpret_step_ms']:.2f} | "
                f"{o['interpret_ceiling_over_pyg']:.3f} |"]
    if "first_step" in record:
        out += ["", "## First training step (NCI, fresh processes)", "",
                "| backend | new machine (s) | new model (s) | warm cache (s) "
                "| samples |", "| --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {backend} | {r['cold_s']:.1f} | {r['new_model_s']:.1f} "
                f"| {r['warm_s']:.1f} | {len(r['cold_samples_s'])} |"
                for backend, r in record["first_step"].items()]
    if "simulated_ipu" in record:
        out += ["", "## The simulated IPU's estimate (NCI model)", "",
                record["simulated_ipu"]["summary"]]
    if "sampling" in record:
        out += _sampling(record["sampling"])
    return out


def _sampling(sampling: Dict[str, Any]) -> List[str]:
    graph = sampling["graph"]
    units = {"neighbor": "seeds/s", "cluster": "subgraphs/s"}
    out = ["", f"## Sampling loaders ({graph['nodes']:,} nodes, "
           f"{graph['edges']:,} edges)", "",
           "| loader | rate | per CPU second | peak MB |",
           "| --- | ---: | ---: | ---: |"]
    for kind in ("neighbor", "cluster"):
        out += [f"| {kind} {name.replace('_', ' ')} | {r['per_s']:,.0f} "
                f"{units[kind]} | {r['per_cpu_s']:,.0f} | "
                f"{r['peak_rss_mb']:.0f} |"
                for name, r in sampling[kind]["runs"].items()]
    return out
