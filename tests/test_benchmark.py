"""The benchmark's JSON record: every ratio the design lists is there and
well-formed (a tiny run; speed itself is never asserted)."""
import doctest
import importlib.util
import json
import math
import pathlib
import shutil
import statistics
import sys

import pytest
import torch
import torch_geometric

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def _load_benchmark():
    sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location("benchmark",
                                                  EXAMPLES / "benchmark.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The simulated-IPU rows of each model with ``--backends interpret``.
OURS = {"nci_gine": ["interpret_sync", "interpret_async"],
        "cora_gcn": ["interpret"], "cora_gat": ["interpret"],
        "sage_power_law": ["interpret"], "point_cloud": ["interpret"]}
PYG_ROWS = ["pyg_eager", "pyg_compile_dynamic", "pyg_compile_auto"]


def _load_bench_module(name: str):
    """An ``examples/_bench_*.py`` module, imported as the benchmark does."""
    sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("out")


@pytest.fixture(scope="module")
def record(tmp_path_factory, out_dir):
    """One tiny run of every model. The PyG-compiled rows use dynamo's
    ``eager`` backend: dynamo traces, guards, recompiles and counts as with
    inductor, without generating code."""
    root = tmp_path_factory.mktemp("data")
    raw = EXAMPLES.parent / "datasets" / "Cora" / "raw"
    # The repository ships Cora (datasets/): its absence is a broken
    # checkout, not a reason to skip.
    assert raw.is_dir(), f"Cora raw files not found at {raw}"
    shutil.copytree(raw, root / "Cora" / "raw")
    out = out_dir / "benchmark.json"
    benchmark = _load_benchmark()
    code = benchmark.main([
        "--limit", "400", "--epochs", "1", "--repeats", "1",
        "--overhead-rounds", "3", "--backends", "interpret",
        "--first-step-samples", "1", "--pyg-compile-backend", "eager",
        "--full-batch-steps", "1", "--sage-nodes", "2000",
        "--sage-batch-size", "32", "--sage-steps", "1",
        "--point-cloud-molecules", "32",
        "--data-root", str(root), "--out", str(out),
        "--plot", str(out.with_suffix(".png")),
        "--markdown", str(out.with_suffix(".md")),
        "--sampling-nodes", "5000", "--sampling-batches", "4",
        "--sampling-batch-size", "64", "--cluster-nodes", "100",
        "--clusters-per-batch", "4", "--long-tailed-graphs", "300"])
    assert code == 0
    assert out.with_suffix(".png").stat().st_size > 0
    return benchmark, json.loads(out.read_text())


def test_record_has_every_section(record):
    benchmark, data = record
    assert set(benchmark.RECORD_KEYS + benchmark.NCI_KEYS) <= set(data)
    assert list(data["training"]) == list(benchmark.MODELS)
    assert data["config"]["command"].startswith(
        "python examples/benchmark.py --limit 400 ")
    machine = data["config"]["machine"]
    assert machine["cpus"] >= 1 and machine["torch"] == torch.__version__
    assert machine["torch_geometric"] == torch_geometric.__version__


def test_ratios_are_finite_and_complete(record):
    _, data = record
    ratios = data["ratios"]
    for key in ("collation_fast_path_over_pyg",
                "collation_from_storage_over_pyg",
                "training_nci_gine_interpret_sync_over_pyg_eager",
                "training_nci_gine_interpret_async_over_pyg_eager",
                "training_nci_gine_interpret_async_over_sync",
                "training_nci_gine_best_over_best_pyg_compiled",
                "training_cora_gat_interpret_over_best_pyg_compiled",
                "training_point_cloud_pyg_eager_over_best_pyg_compiled",
                "executor_overhead_interpret_over_eager",
                "training_interpret_ceiling_over_pyg_eager"):
        assert isinstance(ratios[key], float) and math.isfinite(ratios[key]) \
            and ratios[key] > 0, key


@pytest.mark.parametrize("model", list(OURS))
def test_each_model_has_every_setup_and_its_counts(record, model):
    """PyG eager, the two PyG-compiled peers, then each backend's rows;
    each with its rate, first epoch and compilations."""
    _, data = record
    section = data["training"][model]
    assert section["rounds"] == 1 and section["unit"] and section["title"]
    setups = section["setups"]
    assert list(setups) == PYG_ROWS + OURS[model]
    kinds = [setups[name]["kind"] for name in setups]
    assert kinds == ["pyg_eager"] + ["pyg_compiled"] * 2 + \
        ["simulated_ipu"] * len(OURS[model])
    for name, entry in setups.items():
        assert entry["per_s"] > 0 and entry["first_epoch_s"] > 0, name
        assert entry["steps_per_epoch"] >= 1 and entry["items_per_epoch"] > 0
        assert len(entry["per_s_per_round"]) == 1  # --epochs 1
        assert entry["per_s"] == statistics.median(entry["per_s_per_round"])
    for name in PYG_ROWS[1:]:
        # Dynamo compiled the model at least once in its first epoch.
        assert setups[name]["compilations_first_epoch"] >= 1, name
        assert setups[name]["graph_breaks_first_epoch"] >= 0
        assert setups[name]["recompile_limit_hits"] == 0
    for name in ["pyg_eager"] + OURS[model]:
        assert setups[name]["compilations_first_epoch"] == 0, name
        assert setups[name]["compilations_measured_epochs"] == 0, name
        assert "graph_breaks_first_epoch" not in setups[name]


@pytest.mark.parametrize("model", list(OURS))
def test_ratios_recompute_from_the_rates_of_each_round(record, model):
    """Every ratio is the median over rounds of the setup's rate over the
    base's rate in the same round; the best peer has the highest median
    rate; the flat ratios are these figures."""
    _, data = record
    section = data["training"][model]
    setups = section["setups"]
    peers = {name: setups[name]["per_s"] for name in PYG_ROWS[1:]}
    best = max(peers, key=peers.get)
    assert section["best_pyg_compiled"] == best
    for name, entry in setups.items():
        for base, key in ((setups["pyg_eager"], "pyg_eager"),
                          (setups[best], "best_pyg_compiled")):
            per_round = [rate / other for rate, other in zip(
                entry["per_s_per_round"], base["per_s_per_round"])]
            assert entry[f"over_{key}_per_round"] == pytest.approx(per_round)
            assert entry[f"over_{key}"] == pytest.approx(
                statistics.median(per_round))
        assert data["ratios"][
            f"training_{model}_{name}_over_best_pyg_compiled"] == \
            entry["over_best_pyg_compiled"]
    assert setups["pyg_eager"]["over_pyg_eager"] == 1.0
    assert setups[best]["over_best_pyg_compiled"] == 1.0
    assert data["ratios"][
        f"training_{model}_best_over_best_pyg_compiled"] == max(
        setups[name]["over_best_pyg_compiled"] for name in OURS[model])


def test_markdown_page_is_written_from_the_record(record, out_dir, capsys):
    benchmark, data = record
    page = (out_dir / "benchmark.md").read_text(encoding="utf-8")
    assert page == benchmark.markdown(data)
    # Written again from the saved record, nothing measured: the same page.
    again = out_dir / "again.md"
    assert benchmark.main(["--from-record", str(out_dir / "benchmark.json"),
                           "--markdown", str(again)]) == 0
    assert again.read_text(encoding="utf-8") == page
    assert "training: Cora, GAT" in capsys.readouterr().out
    assert data["config"]["command"] in page
    for model in OURS:
        assert f"### {model}: " in page


def test_interpret_ceiling_is_the_pyg_iteration_over_the_step(record):
    """The ceiling is recomputed from its parts, which are all timed."""
    _, data = record
    overhead = data["overhead"]
    for key in ("interpret_step_ms", "eager_step_ms", "pyg_loading_ms",
                "pyg_step_ms"):
        assert overhead[key] > 0, key
    assert overhead["interpret_ceiling_over_pyg"] == pytest.approx(
        (overhead["pyg_loading_ms"] + overhead["pyg_step_ms"]) /
        overhead["interpret_step_ms"])
    assert data["ratios"]["training_interpret_ceiling_over_pyg_eager"] == \
        overhead["interpret_ceiling_over_pyg"]


def test_simulated_ipu_estimate_is_recorded(record):
    _, data = record
    estimate = data["simulated_ipu"]
    assert estimate["chip"] == "Mk2 GC200" and estimate["fits"]
    assert 0 < estimate["peak_ipu_bytes"] < estimate["capacity_bytes"]
    assert estimate["step_seconds"] > 0
    assert estimate["estimated_graphs_per_second"] > 0
    assert estimate["summary"].startswith("Mk2 GC200 x 1: ")


def test_packing_and_training_entries(record):
    _, data = record
    names = ["pad_to_max", "stream_pack_greedy"] + [
        f"stream_pack_w{w}" for w in (64, 256, 1024)]
    assert sorted(data["packing"]) == sorted(names)
    for name in names:
        entry = data["packing"][name]
        for key in ("node_efficiency", "edge_efficiency", "graph_efficiency"):
            assert 0 < entry[key] <= 1
        assert entry["skipped_graphs"] == 0
        assert entry["real_graphs"] == \
            data["training"]["nci_gine"]["config"]["molecules"] == 400
        if name != "pad_to_max":
            assert 0 < entry["sampler_s_per_batch"] < \
                entry["loading_s_per_batch"]
            assert entry["lookahead"] == (
                0 if name.endswith("greedy") else int(name.split("_w")[1]))
    assert sorted(data["packing_long_tailed"]) == sorted(names)
    for entry in data["packing_long_tailed"].values():
        assert entry["real_graphs"] == 300 and entry["skipped_graphs"] == 0
        assert 0 < entry["node_efficiency"] <= 1
    # Async over Sync pairs the rounds: with one round, the ratio of the two.
    training = data["training"]["nci_gine"]["setups"]
    assert data["ratios"]["training_nci_gine_interpret_async_over_sync"] == \
        pytest.approx(training["interpret_async"]["over_pyg_eager"] /
                      training["interpret_sync"]["over_pyg_eager"])


def test_chart_labels_are_words_and_stages_are_announced(record, capsys):
    benchmark, data = record
    assert benchmark.ratio_label(
        "training_nci_gine_compile_sync_over_pyg_eager") == \
        "Training, NCI GINE compile Sync / PyG eager loop"
    assert benchmark.ratio_label("collation_from_storage_over_pyg") == \
        "Collation, from storage / PyG"
    for key in data["ratios"]:
        assert "_" not in benchmark.ratio_label(key)
    benchmark.progress("collation (3 passes)")
    err = capsys.readouterr().err
    assert err.startswith("[benchmark ") and "collation (3 passes) ..." in err


def test_sampling_rows(record):
    """Seed nodes/s and subgraphs/s of every loader run, memory and
    padding figures, and the padded-over-unpadded ratios."""
    benchmark, data = record
    sampling = data["sampling"]
    assert set(benchmark.bench_sampling.RECORD_KEYS) <= set(sampling)
    assert sampling["graph"]["nodes"] == 5000
    assert sampling["graph"]["edges"] == 50000
    for kind in ("neighbor", "cluster"):
        runs = sampling[kind]["runs"]
        assert set(runs) == {f"{loader}_{w}_workers"
                             for loader in ("pyg", "fixed_size")
                             for w in (0, 2)}
        for run in runs.values():
            assert run["per_s"] > 0 and run["batches"] == 4
            assert run["peak_rss_mb"] >= run["rss_after_all_mb"] > 0
        for w in (0, 2):
            fixed = runs[f"fixed_size_{w}_workers"]
            assert 0 < fixed["node_efficiency"] <= 1
            assert 0 < fixed["edge_efficiency"] <= 1
            ratio = data["ratios"][f"{kind}_fixed_size_over_pyg_{w}_workers"]
            assert math.isfinite(ratio) and ratio > 0
    assert sampling["neighbor"]["fanouts"] == [15, 10]
    assert sampling["cluster"]["num_parts"] == 50


def test_first_step_is_recorded_per_backend(record):
    _, data = record
    assert set(data["first_step"]) == set(data["config"]["backends"])
    for result in data["first_step"].values():
        assert result["cold_s"] > 0 and result["warm_s"] > 0
        assert result["steady_step_s"] > 0
        # One sample each (--first-step-samples 1): the median is it.
        assert result["cold_samples_s"] == [result["cold_s"]]
        assert result["warm_samples_s"] == [result["warm_s"]]
        assert result["new_model_samples_s"] == [result["new_model_s"]]


def test_setups_take_turns_in_alternating_order():
    """Each round runs one epoch of every setup; odd rounds run them in
    reverse, so no setup always follows the same one."""
    training = _load_bench_module("_bench_training")
    calls = []

    def setup(name, graphs):
        def epoch():
            calls.append(name)
            return graphs, 3
        return training.Setup(epoch, training.SIMULATED)

    setups = {"a": setup("a", 10), "b": setup("b", 20), "c": setup("c", 30)}
    measured = training.take_turns(setups, 3)
    assert calls == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert [g for g, _, _ in measured["b"]] == [20, 20, 20]
    assert all(steps == 3 and seconds >= 0
               for runs in measured.values() for _, steps, seconds in runs)


def test_first_step_figures_are_medians_of_turns(monkeypatch):
    """Each backend's figures are the medians of its samples; the backends
    take turns; each cold run gets a fresh directory that its warm run
    reuses, and its new-model run too, with an inductor cache of its own,
    after the headers that the cold run started are built."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import bench_first_step
    calls = []
    seconds = iter([9.0, 2.0, 7.0, 0.5, 0.6, 0.5, 12.0, 3.0, 8.0,
                    0.7, 0.8, 0.6, 10.0, 1.0, 9.5, 0.9, 0.4, 0.7])

    def fake_run(backend, temp_dir, root, cache="inductor"):
        calls.append((backend, temp_dir, cache))
        return {"first_step_s": next(seconds), "second_step_s": 0.01}

    waited = []
    monkeypatch.setattr(bench_first_step, "_run", fake_run)
    monkeypatch.setattr(bench_first_step, "_wait_for_header_builds",
                        lambda temp: waited.append((len(calls), temp)))
    out = bench_first_step.first_step_seconds(["compile", "interpret"],
                                              samples=3)
    assert [b for b, _, _ in calls] == ["compile"] * 3 + \
        ["interpret"] * 3 + ["compile"] * 3 + ["interpret"] * 3 + \
        ["compile"] * 3 + ["interpret"] * 3
    dirs = [d for _, d, _ in calls]
    assert all(dirs[i] == dirs[i + 1] == dirs[i + 2]
               for i in range(0, 18, 3))
    assert len(set(dirs[::3])) == 6
    assert [c for _, _, c in calls[:3]] == \
        ["inductor", "inductor", "inductor-new-model"]
    # Right after each cold run, in its directory.
    assert waited == [(i + 1, dirs[i]) for i in range(0, 18, 3)]
    assert out["compile"]["cold_samples_s"] == [9.0, 12.0, 10.0]
    assert out["compile"]["cold_s"] == 10.0
    assert out["compile"]["warm_s"] == 2.0
    assert out["compile"]["new_model_samples_s"] == [7.0, 8.0, 9.5]
    assert out["compile"]["new_model_s"] == 8.0
    assert out["interpret"]["cold_s"] == 0.7
    assert out["interpret"]["warm_samples_s"] == [0.6, 0.8, 0.4]
    assert out["interpret"]["warm_s"] == 0.6
    with pytest.raises(ValueError, match="at least 1"):
        bench_first_step.first_step_seconds(["interpret"], samples=0)
    # The command lines reject a count of 0 before any run starts.
    with pytest.raises(SystemExit):
        bench_first_step.main(["--samples", "0"])


def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(name,
                                                  EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_segment_aggregation_equals_scatter_forward_and_backward():
    # More nodes than edges: many destinations receive no message, the case
    # where segment max (-inf) and scatter max (0) differ unless handled.
    compare = _load_example("bench_aggregation").compare
    record = compare(nodes=200, edges=150, features=5, repeats=1)
    assert sorted(record) == ["max", "mean", "sum"]
    assert all(t > 0 for times in record.values() for t in times.values())


def test_quick_keeps_the_nci_model_and_backends_come_from_one_list():
    benchmark = _load_benchmark()
    args = benchmark.parse_args(["--quick"])
    assert args.models == ["nci_gine"] and args.epochs == 1
    assert args.backends == list(benchmark.BACKENDS)
    assert benchmark.parse_args([]).models == list(benchmark.MODELS)
    assert benchmark.parse_args(["--markdown"]).markdown == \
        str(EXAMPLES.parent / "docs" / "benchmarks.md")


def test_each_backend_name_adds_its_rows():
    """A model's setups: the PyG rows, then the rows of each backend named,
    in that order (a new backend needs no change here)."""
    models = _load_bench_module("_bench_models")
    training = _load_bench_module("_bench_training")

    def ours(backend):
        return {backend: training.Setup(lambda: (1, 1), training.SIMULATED)}

    bench = models.ModelBench(
        title="t", unit="graphs", config={},
        new_model=lambda: torch.nn.Linear(2, 1),
        pyg_epoch=lambda model, forward: lambda: (1, 1), ours=ours)
    setups = models.all_setups(bench, ["interpret", "auto", "compile"],
                               "eager")
    assert list(setups) == PYG_ROWS + ["interpret", "auto", "compile"]
    assert [s.kind for s in setups.values()] == [
        "pyg_eager", "pyg_compiled", "pyg_compiled"] + ["simulated_ipu"] * 3


def test_dynamo_counts_compilations_graph_breaks_and_limit_hits():
    """Torch's rules are the reference: automatic dynamic compiles once
    static, then once with a dynamic size; ``dynamic=True`` once; a graph
    break splits a function in two graphs; static shapes recompile per
    size until the recompile limit (the default once per peer), after
    which dynamo runs the function eagerly and warns."""
    training = _load_bench_module("_bench_training")
    torch._dynamo.reset()

    def run(function, sizes, **arguments):
        counts = training.DynamoCounts()
        compiled = torch.compile(function, backend="eager", **arguments)
        for size in sizes:
            counts.wrap(lambda: (compiled(torch.ones(size)), 1))()
        return counts

    def double(x):
        return x * 2

    def halves(x):
        y = x + 1
        torch._dynamo.graph_break()
        return y * 2

    def triple(x):
        return x * 3

    def square(x):
        return x * x

    auto = run(double, [2, 3, 4, 5])
    assert (auto.graphs, auto.graph_breaks, auto.limit_hits) == (2, 0, 0)
    dynamic = run(triple, [2, 3, 4, 5], dynamic=True)
    assert dynamic.graphs == 1
    broken = run(halves, [2, 2])
    assert broken.graphs == 2 and broken.graph_breaks >= 1
    limit = torch._dynamo.config.recompile_limit * len(training.PEERS)
    static = run(square, range(2, limit + 5), dynamic=False)
    assert static.graphs == limit and static.limit_hits == 1


def test_markdown_writer_on_a_small_record():
    """The page from a record written by hand: the command and machine,
    the summary, each setup's row, every ratio; no section that the record
    lacks."""
    report = _load_bench_module("_bench_report")

    def setup(kind, per_s, eager, peer, first, compiled, **extra):
        return {"kind": kind, "per_s": per_s, "over_pyg_eager": eager,
                "over_best_pyg_compiled": peer, "first_epoch_s": first,
                "compilations_first_epoch": compiled,
                "compilations_measured_epochs": 0, **extra}

    record = {
        "config": {"command": "python examples/benchmark.py --models m",
                   "threads": 2, "pyg_compile_backend": "inductor",
                   "machine": {"os": "Linux", "cpu": "Xeon", "cpus": 2,
                               "load_average_1min": 1.5, "python": "3.11",
                               "torch": "2.13", "torch_geometric": "2.8.1",
                               "date": "2026-01-02 03:04 UTC"}},
        "training": {"m": {
            "title": "Model M", "unit": "graphs", "rounds": 3,
            "best_pyg_compiled": "pyg_compile_auto", "setups": {
                "pyg_eager": setup("pyg_eager", 100.0, 1.0, 0.5, 0.25, 0),
                "pyg_compile_auto": setup(
                    "pyg_compiled", 200.0, 2.0, 1.0, 20.0, 2,
                    graph_breaks_first_epoch=1,
                    graph_breaks_measured_epochs=0),
                "compile": setup("simulated_ipu", 300.0, 3.0, 1.5, 9.0,
                                 1)}},
            # PyG eager beats its peers here: the best PyG row is eager.
            "n": {"title": "Model N", "unit": "epochs", "rounds": 3,
                  "best_pyg_compiled": "pyg_compile_auto", "setups": {
                      "pyg_eager": setup("pyg_eager", 4.0, 1.0, 2.0, 0.5, 0),
                      "pyg_compile_auto": setup(
                          "pyg_compiled", 2.0, 0.5, 1.0, 20.0, 3,
                          graph_breaks_first_epoch=0,
                          graph_breaks_measured_epochs=0),
                      "interpret": setup("simulated_ipu", 3.0, 0.75, 1.5,
                                         1.0, 0)}}},
        "ratios": {"training_m_compile_over_pyg_eager": 3.0,
                   "training_m_best_over_best_pyg_compiled": 1.5},
    }
    page = report.markdown(record)
    lines = page.splitlines()
    assert lines[0] == "# Benchmarks"
    assert "Generated by `python examples/benchmark.py --models m` on " \
        "2026-01-02 03:04 UTC." in lines
    assert "Machine: Linux, Xeon, 2 CPUs usable, torch 2 intra-op " \
        "thread(s), load average 1.50 at the start. Python 3.11, torch " \
        "2.13, PyG 2.8.1. The PyG-compiled rows use torch.compile's " \
        "`inductor` backend." in lines
    assert "| m | PyG, torch.compile() (automatic dynamic): 200 graphs/s | " \
        "simulated IPU, compile: 300 graphs/s | 1.50 | 1.50 |" in lines
    assert "| n | PyG, torch.compile() (automatic dynamic): 2 epochs/s | " \
        "simulated IPU, interpret: 3 epochs/s | 1.50 | 0.75 |" in lines
    assert "The best simulated-IPU setup is ahead of the best PyG-compiled " \
        "one on 2 of 2 models, and ahead of every PyG row (eager too) on " \
        "1." in page
    assert "### m: Model M" in lines and "3 measured rounds." in lines
    assert "| PyG eager | 100 | 1.00 | 0.50 | 0.2 | 0 + 0 |  |" in lines
    assert "| PyG, torch.compile() (automatic dynamic) **(best " \
        "PyG-compiled)** | 200 | 2.00 | 1.00 | 20.0 | 2 + 0 | 1 + 0 |" \
        in lines
    assert "| simulated IPU, compile | 300 | 3.00 | 1.50 | 9.0 | 1 + 0 |  |" \
        in lines
    assert "| `training_m_compile_over_pyg_eager` | 3.000 |" in lines
    assert "| `training_m_best_over_best_pyg_compiled` | 1.500 |" in lines
    assert "Collation" not in page and "Sampling" not in page
    assert page.endswith("|\n")


@pytest.mark.parametrize("name", ["_bench_training", "_bench_report",
                                  "_bench_models"])
def test_docstring_examples_of_the_benchmark_modules(name):
    result = doctest.testmod(_load_bench_module(name),
                             optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_auto_first_step_is_compared_with_interpret():
    """``auto``'s goal is ``interpret``'s first step: the record gives the
    ratio in each setting."""
    benchmark = _load_benchmark()
    step = {"interpret": {"cold_s": 0.5, "new_model_s": 0.4, "warm_s": 0.4},
            "auto": {"cold_s": 0.55, "new_model_s": 0.4, "warm_s": 0.6}}
    ratios = benchmark._ratios({"training": {}, "first_step": step,
                                "config": {"backends": ["interpret",
                                                        "auto"]}})
    assert ratios["training_auto_first_step_over_interpret_cold"] == \
        pytest.approx(1.1)
    assert ratios["training_auto_first_step_over_interpret_new_model"] == 1
    assert ratios["training_auto_first_step_over_interpret_warm"] == \
        pytest.approx(1.5)
    assert benchmark.ratio_label(
        "training_auto_first_step_over_interpret_warm") == \
        "Training, auto first step / interpret warm"
