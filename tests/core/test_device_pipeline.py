"""The simulated IPU's pipeline: out of memory on one Mk2 IPU, fitting
over four, and the fill/drain bubble against its closed form."""
import pytest
import torch

import poptorch
from poptorch_core.device import StageTime
from poptorch_core.device._schedules import pipelined, sharded

from ._models import SumLoss
MK2_BYTES = 1472 * 624 * 1024


class Big(torch.nn.Module):
    """Four 4096 x 4096 layers: 67M weights. With momentum SGD and
    gradient accumulation each weight needs 16 bytes (weight, gradient,
    accumulator, velocity): 1.07 GB, more than one Mk2 IPU's 0.94 GB."""

    def __init__(self, pipelined_over=None):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(4096, 4096, bias=False) for _ in range(4))
        if pipelined_over:
            for ipu, layer in enumerate(self.layers):
                poptorch.BeginBlock(layer, f"layer{ipu}", ipu_id=ipu)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x, poptorch.identity_loss(x.sum(), reduction="none")


def _options(check):
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(8)
    opts.Simulator.memoryCheck(check)
    return opts


def _train(model, check):
    return poptorch.trainingModel(model, _options(check), torch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9))


def test_too_large_for_one_ipu_then_fits_pipelined_over_four():
    x = torch.randn(8 * 4, 4096)
    model = _train(Big(), "error")
    with pytest.raises(poptorch.Error) as info:
        model.compile(x)
    message = str(info.value)
    need = 4 * 4096 * 4096 * 4 * 4  # bytes: 4 layers x 16 bytes per weight
    assert "Out of memory on IPU0 (Mk2 GC200)" in message
    assert f"the IPU has {MK2_BYTES / 1e6:.1f} MB" in message
    gigabytes = float(message.split("needs ")[1].split(" GB")[0])
    assert gigabytes >= round(need / 1e9, 1)
    # The largest consumers name the modules and the user's source line.
    assert "layers.0:" in message and "test_device_pipeline.py" in message
    assert "x = torch.tanh(layer(x))" in message
    assert not model.isCompiled()

    model = _train(Big(pipelined_over=4), "error")
    model.compile(x)
    report = model.simulationReport()
    assert report.fits and report.schedule == "pipelined"
    assert [m.ipu for m in report.memory] == [0, 1, 2, 3]
    # Each IPU holds exactly one layer's weight, gradient, accumulator and
    # velocity: the report shows the balance.
    for memory in report.memory:
        assert memory.breakdown["parameters"] == 4096 * 4096 * 4
        assert memory.breakdown["gradients"] == 4096 * 4096 * 4
        assert memory.breakdown["accumulators"] == 4096 * 4096 * 4
        assert memory.breakdown["optimizer_state"] == 4096 * 4096 * 4
        assert memory.consumers[0].module.startswith("layers.")
    totals = [m.total for m in report.memory]
    assert max(totals) / min(totals) < 1.1
    # Earlier stages keep activations for the micro-batches in flight.
    stash = [m.breakdown["stash"] for m in report.memory]
    assert stash[0] > stash[1] > stash[2] > stash[3] == 0
    text = str(report)
    assert "IPU3" in text and "pipelined" in text


def _mk1_model(check=None):
    """A 100 MB weight trained with Adam: weight, gradient and two moments,
    400 MB, more than a Mk1 IPU's 319 MB."""
    opts = poptorch.Options()
    opts.Simulator.ipuVersion(1)
    if check is not None:
        opts.Simulator.memoryCheck(check)
    wrapped = SumLoss(5000, 5000, bias=False)
    return poptorch.trainingModel(wrapped, opts,
                                  torch.optim.Adam(wrapped.parameters()))


def test_warn_is_the_default_it_logs_and_runs(log_records):
    model = _mk1_model()
    out, _ = model(torch.ones(1, 5000))
    assert out.shape == (1, 5000)
    assert any("Out of memory on IPU0 (Mk1 GC2)" in r.getMessage() and
               "linear:" in r.getMessage() for r in log_records)


def test_off_is_silent(log_records):
    model = _mk1_model("off")
    model(torch.ones(1, 5000))
    assert not any("Out of memory" in r.getMessage() for r in log_records)
    assert not model.simulationReport().fits


# --- Bubble fraction ---------------------------------------------------------

@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("accumulation", [7, 8, 16, 64])
def test_balanced_pipeline_bubble_is_the_closed_form(stages, accumulation):
    times = [StageTime(i, ipu=i, forward=1.0, backward=2.0)
             for i in range(stages)]
    plan = pipelined(times, accumulation, training=True)
    closed = (stages - 1) / (accumulation + stages - 1)
    assert plan.bubble_fraction == pytest.approx(closed, rel=1e-12)
    # PopART's lock-step pipeline of 2F - 1 stages takes (M + F - 1)(f + b).
    assert plan.makespan == pytest.approx((accumulation + stages - 1) * 3.0)
    # Inference pipelines over the device iterations: F stages.
    plan = pipelined(times, accumulation, training=False)
    assert plan.bubble_fraction == pytest.approx(closed, rel=1e-12)


def test_sharded_stages_run_one_after_the_other():
    times = [StageTime(i, ipu=i, forward=1.0, backward=2.0) for i in range(3)]
    plan = sharded(times, 4, training=True)
    assert plan.makespan == 4 * 3 * 3.0
    busy = {}
    for bar in plan.bars:
        busy[bar.ipu] = busy.get(bar.ipu, 0) + bar.end - bar.start
    assert busy == {0: 12.0, 1: 12.0, 2: 12.0}


class Balanced(torch.nn.Module):
    """Four identical blocks on four IPUs. Each block maps a narrow
    activation to a wide one and back, so that its compute (a 2048 x 2048
    product) dwarfs what crosses an IPU-Link or the host link."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.Linear(2, 2048, bias=False),
            torch.nn.Linear(2048, 2048, bias=False),
            torch.nn.Linear(2048, 2, bias=False)) for _ in range(4))
        for ipu, block in enumerate(self.blocks):
            poptorch.BeginBlock(block, f"block{ipu}", ipu_id=ipu)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x, poptorch.identity_loss(x.sum(), reduction="none")


@pytest.mark.parametrize("accumulation", [7, 12, 32])
def test_pipelined_model_bubble_and_gantt(accumulation):
    model = Balanced()
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(accumulation)
    ipu_model = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.01))
    ipu_model.compile(torch.randn(512 * accumulation, 2))
    report = ipu_model.simulationReport()
    forward_stages = len(report.stages)
    assert forward_stages == 4
    closed = (forward_stages - 1) / (accumulation + forward_stages - 1)
    # The closed form holds for equal stages; these differ by the host
    # transfer of the input and the loss, a fraction ``imbalance`` of a
    # stage's time, which can move the bubble by no more than that.
    work = [s.forward_total + s.backward_total for s in report.stages]
    imbalance = (max(work) - min(work)) / max(work)
    assert imbalance < 0.02
    assert abs(report.bubble_fraction - closed) <= imbalance
    # The Gantt chart shows it: idle IPU time over the pipeline's span.
    bars = [b for b in report.gantt if b.kind not in ("optimizer",
                                                        "all-reduce")]
    span = max(b.end for b in bars)
    busy = sum(b.end - b.start for b in bars)
    assert 1 - busy / (4 * span) == pytest.approx(report.bubble_fraction)
    # Each IPU works on every micro-batch once forward and once backward
    # (the last IPU's fused stage once), and starts only once its
    # predecessor has finished the first micro-batch.
    for ipu in range(4):
        own = sorted((b for b in bars if b.ipu == ipu),
                     key=lambda b: b.start)
        assert len(own) == (accumulation if ipu == 3 else 2 * accumulation)
        if ipu:
            previous = min(b.end for b in bars if b.ipu == ipu - 1)
            assert own[0].start >= previous
