"""The simulation report, the simulator's device options and the chip
table."""
import json
import sys

import pytest
import torch
import torch.nn.functional as F

import poptorch
from poptorch_core.options import _simulator as _options_simulator
from poptorch_core.device import CHIPS, chip_model

from ._models import MLP


def _net():
    """A 4-class classifier, large enough for a visible memory report."""
    return MLP(64, 128, 4, loss=F.cross_entropy)


def _inputs(rows):
    return torch.randn(rows, 64), torch.randint(0, 4, (rows,))


def _compiled(opts=None, training=True, rows=32, model=None):
    model = model or _net()
    if training:
        wrapped = poptorch.trainingModel(model, opts, torch.optim.SGD(
            model.parameters(), lr=0.1))
    else:
        wrapped = poptorch.inferenceModel(model, opts)
    wrapped.compile(*_inputs(rows))
    return wrapped


def test_chip_table():
    assert sorted(CHIPS) == sorted(_options_simulator.IPU_VERSIONS)
    mk2 = chip_model(2)
    assert (mk2.tiles, mk2.sram_per_tile) == (1472, 624 * 1024)
    assert mk2.memory_bytes == 1472 * 624 * 1024
    assert chip_model(1).memory_bytes == 1216 * 256 * 1024
    assert chip_model(21).fp16_flops > mk2.fp16_flops > mk2.fp32_flops
    with pytest.raises(ValueError, match="valid IPU versions are 1, 2, 21"):
        chip_model(3)


def test_simulator_device_options():
    opts = poptorch.Options()
    assert opts.Simulator.memory_check == "warn"
    assert opts.Simulator.memoryCheck("error") is opts.Simulator
    assert opts.Simulator.toDict()["simulator.memory_check"] == "error"
    with pytest.raises(ValueError,
                       match="valid values are 'error', 'warn', 'off'"):
        opts.Simulator.memoryCheck("strict")
    with pytest.raises(ValueError, match="valid IPU versions are 1, 2, 21"):
        opts.Simulator.ipuVersion(3)
    restored = poptorch.Options()
    restored.from_json(json.dumps({"Simulator.memoryCheck": "off"}))
    assert restored.Simulator.memory_check == "off"


def test_ipu_version_sets_the_chip_and_an_offline_target_wins():
    opts = poptorch.Options()
    opts.Simulator.ipuVersion(21)
    assert _compiled(opts).simulationReport().chip.name == "Bow IPU"
    opts = poptorch.Options().useOfflineIpuTarget(1)
    report = _compiled(opts).simulationReport()
    assert report.chip.version == 1
    assert report.memory[0].capacity == 1216 * 256 * 1024


def test_report_text_dict_and_summary():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(4)
    report = _compiled(opts, rows=4 * 8).simulationReport()
    text = str(report)
    for expected in ("Simulated IPU: Mk2 GC200: 1,472 tiles x 624 KiB",
                     "Memory per IPU", "parameters", "activations",
                     "stage 0 on IPU0", "Estimated throughput",
                     "fc1: "):
        assert expected in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["chip"]["memory_bytes"] == 1472 * 624 * 1024
    params = (64 * 128 + 128 + 128 * 4 + 4) * 4
    assert data["memory"][0]["breakdown_bytes"]["parameters"] == params
    assert data["micro_batches"] == 4 and data["micro_batch_size"] == 8
    assert data["samples_per_second"] == pytest.approx(
        8 * 4 / report.step_seconds)
    assert report.summary().startswith("Mk2 GC200 x 1 per replica: IPU0 ")


def test_the_report_follows_the_optimizer():
    model = _net()
    wrapped = poptorch.trainingModel(model, None, torch.optim.SGD(
        model.parameters(), lr=0.1))
    wrapped.compile(*_inputs(8))
    assert wrapped.simulationReport().memory[0].breakdown[
        "optimizer_state"] == 0
    wrapped.setOptimizer(torch.optim.Adam(model.parameters()))
    numel = sum(p.numel() for p in model.parameters())
    assert wrapped.simulationReport().memory[0].breakdown[
        "optimizer_state"] == 8 * numel + 4 * 4


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="plot() needs matplotlib")
    path = _compiled().simulationReport().plot(str(tmp_path / "r.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    report = _compiled().simulationReport()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"poptorch-sim\[examples\]"):
        report.plot(str(tmp_path / "r.png"))


def test_report_needs_a_compiled_model_and_cycle_count_stays_hardware_only():
    model = poptorch.inferenceModel(_net())
    with pytest.raises(poptorch.Error, match="has not been compiled"):
        model.simulationReport()
    opts = poptorch.Options().logCycleCount(True)
    model = _compiled(opts, training=False)
    assert model.simulationReport().fits
    with pytest.raises(poptorch.Error, match="only supported on actual IPU"):
        model.cycleCount()


def test_replicas_all_reduce_gradients_and_scale_throughput():
    single = _compiled(rows=8).simulationReport()
    opts = poptorch.Options().replicationFactor(4)
    replicated = _compiled(opts, rows=4 * 8).simulationReport()
    assert single.allreduce_seconds == 0 and replicated.replicas == 4
    grads = (64 * 128 + 128 + 128 * 4 + 4) * 4
    link = replicated.chip.ipu_link_bandwidth
    assert replicated.allreduce_seconds == pytest.approx(
        2 * 3 / 4 * grads / link)
    assert replicated.num_ipus == 4
    assert replicated.samples_per_second == pytest.approx(
        4 * 8 / replicated.step_seconds)


class Staged(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 256)
        self.b = torch.nn.Linear(256, 256)

    def forward(self, x):
        with poptorch.Block("a", ipu_id=0):
            x = self.a(x).relu()
        with poptorch.Block("b", ipu_id=1):
            x = self.b(x)
            return x, poptorch.identity_loss(x.sum(), reduction="none")


def _strategy_report(strategy, accumulation=4):
    model = Staged()
    opts = poptorch.Options().setExecutionStrategy(strategy)
    opts.Training.gradientAccumulation(accumulation)
    wrapped = poptorch.trainingModel(model, opts, torch.optim.SGD(
        model.parameters(), lr=0.1))
    wrapped.compile(torch.randn(accumulation * 64, 256))
    return wrapped.simulationReport()


def test_strategies_schedule_the_same_stages_differently():
    piped = _strategy_report(poptorch.PipelinedExecution("a", "b"))
    sharded = _strategy_report(poptorch.ShardedExecution("a", "b"))
    assert (piped.schedule, sharded.schedule) == ("pipelined", "sharded")
    assert [s.forward for s in piped.stages] == \
        [s.forward for s in sharded.stages]
    # Sharded: every micro-batch runs both stages in turn.
    per_micro = sum(s.forward_total + s.backward_total for s in sharded.stages)
    assert sharded.step_seconds == pytest.approx(
        4 * per_micro + sharded.optimizer_seconds)
    assert piped.step_seconds < sharded.step_seconds
    assert sharded.bubble_fraction == 0
    phased = _strategy_report(poptorch.SerialPhasedExecution(
        poptorch.Phase(poptorch.Stage("a").ipu(0)),
        poptorch.Phase(poptorch.Stage("b").ipu(1))))
    assert phased.schedule == "serial phased"
    assert any(bar.kind == "weights" for bar in phased.gantt)
    # Two phases on one IPU: only one phase's weights are on chip at once.
    shared = _strategy_report(poptorch.SerialPhasedExecution(
        poptorch.Phase(poptorch.Stage("a").ipu(0)),
        poptorch.Phase(poptorch.Stage("b").ipu(0))))
    (ipu,) = shared.memory
    assert ipu.breakdown["parameters"] == (256 * 256 + 256) * 4


def test_a_failing_estimate_never_stops_a_model_under_warn(monkeypatch,
                                                         log_records):
    from poptorch_core import device

    def broken(spec):
        raise RuntimeError("no estimate")

    monkeypatch.setattr(device, "simulate", broken)
    out, _ = poptorch.inferenceModel(_net())(*_inputs(4))
    assert out.shape == (4, 4)
    assert any("could not estimate this model (RuntimeError: no estimate)"
               in r.getMessage() for r in log_records)
    opts = poptorch.Options()
    opts.Simulator.memoryCheck("error")
    with pytest.raises(RuntimeError, match="no estimate"):
        poptorch.inferenceModel(_net(), opts)(*_inputs(4))
