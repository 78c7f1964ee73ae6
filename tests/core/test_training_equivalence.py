"""Training on the simulated IPU equals an independent plain-PyTorch loop.

The reference follows the spec's definition (4.5): per device iteration,
forward and backward of every accumulation step and replica, gradients
reduced by mean (or sum) over G x R, one optimizer step; returned outputs
are the forward values before that iteration's update.
"""
import copy

import pytest
import torch

import poptorch
from ._eager import train_call
from ._models import GIN, MLP, graph_batch
from ._reference_optim import LambReference, TFRMSpropReference

GRID = [(d, g, r) for d in (1, 3) for g in (1, 2, 4) for r in (1, 2)]


def _reference_calls(model, optimizer, inputs, calls, D, G, R, mean):
    """Returns the per-call outputs of a plain PyTorch loop."""
    results = []
    for _ in range(calls):
        chunks = [t.chunk(D * G * R, dim=0) for t in inputs]
        outs = []
        for d in range(D):
            optimizer.zero_grad()
            for g in range(G):
                for r in range(R):
                    i = (d * G + g) * R + r
                    out, loss = model(*[c[i] for c in chunks])
                    (loss / (G * R) if mean else loss).backward()
                    outs.append((out.detach(), loss.detach()))
            optimizer.step()
        results.append(outs)
    return results


def _mlp_inputs(micro, D, G, R, gen):
    n = micro * D * G * R
    return (torch.randn(n, 4, generator=gen), torch.randn(n, 3, generator=gen))


def _gin_inputs(D, G, R, gen):
    return graph_batch(batches=D * G * R, generator=gen)


@pytest.mark.parametrize("D,G,R", GRID)
@pytest.mark.parametrize("reduction", [poptorch.ReductionType.Mean,
                                       poptorch.ReductionType.Sum])
@pytest.mark.parametrize("model_kind", ["mlp", "gin"])
def test_weights_match_reference(D, G, R, reduction, model_kind):
    gen = torch.Generator().manual_seed(D * 100 + G * 10 + R)
    model = MLP() if model_kind == "mlp" else GIN()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
    opts.Training.gradientAccumulation(G)
    opts.Training.accumulationAndReplicationReductionType(reduction)
    opts.outputMode(poptorch.OutputMode.All)
    # Summed gradients are G x R times larger: keep the step size stable.
    lr = 0.01 if reduction == poptorch.ReductionType.Mean else 0.01 / (G * R)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.5)
    ipu_model = poptorch.trainingModel(model, opts, optimizer)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr, momentum=0.5)

    calls = 3
    inputs = [(_mlp_inputs(2, D, G, R, gen) if model_kind == "mlp"
               else _gin_inputs(D, G, R, gen)) for _ in range(calls)]
    ipu_results = [ipu_model(*x) for x in inputs]
    mean = reduction == poptorch.ReductionType.Mean
    ref_results = [_reference_calls(reference, ref_opt, x, 1, D, G, R,
                                    mean)[0] for x in inputs]

    for (out, loss), ref in zip(ipu_results, ref_results):
        torch.testing.assert_close(out, torch.cat([o for o, _ in ref]),
                                   rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(loss.reshape(-1),
                                   torch.stack([l for _, l in ref]),
                                   rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(),
                                 reference.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("optimizer_class,kwargs", [
    (torch.optim.Adam, {"lr": 0.01}),
    (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
    (poptorch.optim.SGD, {"lr": 0.05, "momentum": 0.5}),
    (poptorch.optim.Adam, {"lr": 0.01}),
])
def test_optimizers_match_torch(optimizer_class, kwargs):
    torch.manual_seed(1)
    model = GIN()
    reference = copy.deepcopy(model)
    ipu_model = poptorch.trainingModel(
        model, optimizer=optimizer_class(model.parameters(), **kwargs))
    torch_class = {poptorch.optim.SGD: torch.optim.SGD,
                   poptorch.optim.Adam: torch.optim.Adam}.get(
                       optimizer_class, optimizer_class)
    ref_opt = torch_class(reference.parameters(), **kwargs)
    for _ in range(4):
        batch = graph_batch()
        _, loss = ipu_model(*batch)
        ref_opt.zero_grad()
        _, ref_loss = reference(*batch)
        ref_loss.backward()
        ref_opt.step()
        torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-4,
                                   atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


P = poptorch.optim
RMSPROP_AND_LAMB = {
    "rmsprop_centered_momentum": (
        lambda p: P.RMSprop(p, lr=0.01, alpha=0.9, momentum=0.5,
                            centered=True, weight_decay=0.01),
        lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, momentum=0.5,
                                      centered=True, weight_decay=0.01)),
    "rmsprop_native": (lambda p: torch.optim.RMSprop(p, lr=0.01),
                       lambda p: torch.optim.RMSprop(p, lr=0.01)),
    "rmsprop_tf": (
        lambda p: P.RMSprop(p, lr=0.01, alpha=0.9, eps=0.5, momentum=0.5,
                            use_tf_variant=True),
        lambda p: TFRMSpropReference(p, lr=0.01, alpha=0.9, eps=0.5,
                                     momentum=0.5)),
    "rmsprop_tf_centered": (
        lambda p: P.RMSprop(p, lr=0.01, alpha=0.9, eps=0.5, centered=True,
                            use_tf_variant=True),
        lambda p: TFRMSpropReference(p, lr=0.01, alpha=0.9, eps=0.5,
                                     centered=True)),
    "lamb": (lambda p: P.LAMB(p, lr=0.01),
             lambda p: LambReference(p, lr=0.01)),
    "lamb_no_bias_clipped_norm": (
        lambda p: P.LAMB(p, lr=0.02, bias_correction=False,
                         max_weight_norm=0.5, betas=(0.8, 0.9)),
        lambda p: LambReference(p, lr=0.02, bias_correction=False,
                                max_weight_norm=0.5, betas=(0.8, 0.9))),
}


@pytest.mark.parametrize("config", sorted(RMSPROP_AND_LAMB))
def test_rmsprop_and_lamb_through_training_model(config):
    """Two device iterations of two accumulation steps, three calls,
    against torch's RMSprop or a reference written from the definition."""
    ipu_factory, ref_factory = RMSPROP_AND_LAMB[config]
    torch.manual_seed(7)
    model = MLP()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(2)
    ipu_model = poptorch.trainingModel(model, opts,
                                       ipu_factory(model.parameters()))
    ref_opt = ref_factory(reference.parameters())
    gen = torch.Generator().manual_seed(8)
    for _ in range(3):
        x, y = torch.randn(8, 4, generator=gen), torch.randn(8, 3,
                                                            generator=gen)
        _, loss = ipu_model(x, y)
        (_, ref_loss), = train_call(reference, ref_opt, (x, y), 2, 2)[-1][-1]
        torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


def test_batchnorm_buffers_follow_micro_batch_order():
    """Running statistics are updated in every micro-batch forward, in
    [D][G] order, and gradients use loss / G (spec 4.5)."""
    torch.manual_seed(2)
    model = GIN(batch_norm=True)
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(2)
    ipu_model = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    batch = graph_batch(batches=4)
    ipu_model(*batch)
    _reference_calls(reference, ref_opt, batch, 1, 2, 2, 1, mean=True)
    for (name, b), (_, c) in zip(model.named_buffers(),
                                 reference.named_buffers()):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-6, msg=name)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_unbroadcast_buffers_are_per_replica():
    """With broadcastBuffers(False) each replica keeps its own running
    statistics; the host sees replica 0's."""
    torch.manual_seed(3)
    model = GIN(batch_norm=True)
    replica0 = copy.deepcopy(model)
    opts = poptorch.Options().replicationFactor(2).broadcastBuffers(False)
    ipu_model = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.0))
    batch = graph_batch(batches=2)
    ipu_model(*batch)
    replica0(*[t.chunk(2)[0] for t in batch])
    torch.testing.assert_close(model.conv1.nn[1].running_mean,
                               replica0.conv1.nn[1].running_mean)


def test_broadcast_buffers_error():
    model = GIN(batch_norm=True)
    opts = poptorch.Options().replicationFactor(2)
    ipu_model = poptorch.trainingModel(model, opts)
    with pytest.raises(poptorch.Error, match="PopTorch does not support "
                       "broadcasting buffers"):
        ipu_model(*graph_batch(batches=2))


def test_ten_iterations_once_equal_five_twice():
    torch.manual_seed(4)
    model_a, model_b = MLP(), MLP()
    model_b.load_state_dict(model_a.state_dict())
    x, y = torch.randn(20, 4), torch.randn(20, 3)
    a = poptorch.trainingModel(model_a, poptorch.Options().deviceIterations(10),
                               torch.optim.SGD(model_a.parameters(), lr=0.1))
    b = poptorch.trainingModel(model_b, poptorch.Options().deviceIterations(5),
                               torch.optim.SGD(model_b.parameters(), lr=0.1))
    a(x, y)
    b(x[:10], y[:10])
    b(x[10:], y[10:])
    for p, q in zip(model_a.parameters(), model_b.parameters()):
        torch.testing.assert_close(p, q)


@pytest.mark.parametrize("reduction,lr", [(poptorch.ReductionType.Mean, 0.01),
                                          (poptorch.ReductionType.Sum, 0.02)])
def test_accumulation_reduction_vs_learning_rate(reduction, lr):
    """G=2 with Mean and lr equals G=1 with lr; with Sum it equals 2 * lr
    (spec 4.5), for two identical micro-batches."""
    torch.manual_seed(5)
    model_a, model_b = MLP(), MLP()
    model_b.load_state_dict(model_a.state_dict())
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    opts.Training.accumulationAndReplicationReductionType(reduction)
    a = poptorch.trainingModel(model_a, opts,
                               torch.optim.SGD(model_a.parameters(), lr=0.01))
    b = poptorch.trainingModel(model_b, None,
                               torch.optim.SGD(model_b.parameters(), lr=lr))
    a(torch.cat([x, x]), torch.cat([y, y]))
    b(x, y)
    for p, q in zip(model_a.parameters(), model_b.parameters()):
        torch.testing.assert_close(p, q)


class _EmbeddingModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.atoms = torch.nn.Embedding(10, 4)
        self.padded = torch.nn.Embedding(10, 4, padding_idx=0)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, idx, y):
        out = self.head(self.atoms(idx) + self.padded(idx)).sum(1)
        return out, torch.nn.functional.mse_loss(out, y)


def test_embeddings_train_like_eager():
    """Embedding lookups are rewritten to row gathers in the graph; the
    gradients (with and without padding_idx) must not change."""
    torch.manual_seed(6)
    model = _EmbeddingModel()
    reference = copy.deepcopy(model)
    ipu_model = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        idx, y = torch.randint(0, 10, (8, 5)), torch.randn(8, 1)
        ipu_model(idx, y)
        ref_opt.zero_grad()
        reference(idx, y)[1].backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)
    graph = ipu_model._state.program.captured.graph_module.graph
    targets = {n.target for n in graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.index_select.default in targets
