"""The ``compile`` backend: torch.compile with static shapes, once."""
import copy

import pytest
import torch

import poptorch
from ._eager import train_call
from ._models import GIN, MLP, graph_batch


def test_compiles_once_and_matches_interpret():
    torch.manual_seed(0)
    model = MLP()
    twin = copy.deepcopy(model)
    runs = {}
    for backend, m in (("compile", model), ("interpret", twin)):
        opts = poptorch.Options().deviceIterations(2)
        opts.Simulator.backend(backend)
        ipu = poptorch.trainingModel(
            m, opts, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))
        gen = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(50):
            _, loss = ipu(torch.randn(8, 4, generator=gen),
                          torch.randn(8, 3, generator=gen))
            losses.append(loss)
        runs[backend] = (ipu, torch.stack(losses))
    compiled, interpreted = runs["compile"][0], runs["interpret"][0]
    assert compiled.compilations() == 1
    assert interpreted.compilations() == 0
    torch.testing.assert_close(runs["compile"][1], runs["interpret"][1],
                               rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model_kind", ["mlp", "gin"])
def test_compiled_training_matches_eager(model_kind):
    """Per micro-batch outputs and trained weights of the compiled graph
    (forward, backward and the backend's graph passes) against eager
    PyTorch, with two device iterations of two accumulation steps."""
    torch.manual_seed(3)
    model = MLP() if model_kind == "mlp" else GIN()
    reference = copy.deepcopy(model)
    D, G = 2, 2
    opts = poptorch.Options().deviceIterations(D)
    opts.Training.gradientAccumulation(G)
    opts.outputMode(poptorch.OutputMode.All)
    opts.Simulator.backend("compile")
    ipu = poptorch.trainingModel(
        model, opts, torch.optim.Adam(model.parameters(), lr=0.01))
    ref_opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(4)
    for _ in range(3):
        inputs = (graph_batch(batches=D * G, generator=gen)
                  if model_kind == "gin" else
                  (torch.randn(8, 4, generator=gen),
                   torch.randn(8, 3, generator=gen)))
        out, loss = ipu(*inputs)
        micro = [m for step in train_call(reference, ref_opt, inputs, D, G)
                 for replicas in step for m in replicas]
        torch.testing.assert_close(out, torch.cat([o for o, _ in micro]),
                                   rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(loss, torch.stack([l for _, l in micro]),
                                   rtol=1e-4, atol=1e-5)
    assert ipu.compilations() == 1
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


def test_compiled_inference_matches_eager():
    torch.manual_seed(5)
    model = GIN()
    opts = poptorch.Options().deviceIterations(2)
    opts.Simulator.backend("compile")
    ipu = poptorch.inferenceModel(model, opts)
    for seed in range(2):
        inputs = graph_batch(batches=2,
                             generator=torch.Generator().manual_seed(seed))
        out, loss = ipu(*inputs)
        eager = [model(*[t.chunk(2)[i] for t in inputs]) for i in range(2)]
        torch.testing.assert_close(out, torch.cat([o for o, _ in eager]))
        torch.testing.assert_close(loss, torch.stack([l for _, l in eager]))
    assert ipu.compilations() == 1


def test_each_model_compiles_once_however_many_a_process_builds():
    """Dynamo caches compiled code per code object and gives up after
    ``recompile_limit`` variants of one: every model must have its own."""
    import torch._dynamo.config
    with torch._dynamo.config.patch(recompile_limit=2):
        for _ in range(4):
            model = MLP()
            opts = poptorch.Options()
            opts.Simulator.backend("compile")
            ipu = poptorch.trainingModel(
                model, opts, torch.optim.SGD(model.parameters(), lr=0.05))
            for _ in range(2):
                ipu(torch.randn(8, 4), torch.randn(8, 3))
            assert ipu.compilations() == 1
