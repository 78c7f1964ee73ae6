"""Random ops on the simulated IPU: dropout's host form (uniform numbers
against the keep probability, ``passes/dropout_masks.py``) computes what
PyTorch's dropout computes, and ``interpret`` and ``compile`` draw one
stream from the device generator (``fallback_random``)."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import poptorch
from poptorch_core._executor.backends.passes.dropout_masks import (
    has_dropout, rewrite_dropout)


def _rewritten(p, x, train=True):
    def drop(t):
        return F.dropout(t, p, training=train)
    gm = make_fx(drop, pre_dispatch=True)(x)
    count = rewrite_dropout(gm.graph)
    gm.recompile()
    return gm, count


@pytest.mark.parametrize("p", [0.1, 0.5, 0.6])
def test_kept_values_and_gradient_are_pytorch_s(p):
    torch.manual_seed(0)
    x = (torch.rand(64, 512) + 0.5).requires_grad_()
    gm, count = _rewritten(p, x.detach())
    assert count == 1
    out = gm(x)
    kept = out != 0
    # PyTorch's CPU dropout: x * (bernoulli(1 - p) / (1 - p)).
    noise = kept.float() / (1 - p)
    assert torch.equal(out, x.detach() * noise)
    out.sum().backward()
    assert torch.equal(x.grad, noise)
    # 32768 draws: the kept share is within 5 standard deviations of 1 - p.
    sd = (p * (1 - p) / kept.numel()) ** 0.5
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * sd


def test_float16_keeps_its_dtype_and_the_exact_probability():
    torch.manual_seed(1)
    x = torch.ones(256, 256, dtype=torch.float16)
    gm, _ = _rewritten(0.6, x)
    out = gm(x)
    assert out.dtype == torch.float16
    kept = (out != 0).float().mean().item()
    assert abs(kept - 0.4) < 5 * (0.24 / out.numel()) ** 0.5
    assert torch.equal(out[out != 0],
                       torch.full_like(out[out != 0], 1 / 0.4))


@pytest.mark.parametrize("p, train", [(0.0, True), (1.0, True),
                                      (0.5, False)])
def test_other_dropouts_are_left_to_aten(p, train):
    x = torch.randn(8, 8)
    gm, count = _rewritten(p, x, train)
    assert count == 0 and not has_dropout(gm.graph)
    torch.testing.assert_close(gm(x), F.dropout(x, p, training=train))


class _Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x) + torch.rand_like(x)
        h = F.dropout(h, 0.3, self.training)
        return h, poptorch.identity_loss(h.sum(), reduction="none")


def _outputs(backend, seed, calls=3):
    torch.manual_seed(0)
    model = _Noisy()
    opts = poptorch.Options().randomSeed(seed)
    opts.Simulator.backend(backend)
    ipu = poptorch.trainingModel(model, opts, poptorch.optim.SGD(
        model.parameters(), lr=0.1))
    x = torch.randn(16, 8)
    return [ipu(x)[0] for _ in range(calls)]


def test_backends_draw_one_stream_from_the_device_generator():
    interpret, compiled = _outputs("interpret", 5), _outputs("compile", 5)
    for a, b in zip(interpret, compiled):
        # The same masks and uniform numbers; the values agree to float
        # precision (inductor may order a product's factors otherwise).
        assert torch.equal(a == 0, b == 0)
        torch.testing.assert_close(a, b)
    assert not torch.equal(interpret[0] == 0, interpret[1] == 0)
    again = _outputs("interpret", 5)
    assert all(torch.equal(a, b) for a, b in zip(interpret, again))
    other_seed = _outputs("interpret", 6)
    assert not torch.equal(interpret[0], other_seed[0])


def test_a_model_drawing_uniform_numbers_computes_the_same_on_both_backends():
    class Uniform(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.lin(x) + torch.rand_like(x)
            return h, poptorch.identity_loss(h.sum(), reduction="none")

    outs = {}
    for backend in ("interpret", "compile"):
        torch.manual_seed(0)
        model = Uniform()
        opts = poptorch.Options().randomSeed(3)
        opts.Simulator.backend(backend)
        ipu = poptorch.trainingModel(model, opts, poptorch.optim.SGD(
            model.parameters(), lr=0.1))
        x = torch.randn(16, 8)
        outs[backend] = [ipu(x)[0] for _ in range(3)]
    for a, b in zip(outs["interpret"], outs["compile"]):
        assert torch.equal(a, b)
