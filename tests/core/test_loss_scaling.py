"""Loss scaling through ``trainingModel`` against an eager PyTorch loop.

PopTorch multiplies the final loss by ``loss_scaling`` before backward and
divides the reduced gradients by it before the update, so in float32 the
numerics are those of unscaled training. A factor that is applied on one
side only changes every gradient by that factor: SGD and Adam with weight
decay (the decay term is not scale-invariant) both see it.
"""
import copy

import pytest
import torch

import poptorch
from ._eager import train_call
from ._models import MLP, LinearMSE

FACTORS = [0.25, 2.0, 1024.0]

OPTIMIZERS = {
    "SGD": (poptorch.optim.SGD, torch.optim.SGD,
            {"lr": 0.05, "momentum": 0.5}),
    "Adam": (poptorch.optim.Adam, torch.optim.Adam,
             {"lr": 0.01, "weight_decay": 0.5}),
}


def _train_both(model, ipu_optimizer, ref_optimizer, reference, D, G, R,
                loss_scaling, calls=2, dtype=torch.float32, masters=None):
    opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
    opts.Training.gradientAccumulation(G)
    opts.outputMode(poptorch.OutputMode.All)
    ipu_model = poptorch.trainingModel(model, opts, ipu_optimizer)
    gen = torch.Generator().manual_seed(7)
    for _ in range(calls):
        n = 2 * D * G * R
        x = torch.randn(n, 4, generator=gen).to(dtype)
        y = torch.randn(n, 3, generator=gen).to(dtype)
        _, losses = ipu_model(x, y)
        expected = train_call(reference, ref_optimizer, (x, y), D, G, R,
                              loss_scaling=loss_scaling, masters=masters)
        ref_losses = torch.stack([loss for step in expected
                                  for replica in step
                                  for _, loss in replica])
        # The returned losses are the unscaled forward values.
        torch.testing.assert_close(losses, ref_losses, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_float32_training_is_unchanged_by_loss_scaling(name, factor):
    poptorch_class, torch_class, kwargs = OPTIMIZERS[name]
    torch.manual_seed(0)
    model = MLP()
    reference = copy.deepcopy(model)
    _train_both(model, poptorch_class(model.parameters(), loss_scaling=factor,
                                      **kwargs),
                torch_class(reference.parameters(), **kwargs), reference,
                D=2, G=2, R=2, loss_scaling=factor)
    for (name_, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name_)


def test_loss_scaling_set_on_a_native_torch_optimizer():
    """``optimizer.loss_scaling = s`` on a torch optimizer is honoured."""
    torch.manual_seed(1)
    model = MLP()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    optimizer.loss_scaling = 16.0
    _train_both(model, optimizer,
                torch.optim.SGD(reference.parameters(), lr=0.05), reference,
                D=2, G=2, R=1, loss_scaling=16.0)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("factor", [8.0, 1024.0])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_float16_training_with_loss_scaling(name, factor):
    """A float16 model: the float16 gradients of ``loss * s`` are unscaled
    and the update computed in float32, then stored in float16. With
    moderate gradients and power-of-two factors the scaling is exact."""
    poptorch_class, torch_class, kwargs = OPTIMIZERS[name]
    torch.manual_seed(2)
    model = MLP().half()
    reference = copy.deepcopy(model)
    masters = [torch.nn.Parameter(p.detach().float())
               for p in reference.parameters()]
    _train_both(model, poptorch_class(model.parameters(), loss_scaling=factor,
                                      **kwargs),
                torch_class(masters, **kwargs), reference, D=2, G=2, R=1,
                loss_scaling=factor, dtype=torch.float16, masters=masters)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.dtype == torch.float16
        torch.testing.assert_close(p, q, rtol=2e-3, atol=2e-3)



def test_float16_loss_scaling_keeps_gradients_too_small_for_float16():
    """What loss scaling is for: float16 gradients of about 1e-9 underflow
    to zero, those of ``loss * 16384`` do not, and unscaling them in
    float32 gives the optimizer the true gradient. Adam's step barely
    depends on the gradient's size, so the weights must move by about
    ``lr``, as in the float32 reference."""
    torch.manual_seed(3)
    model = LinearMSE(4, 1, bias=False).half()
    reference = copy.deepcopy(model)
    masters = [torch.nn.Parameter(p.detach().float())
               for p in reference.parameters()]
    kwargs = {"lr": 0.01, "eps": 1e-10}
    ipu_model = poptorch.trainingModel(
        model, optimizer=poptorch.optim.Adam(model.parameters(),
                                             loss_scaling=16384.0, **kwargs))
    gen = torch.Generator().manual_seed(8)
    x = (1e-5 * torch.randn(8, 4, generator=gen)).half()
    y = (1e-4 * torch.randn(8, 1, generator=gen)).half()
    start = reference.fc.weight.detach().clone()
    optimizer = torch.optim.Adam(masters, **kwargs)
    for _ in range(2):
        ipu_model(x, y)
        train_call(reference, optimizer, (x, y), loss_scaling=16384.0,
                   masters=masters)
    moved = (reference.fc.weight - start).abs()
    assert bool((moved > 0.005).all())  # the reference does train
    torch.testing.assert_close(model.fc.weight, reference.fc.weight,
                               rtol=2e-3, atol=2e-3)
