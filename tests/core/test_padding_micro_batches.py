"""Padding-only micro-batches never change the update (issue 45, item 4).

A micro-batch whose inputs a registered parser marks as padding only
(``ICustomArgParser.paddingMask``) runs forward for its outputs but adds
no gradient; ``Mean`` divides by the number of real micro-batches, and a
device iteration without one takes no optimizer step. Every test compares
with eager PyTorch doing the same steps on the real micro-batches only
(``_padding.eager_call``, or a loop written out here).
"""
import copy

import pytest
import torch

import poptorch
from poptorch import CommGroupType, VariableRetrievalMode
from poptorch_core._args_parser import paddingMasks
from poptorch_core._executor.micro_batches import BatchLayout
from ._padding import PAD, Net, Rows, eager_call, make_rows, register
from .test_fidelity_half import _upper_share

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


@pytest.fixture(autouse=True)
def _rows_parser():
    register()
    yield
    poptorch.registerCustomArgParser(Rows, None)


def _options(D, G, R, reduction=poptorch.ReductionType.Mean):
    opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
    opts.Training.gradientAccumulation(G)
    opts.Training.accumulationAndReplicationReductionType(reduction)
    return opts.outputMode(poptorch.OutputMode.All)


_OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9,
                                     weight_decay=0.05),
    "adam": lambda p: torch.optim.Adam(p, lr=0.02, weight_decay=0.05),
}


def _train_both(optimizer, D, G, R, padding, calls=2,
                reduction=poptorch.ReductionType.Mean):
    """PopTorch and the eager reference on the same calls; returns both
    models and the per-call outputs of each."""
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    ipu = poptorch.trainingModel(model, _options(D, G, R, reduction),
                                 _OPTIMIZERS[optimizer](model.parameters()))
    ref_opt = _OPTIMIZERS[optimizer](reference.parameters())
    gen = torch.Generator().manual_seed(1)
    got, expected = [], []
    for _ in range(calls):
        rows = make_rows(D * G * R, padding, generator=gen)
        got.append(ipu(rows)[0])
        expected.append(torch.cat(eager_call(
            reference, ref_opt, rows, D, G, R,
            mean=reduction == poptorch.ReductionType.Mean)))
    return model, reference, got, expected


def _assert_same(model, reference, got=(), expected=()):
    for out, ref in zip(got, expected):
        torch.testing.assert_close(out, ref, **TOLERANCE)
    for (name, value), ref in zip(model.named_parameters(),
                                  reference.parameters()):
        torch.testing.assert_close(value.detach(), ref.detach(),
                                   **TOLERANCE, msg=name)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("D, G, R, padding", [
    # One padding micro-batch in the first step, three in the second.
    (2, 4, 1, {3, 5, 6, 7}),
    # The second step's replicas all hold padding: no step at all (no
    # weight decay, no momentum, no Adam step count).
    (2, 1, 4, {4, 5, 6, 7}),
    # Device iterations of 2 x 2: the second is all padding, the third
    # has one padding micro-batch.
    (3, 2, 2, {4, 5, 6, 7, 9}),
], ids=["accumulation", "replication", "combined"])
def test_mean_counts_only_the_real_micro_batches(optimizer, D, G, R,
                                                 padding):
    model, reference, got, expected = _train_both(optimizer, D, G, R,
                                                  padding)
    _assert_same(model, reference, got, expected)


def test_sum_adds_no_gradient_from_padding():
    model, reference, got, expected = _train_both(
        "sgd", 2, 2, 2, {1, 2, 4, 5, 6, 7},
        reduction=poptorch.ReductionType.Sum)
    _assert_same(model, reference, got, expected)


def test_a_call_of_padding_only_leaves_weights_and_state_alone():
    torch.manual_seed(0)
    model = Net()
    before = copy.deepcopy(model.state_dict())
    optimizer = poptorch.optim.Adam(model.parameters(), lr=0.1,
                                    weight_decay=0.1)
    ipu = poptorch.trainingModel(model, _options(2, 2, 1), optimizer)
    out, loss = ipu(make_rows(4, range(4)))
    # Still the forward values: the padding's own loss.
    torch.testing.assert_close(loss, torch.full((4,), float(
        torch.nn.functional.mse_loss(out[:2], torch.full((2, 3), PAD)))),
        rtol=1e-5, atol=0)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    steps = [v for k, v in optimizer.state_dict()["ipu_state"].items()
             if "step" in k.lower()]
    assert steps and all(float(s) == 0 for s in steps), steps


def test_loss_scaling_and_gradient_clipping_see_the_real_mean():
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    D, G, R, padding = 2, 4, 1, {1, 2, 3, 6}
    ipu = poptorch.trainingModel(model, _options(D, G, R), poptorch.optim.SGD(
        model.parameters(), lr=0.5, momentum=0.5, loss_scaling=16.0,
        max_grad_norm=0.05))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5, momentum=0.5)
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):
        rows = make_rows(D * G * R, padding, generator=gen)
        ipu(rows)
        eager_call(reference, ref_opt, rows, D, G, R, clip=0.05)
    _assert_same(model, reference)


class _HalfNet(torch.nn.Module):
    """float16 weights and a tiny gain: gradients that automatic loss
    scaling grows the scale for."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))

    def forward(self, rows):
        out = (self.w * rows.x).sum()
        return out, poptorch.identity_loss(out * 1e-4, "sum")


def test_automatic_loss_scaling_adapts_after_real_steps_only():
    model, loss_scaling = _HalfNet(), 8.0
    opts = poptorch.Options().deviceIterations(3)
    opts.Training.setAutomaticLossScaling(True)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.0,
                                   loss_scaling=loss_scaling)
    ipu = poptorch.trainingModel(model, opts, optimizer)
    ipu(make_rows(3, {1}, micro=1, dtype=torch.float16))
    # PopART's rule, applied after each of the two real steps.
    scale = loss_scaling
    for _ in range(2):
        grad = torch.full((4,), 1e-4 * scale).half()
        scale *= 0.5 if _upper_share(grad) > 1e-7 else 2.0
    factor = float(optimizer.state_dict()["ipu_state"][
        "lossScaleUpdateFactor"])
    assert factor * loss_scaling == scale == 32.0


def test_compiled_adam_in_graph_skips_a_padding_only_iteration():
    """One micro-batch per step on the compile backend: the update runs in
    the compiled graph, except for the padding-only step, which takes
    none."""
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    D, padding = 3, {1}
    opts = _options(D, 1, 1)
    opts.Simulator.backend("compile")
    ipu = poptorch.trainingModel(model, opts, poptorch.optim.Adam(
        model.parameters(), lr=0.02))
    ref_opt = torch.optim.Adam(reference.parameters(), lr=0.02)
    gen = torch.Generator().manual_seed(1)
    got, expected = [], []
    for _ in range(2):
        rows = make_rows(D, padding, generator=gen)
        got.append(ipu(rows)[0])
        expected.append(torch.cat(eager_call(reference, ref_opt, rows, D, 1,
                                             1)))
    _assert_same(model, reference, got, expected)


class _Grouped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(2, 4, 3))  # one per group
        self.b = torch.nn.Parameter(torch.zeros(3))

    def forward(self, rows):
        z = rows.x @ self.W + self.b
        return z, poptorch.identity_loss((z ** 2).mean(), reduction="none")


def test_replica_grouped_weights_average_their_groups_real_micro_batches():
    """R = 4 in consecutive groups of 2, G = 2: group 0 has 2 real
    micro-batches, group 1 has 3; the shared bias averages all 5."""
    torch.manual_seed(0)
    G, R, lr = 2, 4, 0.1
    padding = {1, 5, 6}   # (step 0, replica 1), (1, 1), (1, 2)
    model = _Grouped()
    copies, bias = [w.detach().clone() for w in model.W], torch.zeros(3)
    opts = _options(1, G, R)
    ipu = poptorch.trainingModel(model, opts, torch.optim.SGD(
        model.parameters(), lr=lr))
    ipu.W.replicaGrouping(CommGroupType.Consecutive, 2,
                          VariableRetrievalMode.OnePerGroup)
    rows = make_rows(G * R, padding)
    ipu(rows)
    grads = [torch.zeros_like(c) for c in copies]
    counts, bias_grad = [0, 0], torch.zeros(3)
    for i, (x, real) in enumerate(zip(rows.x.chunk(G * R),
                                      rows.real.chunk(G * R))):
        if not real.any():
            continue
        group = (i % R) // 2
        w = copies[group].clone().requires_grad_()
        b = bias.clone().requires_grad_()
        ((x @ w + b) ** 2).mean().backward()
        grads[group] += w.grad
        bias_grad += b.grad
        counts[group] += 1
    assert counts == [2, 3]
    expected = torch.stack([c - lr * g / n
                            for c, g, n in zip(copies, grads, counts)])
    torch.testing.assert_close(model.W.detach(), expected, **TOLERANCE)
    torch.testing.assert_close(model.b.detach(), -lr * bias_grad / 5,
                               **TOLERANCE)


def test_a_micro_batch_is_padding_only_when_every_mask_says_so():
    first = Rows(torch.zeros(4, 4), torch.zeros(4, 3),
                 torch.tensor([True, False, False, False]))
    second = Rows(torch.zeros(4, 4), torch.zeros(4, 3),
                  torch.tensor([False, False, True, False]))
    structure = ([first, torch.ones(4)], {"other": second})
    masks = paddingMasks(structure)
    assert [m is first.real or m is second.real for m in masks] == [True,
                                                                      True]
    # 4 micro-batches of one row: the first is real in one input, the
    # third in the other.
    layout = BatchLayout(2, 2, 1, 1)
    assert layout.padding_only(masks) == [False, True, False, True]
    assert layout.padding_only([]) is None
    assert paddingMasks([torch.ones(2)]) == []
