"""The ``compile`` backend: inductor on the captured graph, once."""
import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import poptorch
from poptorch_core._executor.backends.executable import Executable
from ._eager import assert_outputs_match, train_call
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
        assert_outputs_match(out, loss,
                             train_call(reference, ref_opt, inputs, D, G))
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


def test_a_cast_to_half_inside_a_fused_kernel_still_rounds():
    """Inductor by default drops a float16 down-cast followed by an up-cast
    within one kernel; eagerly (and on the IPU) the cast rounds."""
    class Model(torch.nn.Module):
        def forward(self, x, index):
            out = torch.zeros(3, 2)
            return out.index_add_(0, index, x.half()) + x[:3].half()

    x = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    index = torch.tensor([0, 2, 2, 1])
    opts = poptorch.Options()
    opts.Simulator.backend("compile")
    out = poptorch.inferenceModel(Model(), opts)(x, index)
    rounded = x.half().float()
    expected = torch.zeros(3, 2).index_add_(0, index, rounded) + rounded[:3]
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_each_model_compiles_once_however_many_a_process_builds():
    for _ in range(4):
        model = MLP()
        opts = poptorch.Options()
        opts.Simulator.backend("compile")
        ipu = poptorch.trainingModel(
            model, opts, torch.optim.SGD(model.parameters(), lr=0.05))
        for _ in range(2):
            ipu(torch.randn(8, 4), torch.randn(8, 3))
        assert ipu.compilations() == 1


@pytest.mark.parametrize("backend", ["interpret", "compile"])
def test_training_under_no_grad_still_trains(backend):
    """The device trains whatever the host's grad mode: a training call
    made inside ``torch.no_grad()`` (for example from an evaluation helper)
    takes the same optimizer step as outside it, and the compiled graph,
    built on that first call, has its backward."""
    torch.manual_seed(6)
    model = MLP()
    reference = copy.deepcopy(model)
    opts = poptorch.Options()
    opts.Simulator.backend(backend)
    ipu = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(7)
    for _ in range(2):
        x, y = torch.randn(8, 4, generator=gen), torch.randn(8, 3, generator=gen)
        with torch.no_grad():
            ipu(x, y)
        ref_opt.zero_grad()
        reference(x, y)[1].backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_inputs_of_other_strides_raise_instead_of_being_misread():
    """The compiled graph is built for the compile-time strides (the
    executor feeds it contiguous micro-batches); inductor's size and stride
    checks stay on, so another layout raises rather than being read as
    if it had the first one."""

    def scale_and_add(a, b):
        return (a * 2 + b,)

    a, b = torch.randn(4, 3), torch.randn(4, 3)
    executable = Executable(make_fx(scale_and_add)(a, b), "compile")
    torch.testing.assert_close(executable.run([a, b])[0], a * 2 + b)
    with pytest.raises(RuntimeError, match="stride"):
        executable.run([a, torch.randn(3, 4).t()])
    assert executable.compilations == 1


def test_another_dtype_or_grad_mode_compiles_another_form():
    """What dynamo's guards used to catch: inputs of another dtype, or a
    call in another grad mode, get a form compiled for them (once each),
    never kernels built for the first."""

    def lookup(table, index):
        return (table.index_select(0, index.to(torch.int64)) * 2,)

    table = torch.randn(5, 3, requires_grad=True)
    index = torch.tensor([4, 0, 2, 4])
    executable = Executable(make_fx(lookup)(table, index), "compile")
    for idx in (index, index.int(), index, index.int()):
        out = executable.run([table, idx])[0]
        torch.testing.assert_close(out, table.detach()[index] * 2)
        assert out.requires_grad
    assert executable.compilations == 2
    with torch.no_grad():
        out = executable.run([table, index])[0]
    assert not out.requires_grad and executable.compilations == 3
    torch.testing.assert_close(out, table.detach()[index] * 2)


_WARM_CACHE_RUN = """
import json, torch, poptorch
from torch._dynamo.utils import counters
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                            torch.nn.Linear(8, 1))
class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = model
    def forward(self, x, y):
        out = self.model(x)
        return out, torch.nn.functional.mse_loss(out, y)
opts = poptorch.Options()
opts.Simulator.backend("compile")
ipu = poptorch.trainingModel(WithLoss(), opts,
                             torch.optim.SGD(model.parameters(), lr=0.1))
ipu(torch.ones(8, 4), torch.zeros(8, 1))
print(json.dumps({k: dict(counters[k]) for k in ("aot_autograd", "inductor")}))
"""


def test_a_second_process_reuses_the_compiled_graph(tmp_path):
    """Inductor's and AOTAutograd's caches take the captured graph (they
    stand aside, silently, for graphs compiled without a shape
    environment): a second run of the same script loads the training
    step's kernels (forward and backward, one graph) instead of compiling
    them."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"),
               POPTORCH_LOG_LEVEL="ERR")

    def counters() -> dict:
        result = subprocess.run([sys.executable, "-c", _WARM_CACHE_RUN],
                                capture_output=True, text=True, env=env,
                                timeout=600, check=False)
        assert result.returncode == 0, result.stderr[-3000:]
        return json.loads(result.stdout.strip().splitlines()[-1])

    first, second = counters(), counters()
    assert first["aot_autograd"].get("autograd_cache_miss") == 1
    assert first["inductor"].get("fxgraph_cache_miss") == 1
    assert second["aot_autograd"].get("autograd_cache_hit") == 1
    assert "autograd_cache_bypass" not in second["aot_autograd"]


@pytest.mark.parametrize("backend", ["interpret", "compile"])
def test_only_the_compile_backend_fuses_the_optimizer_step(backend):
    """``compile`` runs packed Adam steps as torch's fused kernel (equal
    within float rounding, checked in test_optim_packed and against eager
    training above); ``interpret`` keeps the rule op for op."""
    model = MLP()
    opts = poptorch.Options()
    opts.Simulator.backend(backend)
    ipu = poptorch.trainingModel(
        model, opts, torch.optim.Adam(model.parameters(), lr=0.01))
    ipu(torch.randn(8, 4), torch.randn(8, 3))
    optimizer = ipu._state.program.device_optimizer
    assert optimizer.fused_update == (backend == "compile")
    assert all(group.fused == (backend == "compile")
               for group in optimizer._packed)
