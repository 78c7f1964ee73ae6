"""The ``compile`` backend: torch.compile with static shapes, once."""
import copy

import torch

import poptorch
from ._models import MLP


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
