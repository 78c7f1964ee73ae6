"""Half precision as on the IPU (issue 13, item 5): implicit float16/float32
casting, loss scaling removed in float32, automatic loss scaling that adapts
and the ``finalLossScale`` anchor.

References are eager PyTorch computations on the same inputs, and PopART's
documented automatic loss scaling rule evaluated in the test.
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import poptorch

FLOAT16_MAX = float(torch.finfo(torch.float16).max)


# --- Implicit casting --------------------------------------------------------------

class HalfNet(torch.nn.Module):
    """Linear, LayerNorm and Conv1d layers, all float16."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.conv = torch.nn.Conv1d(1, 2, 3)
        self.out = torch.nn.Linear(12, 2)

    def forward(self, x):
        h = self.norm(torch.relu(self.fc(x)))
        return self.out(self.conv(h.unsqueeze(1)).flatten(1))


def test_half_model_fed_float32_inputs_computes_in_float32():
    torch.manual_seed(0)
    model = HalfNet().half()
    x = torch.randn(5, 3)
    reference = copy.deepcopy(model).float()   # float16 -> float32 is exact
    out = poptorch.inferenceModel(model)(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, reference(x))


def test_float32_linear_fed_float16_returns_float16():
    # PopTorch's documented quirk: the weights take the activation's dtype.
    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4).half()
    out = poptorch.inferenceModel(linear)(x)
    assert out.dtype == torch.float16
    expected = F.linear(x, linear.weight.half(), linear.bias.half())
    torch.testing.assert_close(out, expected)


def test_float16_batch_norm_on_float32_activations_trains_its_statistics():
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 4)
            self.bn = torch.nn.BatchNorm1d(4).half()

        def forward(self, x):
            out = self.bn(self.fc(x))
            return out, poptorch.identity_loss(out.float().pow(2).mean(),
                                               "mean")

    model = Model()
    reference = copy.deepcopy(model)
    reference.bn.float()
    x = torch.randn(8, 3)
    training = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    _, loss = training(x)
    _, ref_loss = reference(x)
    torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(model.bn.running_mean,
                               reference.bn.running_mean.half())
    torch.testing.assert_close(model.bn.running_var,
                               reference.bn.running_var.half())


def test_index_add_of_float16_source_into_float32():
    class Model(torch.nn.Module):
        def forward(self, x, index):
            out = torch.zeros(3, 2)
            return out.index_add_(0, index, x.half())

    x, index = torch.randn(4, 2), torch.tensor([0, 2, 2, 1])
    out = poptorch.inferenceModel(Model())(x, index)
    expected = torch.zeros(3, 2).index_add_(0, index, x.half().float())
    torch.testing.assert_close(out, expected)


def test_set_partials_type_validation():
    opts = poptorch.Options()
    opts.Precision.setPartialsType(torch.half)
    with pytest.raises(ValueError, match="parameter to setPartialsType should "
                       "be eithertorch.float or torch.half"):
        opts.Precision.setPartialsType(torch.int32)


# --- Loss scaling ----------------------------------------------------------------------

class TinyGradient(torch.nn.Module):
    """float16 weights whose gradient (1e-8) underflows float16."""

    def __init__(self, gain=1e-8):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
        self.gain = gain

    def forward(self, x):
        out = (self.w * x).sum()
        return out, poptorch.identity_loss(out * self.gain, "sum")


def _eager_scaled_step(gain, x, loss_scaling, lr):
    """Reference: fp16 backward of the scaled loss, gradient unscaled in
    float32, SGD update in float32, weights stored back as float16."""
    w = torch.ones(4, dtype=torch.float16, requires_grad=True)
    ((w * x).sum() * gain * loss_scaling).backward()
    grad = w.grad.float() / loss_scaling
    return (w.detach().float() - lr * grad).half()


@pytest.mark.parametrize("loss_scaling", [1.0, 1024.0])
def test_scaled_float16_gradients_are_unscaled_in_float32(loss_scaling):
    x, lr = torch.ones(4, dtype=torch.float16), 1e5
    model = TinyGradient()
    training = poptorch.trainingModel(model, optimizer=poptorch.optim.SGD(
        model.parameters(), lr=lr, loss_scaling=loss_scaling))
    training(x)
    expected = _eager_scaled_step(1e-8, x, loss_scaling, lr)
    torch.testing.assert_close(model.w.detach(), expected)
    # Without scaling the gradient underflows; with it the weights move.
    assert torch.equal(model.w.detach() == 1, torch.full((4,), loss_scaling == 1))


def _upper_share(scaled_grad):
    edge = 0.0625 * FLOAT16_MAX
    g = scaled_grad.float().abs()
    return float(((g >= edge) | ~torch.isfinite(g)).float().mean())


def _als_model(gain, loss_scaling, device_iterations=1):
    model = TinyGradient(gain)
    opts = poptorch.Options().deviceIterations(device_iterations)
    opts.Training.setAutomaticLossScaling(True)
    opts.anchorTensor("scale", "finalLossScale")
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.0,
                                   loss_scaling=loss_scaling)
    return poptorch.trainingModel(model, opts, optimizer), optimizer


@pytest.mark.parametrize("gain, loss_scaling", [(1e-4, 8.0), (1.0, 8192.0)])
def test_automatic_loss_scaling_follows_poparts_rule(gain, loss_scaling):
    x = torch.ones(4, dtype=torch.float16)
    training, optimizer = _als_model(gain, loss_scaling)
    training.compile(x)
    scale = loss_scaling
    for _ in range(4):
        factor = float(optimizer.state_dict()["ipu_state"][
            "lossScaleUpdateFactor"])
        training(x)
        final = float(training.getAnchoredTensor("scale"))
        # The spec's relation: factor read before a step x initial scale.
        assert final == pytest.approx(factor * loss_scaling)
        assert final == pytest.approx(scale)
        # PopART's rule on this step's float16 gradient (gain * scale).
        grad = torch.full((4,), gain * scale).half()
        scale *= 0.5 if _upper_share(grad) > 1e-7 else 2.0
    assert scale != loss_scaling


def test_automatic_loss_scaling_keeps_float32_models_at_factor_one():
    model = torch.nn.Linear(2, 1)
    opts = poptorch.Options()
    opts.Training.setAutomaticLossScaling(True)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1,
                                   loss_scaling=4.0)

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return poptorch.identity_loss(self.model(x).sum(), "sum")

    training = poptorch.trainingModel(Loss(), opts, optimizer)
    for _ in range(3):
        training(torch.randn(3, 2))
    state = optimizer.state_dict()["ipu_state"]
    assert float(state["lossScaleUpdateFactor"]) == 1.0


def test_automatic_loss_scaling_does_not_change_the_update():
    # Scaling by powers of two is exact: the weights follow the unscaled
    # eager update while the scale grows.
    x, lr = torch.full((4,), 0.5, dtype=torch.float16), 0.25
    model = TinyGradient(1e-2)
    opts = poptorch.Options().deviceIterations(3)
    opts.Training.setAutomaticLossScaling(True)
    training = poptorch.trainingModel(model, opts, poptorch.optim.SGD(
        model.parameters(), lr=lr, loss_scaling=2.0))
    training(x.repeat(3))
    w = torch.ones(4, dtype=torch.float16)
    for _ in range(3):
        grad = (x * 1e-2).float()   # d(sum(w * x) * gain) / dw
        w = (w.float() - lr * grad).half()
    torch.testing.assert_close(model.w.detach(), w)
