"""TrainingStepper trains a CPU copy and a simulated-IPU copy side by side
and fails when they diverge."""
import pytest
import torch

import poptorch
from poptorch_geometric import TrainingStepper
from poptorch_geometric._coverage import cases_conv
from poptorch_geometric._coverage.data import make_batches
from poptorch_geometric._coverage.probe import Probe


class Regression(torch.nn.Module):
    def __init__(self, drift=0.0):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
        self.drift = drift

    def forward(self, x, y):
        out = self.lin(x)
        if poptorch.isRunningOnIpu():
            out = out + self.drift   # differs only on the simulated IPU
        return out, torch.nn.functional.mse_loss(out, y)


def _batch():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(8, 4, generator=gen), torch.randn(8, 2, generator=gen)


def test_same_model_trains_the_same():
    stepper = TrainingStepper(Regression(), lr=0.05)
    assert type(stepper.optimizer) is poptorch.optim.Adam
    before = [p.detach().clone() for p in stepper.cpu_model.parameters()]
    stepper.run(4, _batch())
    after = list(stepper.cpu_model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before))
    stepper.run_inference(_batch())


def test_a_model_that_differs_on_the_ipu_fails():
    stepper = TrainingStepper(Regression(drift=0.01), lr=0.05,
                              optimizer=torch.optim.SGD)
    with pytest.raises(AssertionError, match="Output of step 0"):
        stepper.run(2, _batch())


def test_padded_ipu_batch_against_unpadded_cpu_batch():
    pair = make_batches(seed=0)
    case = next(c for c in cases_conv.CONV_CASES if c.name == "GATConv")
    torch.manual_seed(0)
    probe = Probe(case)
    weight = torch.randn(pair.padded.num_nodes, 16)
    weight[pair.plain.num_nodes:] = 0
    stepper = TrainingStepper(probe, lr=0.01, optimizer=torch.optim.SGD,
                              rtol=1e-4, atol=1e-5)
    stepper.run(3, (pair.plain, weight[:pair.plain.num_nodes]),
                (pair.padded, weight))


def test_bad_calls_raise_clear_errors():
    stepper = TrainingStepper(Regression())
    with pytest.raises(TypeError, match="num_steps, batch"):
        stepper.run(1)
    with pytest.raises(NotImplementedError, match="GPU"):
        stepper.benchmark(1, _batch(), devices=("gpu", ))

    class NoParameters(torch.nn.Module):
        def forward(self, x, y):
            return x, poptorch.identity_loss(x.sum(), reduction="none")
    with pytest.raises(ValueError, match="parameters"):
        TrainingStepper(NoParameters()).run(1, _batch())


def test_benchmark_times_the_requested_devices():
    times = TrainingStepper(Regression()).benchmark(2, _batch(),
                                                    devices=("ipu", "cpu"))
    assert set(times) == {"ipu_time", "cpu_time"}
    assert all(t > 0 for t in times.values())
