"""The parts of one call that sit between features: gradient anchors under
accumulation, replication and loss scaling, losses with no reduction, and
inputs modified in place by replicas that share an input group. References
are eager PyTorch."""
import copy

import pytest
import torch

import poptorch
from ._eager import micro_batch
from ._models import MLP


@pytest.mark.parametrize("reduction", [poptorch.ReductionType.Mean,
                                       poptorch.ReductionType.Sum])
def test_anchored_gradient_is_the_reduced_unscaled_gradient(reduction):
    """``Gradient___<name>`` holds what the last optimizer step used: the
    gradients of the last device iteration's G x R micro-batches, summed,
    divided by G x R for Mean, with the loss scaling undone."""
    D, G, R = 2, 2, 2
    torch.manual_seed(0)
    model = MLP()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
    opts.Training.gradientAccumulation(G)
    opts.Training.accumulationAndReplicationReductionType(reduction)
    opts.anchorTensor("grad", "Gradient___fc1.weight")
    ipu = poptorch.trainingModel(model, opts, poptorch.optim.SGD(
        model.parameters(), lr=0.0, loss_scaling=8.0))
    x, y = torch.randn(2 * D * G * R, 4), torch.randn(2 * D * G * R, 3)
    ipu(x, y)
    # lr=0: every iteration sees the initial weights.
    last = range((D - 1) * G * R, D * G * R)
    for i in last:
        reference(*micro_batch((x, y), i, D * G * R))[1].backward()
    expected = reference.fc1.weight.grad
    if reduction == poptorch.ReductionType.Mean:
        expected = expected / (G * R)
    torch.testing.assert_close(ipu.getAnchoredTensor("grad"), expected)


class _PerSampleLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, x, y):
        out = self.fc(x)
        loss = ((out - y)**2).squeeze(1)
        return out, poptorch.identity_loss(loss, reduction="none")


def test_unreduced_loss_back_propagates_ones():
    """A loss with ``reduction="none"`` trains on the sum of its values."""
    torch.manual_seed(1)
    model = _PerSampleLoss()
    reference = copy.deepcopy(model)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    ipu = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    _, loss = ipu(x, y)
    for i in range(2):
        out = reference.fc(micro_batch((x, y), i, 2)[0])
        ((out - micro_batch((x, y), i, 2)[1])**2).sum().div(2).backward()
    ref_opt.step()
    assert loss.shape == (4,)  # Final: the last micro-batch, unreduced
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


class _AddsInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x, y):
        x += 1.0
        out = self.fc(x)
        return out, torch.nn.functional.mse_loss(out, y)


@pytest.mark.parametrize("cgt", [poptorch.CommGroupType.Consecutive,
                                 poptorch.CommGroupType.Orthogonal])
def test_replicas_of_an_input_group_all_see_unmodified_inputs(cgt):
    """With 4 replicas in 2 input groups and a model that adds 1 to its
    input in place, every replica computes on the data as given (the
    outputs equal the eager model's on ``x + 1``), and the caller's tensor
    receives the modification once."""
    torch.manual_seed(2)
    model = _AddsInPlace()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().replicationFactor(4)
    opts.inputReplicaGrouping(2, cgt)
    opts.outputMode(poptorch.OutputMode.All)
    ipu = poptorch.inferenceModel(model, opts)
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    original = x.clone()
    out, _ = ipu(x, y)
    groups = [0, 0, 1, 1] if cgt == poptorch.CommGroupType.Consecutive \
        else [0, 1, 0, 1]
    expected = torch.cat([reference.fc(original[g:g + 1] + 1.0)
                          for g in groups]).detach()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, original + 1.0)
