"""Blocks and pipelining rules on the simulated IPU (spec 7.1, 7.4, 7.5)."""
import copy

import pytest
import torch

import poptorch


class FourStages(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4)
                                          for _ in range(4))
        for ipu, layer in enumerate(self.layers):
            poptorch.BeginBlock(layer, ipu_id=ipu)

    def forward(self, x, y):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x, torch.nn.functional.mse_loss(x, y)


def test_pipelined_training_needs_enough_accumulation_steps():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    model = poptorch.trainingModel(FourStages(), opts)
    with pytest.raises(poptorch.poptorch_core.Error, match=r"poptorch.Options"
                       r"\(\).Training.gradientAccumulation must be greater "
                       r"than or equal to the number of pipeline stages \(7\) "
                       r"when using poptorch.PipelinedExecution. Please note "
                       r"that a model with 4 pipeline stages in PopTorch will "
                       r"have an additional 3 stages when training."):
        model(torch.randn(12, 4), torch.randn(12, 4))


def test_pipelined_inference_needs_enough_device_iterations():
    opts = poptorch.Options().deviceIterations(2)
    model = poptorch.inferenceModel(FourStages(), opts)
    with pytest.raises(poptorch.Error, match=r"deviceIterations must be "
                       r"greater than or equal to the number of pipeline "
                       r"stages \(4\)"):
        model(torch.randn(4, 4), torch.randn(4, 4))


@pytest.mark.parametrize("strategy", [
    poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu),
    poptorch.ShardedExecution(poptorch.AutoStage.SameAsIpu),
])
def test_annotated_model_computes_what_the_plain_model_computes(strategy):
    torch.manual_seed(0)
    model = FourStages()
    reference = copy.deepcopy(model)
    poptorch.removeBlocks(reference)
    opts = poptorch.Options().setExecutionStrategy(strategy)
    opts.Training.gradientAccumulation(8)
    ipu = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = torch.randn(16, 4), torch.randn(16, 4)
    ipu(x, y)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for xs, ys in zip(x.chunk(8), y.chunk(8)):
        (reference(xs, ys)[1] / 8).backward()
    ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


def test_ops_after_a_block_scope_need_a_block():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            with poptorch.Block(ipu_id=0):
                x = self.fc(x)
            return x * 2

    with pytest.raises(poptorch.Error, match="No active Block, all the ops "
                       "must belong to a Block"):
        poptorch.inferenceModel(Model())(torch.ones(1, 2))


def test_unknown_block_in_strategy():
    opts = poptorch.Options().setExecutionStrategy(
        poptorch.PipelinedExecution("nope"))
    with pytest.raises(AssertionError, match="Unknown Block"):
        poptorch.inferenceModel(FourStages(), opts)(torch.ones(1, 4),
                                                    torch.ones(1, 4))


def test_ipu_count_must_be_a_power_of_two():
    opts = poptorch.Options().replicationFactor(3)
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    with pytest.raises(poptorch.Error, match="The model specifies the use of "
                       "3 IPUs, however PopTorch must reserve a minimum of 4"):
        model(torch.ones(3, 2))
    opts = poptorch.Options().replicationFactor(3).autoRoundNumIPUs(True)
    out = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)(torch.ones(3, 2))
    assert out.shape == (3, 2)
