"""Annotations and strategies as the PopTorch user guide describes them
(issue 13, item 7): blocks that return to an earlier IPU, AutoIncrement,
removeBlocks, BeginBlock on copied or saved models, numeric user ids.

Results of models that compile are compared with the eager model.
"""
import copy
import io
import re

import pytest
import torch

import poptorch


class ThereAndBack(torch.nn.Module):
    """Blocks on IPUs 0 -> 1 -> 0."""

    def __init__(self, user_ids=(None, None, None)):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.c = torch.nn.Linear(4, 4)
        for layer, ipu, user_id in zip((self.a, self.b, self.c), (0, 1, 0),
                                       user_ids):
            poptorch.BeginBlock(layer, user_id=user_id, ipu_id=ipu)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


STAGE_ORDER = "Pipeline stages must not decrease along the model"


def _options(strategy=None, device_iterations=4):
    opts = poptorch.Options().deviceIterations(device_iterations)
    if strategy is not None:
        opts.setExecutionStrategy(strategy)
    return opts


def _plain_reference(model, x):
    reference = copy.deepcopy(model)
    poptorch.removeBlocks(reference)
    return reference(x)


def test_same_as_ipu_returning_to_an_earlier_ipu_is_a_compile_error():
    x = torch.randn(8, 4)
    model = poptorch.inferenceModel(ThereAndBack(), _options())
    with pytest.raises(poptorch.Error, match=STAGE_ORDER) as info:
        model.compile(x)
    assert "AutoStage.AutoIncrement" in str(info.value)
    with pytest.raises(poptorch.Error, match=STAGE_ORDER):
        poptorch.inferenceModel(ThereAndBack(), _options())(x)


def test_auto_increment_pipelines_the_same_model():
    torch.manual_seed(0)
    model = ThereAndBack()
    x = torch.randn(8, 4)
    strategy = poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement)
    out = poptorch.inferenceModel(model, _options(strategy))(x)
    torch.testing.assert_close(out, _plain_reference(model, x))


def test_auto_increment_gives_each_block_its_own_stage():
    # Three blocks: three forward stages, so training needs G >= 5 (the
    # spec's rule 2 * stages - 1), with PopTorch's message.
    class WithLoss(ThereAndBack):
        def forward(self, x):
            out = super().forward(x)
            return out, poptorch.identity_loss(out.sum(), "sum")

    opts = _options(
        poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement), 1)
    opts.Training.gradientAccumulation(4)
    training = poptorch.trainingModel(WithLoss(), opts)
    with pytest.raises(poptorch.Error, match=re.escape(
            "number of pipeline stages (5) when using "
            "poptorch.PipelinedExecution. Please note that a model with 3 "
            "pipeline stages in PopTorch will have an additional 2 stages "
            "when training.")):
        training.compile(torch.randn(4, 4))


def test_remove_blocks_lets_the_model_compile_unannotated():
    torch.manual_seed(0)
    model = ThereAndBack()
    poptorch.removeBlocks(model)
    x = torch.randn(8, 4)
    out = poptorch.inferenceModel(model, _options())(x)
    torch.testing.assert_close(out, model(x))
    assert not any(m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("duplicate", ["deepcopy", "torch.save"])
def test_begin_block_survives_copies_and_saving(duplicate):
    model = ThereAndBack()
    if duplicate == "deepcopy":
        twin = copy.deepcopy(model)
    else:
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        twin = torch.load(buffer, weights_only=False)
    x = torch.randn(8, 4)
    # The copy's blocks are live: SameAsIpu rejects them as for the original.
    with pytest.raises(poptorch.Error, match=STAGE_ORDER):
        poptorch.inferenceModel(twin, _options()).compile(x)
    strategy = poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement)
    out = poptorch.inferenceModel(twin, _options(strategy))(x)
    torch.testing.assert_close(out, _plain_reference(model, x))


def test_numeric_user_ids_name_blocks_for_explicit_stages():
    torch.manual_seed(0)
    model = ThereAndBack(user_ids=(0, 1, 2))
    strategy = poptorch.PipelinedExecution(
        poptorch.Stage("0").ipu(0), poptorch.Stage("1").ipu(1),
        poptorch.Stage("2").ipu(0))
    x = torch.randn(8, 4)
    out = poptorch.inferenceModel(model, _options(strategy))(x)
    torch.testing.assert_close(out, _plain_reference(model, x))
