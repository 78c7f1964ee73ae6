"""The benchmark's JSON record: every ratio the design lists is there and
well-formed (a tiny run; speed itself is never asserted)."""
import importlib.util
import json
import math
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def _load_benchmark():
    import sys
    sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location("benchmark",
                                                  EXAMPLES / "benchmark.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    out = tmp_path_factory.mktemp("out") / "benchmark.json"
    benchmark = _load_benchmark()
    code = benchmark.main([
        "--limit", "400", "--epochs", "1", "--repeats", "1",
        "--overhead-rounds", "3", "--backends", "interpret",
        "--first-step-samples", "1",
        "--data-root", str(root), "--out", str(out),
        "--plot", str(out.with_suffix(".png")),
        "--sampling-nodes", "5000", "--sampling-batches", "4",
        "--sampling-batch-size", "64", "--cluster-nodes", "100",
        "--clusters-per-batch", "4", "--long-tailed-graphs", "300"])
    assert code == 0
    assert out.with_suffix(".png").stat().st_size > 0
    return benchmark, json.loads(out.read_text())


def test_record_has_every_section(record):
    benchmark, data = record
    assert set(benchmark.RECORD_KEYS) <= set(data)


def test_ratios_are_finite_and_complete(record):
    _, data = record
    ratios = data["ratios"]
    for key in ("collation_fast_path_over_pyg",
                "collation_from_storage_over_pyg",
                "training_interpret_sync_over_pyg_eager",
                "training_interpret_async_over_pyg_eager",
                "training_interpret_async_over_sync",
                "training_best_over_pyg_eager",
                "executor_overhead_interpret_over_eager",
                "training_interpret_ceiling_over_pyg_eager"):
        assert isinstance(ratios[key], float) and math.isfinite(ratios[key]) \
            and ratios[key] > 0, key


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
        assert entry["real_graphs"] == data["config"]["molecules"]
        if name != "pad_to_max":
            assert 0 < entry["sampler_s_per_batch"] < \
                entry["loading_s_per_batch"]
            assert entry["lookahead"] == (
                0 if name.endswith("greedy") else int(name.split("_w")[1]))
    assert sorted(data["packing_long_tailed"]) == sorted(names)
    for entry in data["packing_long_tailed"].values():
        assert entry["real_graphs"] == 300 and entry["skipped_graphs"] == 0
        assert 0 < entry["node_efficiency"] <= 1
    for name in ("pyg_eager", "interpret_sync", "interpret_async"):
        entry = data["training"][name]
        assert entry["graphs_per_s"] > 0
        assert len(entry["over_pyg_eager_per_round"]) == 1  # --epochs 1
        assert entry["over_pyg_eager"] > 0
    assert data["training"]["pyg_eager"]["over_pyg_eager"] == 1.0
    # Async over Sync pairs the rounds: with one round, the ratio of the two.
    training = data["training"]
    assert data["ratios"]["training_interpret_async_over_sync"] == \
        pytest.approx(training["interpret_async"]["over_pyg_eager"] /
                      training["interpret_sync"]["over_pyg_eager"])
    assert data["training"]["interpret_sync"][
        "compilations_measured_epochs"] == 0


def test_chart_labels_are_words_and_stages_are_announced(record, capsys):
    benchmark, data = record
    assert benchmark.ratio_label("training_compile_sync_over_pyg_eager") == \
        "Training, compile Sync / PyG eager loop"
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
        # The first step traces (and compiles): it is slower than a step.
        assert result["cold_s"] > result["steady_step_s"]
        # One sample each (--first-step-samples 1): the median is it.
        assert result["cold_samples_s"] == [result["cold_s"]]
        assert result["warm_samples_s"] == [result["warm_s"]]
        assert result["new_model_samples_s"] == [result["new_model_s"]]
        assert result["new_model_s"] > result["steady_step_s"]


def test_setups_take_turns_in_alternating_order():
    """Each round runs one epoch of every setup; odd rounds run them in
    reverse, so no setup always follows the same one."""
    benchmark = _load_benchmark()
    calls = []

    def setup(name, graphs):
        def epoch():
            calls.append(name)
            return graphs, 3
        return benchmark._Setup(epoch)

    setups = {"a": setup("a", 10), "b": setup("b", 20), "c": setup("c", 30)}
    measured = benchmark._rounds(setups, 3)
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


def test_auto_rows_are_its_first_epochs_and_first_step_over_interpret():
    """The ``auto`` setup's first epochs from its first call give their
    own ratio, and its first step is compared with ``interpret``'s."""
    benchmark = _load_benchmark()
    first = benchmark.AUTO_FIRST_EPOCHS
    training = {
        "pyg_eager": {"over_pyg_eager": 1.0},
        "auto_sync": {"over_pyg_eager": 2.8,
                      "over_pyg_eager_first_epochs": 1.9}}
    step = {"interpret": {"cold_s": 0.5, "warm_s": 0.4},
            "auto": {"cold_s": 0.55, "warm_s": 0.4}}
    ratios = benchmark._ratios({
        "collation": {"tight_over_pyg": 2.0,
                      "tight_from_storage_over_pyg": 3.0},
        "training": training, "config": {"backends": ["auto"]},
        "overhead": {"interpret_over_eager": 0.8,
                     "interpret_ceiling_over_pyg": 1.9},
        "first_step": step})
    assert ratios["training_auto_sync_over_pyg_eager"] == 2.8
    assert ratios[f"training_auto_sync_first_{first}_epochs_over_pyg_eager"] \
        == 1.9
    assert ratios["training_auto_first_step_over_interpret_cold"] == \
        pytest.approx(1.1)
    assert ratios["training_auto_first_step_over_interpret_warm"] == 1.0
    assert benchmark.ratio_label(
        "training_auto_first_step_over_interpret_cold") == \
        "Training, auto first step / interpret cold"
