"""The simulated IPU's memory model: weights, gradients and optimizer state
counted exactly (references computed by hand from the layer shapes), and
activations checked against what torch.profiler measures for the same
traced step on the CPU."""
import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import poptorch

from ._models import GCN

F32, F16 = 4, 2


def _report(model, optimizer, *inputs, training=True, configure=None):
    opts = poptorch.Options()
    opts.Simulator.memoryCheck("off")
    if configure is not None:
        configure(opts)
    if training:
        wrapped = poptorch.trainingModel(model, opts, optimizer)
    else:
        wrapped = poptorch.inferenceModel(model, opts)
    wrapped.compile(*inputs)
    return wrapped, wrapped.simulationReport()


class Mlp(torch.nn.Module):
    def __init__(self, sizes=(32, 64, 64, 10)):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x, y):
        for layer in self.layers[:-1]:
            x = layer(x).relu()
        out = self.layers[-1](x)
        return out, F.cross_entropy(out, y)


def _mlp_numel(sizes):
    return sum(a * b + b for a, b in zip(sizes, sizes[1:]))


class Transformer(torch.nn.Module):
    def __init__(self, vocab=100, d=32, heads=4, ff=64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.layer = torch.nn.TransformerEncoderLayer(
            d, heads, ff, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens, targets):
        logits = self.head(self.layer(self.embed(tokens)))
        return logits, F.cross_entropy(logits.flatten(0, 1),
                                       targets.flatten())


def _transformer_numel(vocab=100, d=32, ff=64):
    attention = 3 * d * d + 3 * d + d * d + d   # in_proj, out_proj
    feed_forward = d * ff + ff + ff * d + d     # linear1, linear2
    norms = 2 * (2 * d)                         # norm1, norm2
    return vocab * d + attention + feed_forward + norms + d * vocab + vocab


class GraphLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gnn = GCN(in_channels=8, hidden=16, classes=3)

    def forward(self, x, edge_index, y):
        out = self.gnn(x, edge_index)
        return out, F.cross_entropy(out, y)


def _gcn_numel():
    # GCNConv: a bias-free linear layer plus a bias.
    return (8 * 16 + 16) + (16 * 3 + 3)


def _graph_inputs():
    edge_index = torch.randint(0, 20, (2, 60))
    return torch.randn(20, 8), edge_index, torch.randint(0, 3, (20,))


CASES = {
    "mlp": (lambda: Mlp(), lambda: _mlp_numel((32, 64, 64, 10)),
            lambda: (torch.randn(16, 32), torch.randint(0, 10, (16,)))),
    "transformer": (lambda: Transformer(), _transformer_numel,
                    lambda: (torch.randint(0, 100, (4, 12)),
                             torch.randint(0, 100, (4, 12)))),
    "gnn": (lambda: GraphLayer(), _gcn_numel, _graph_inputs),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("optimizer, state_per_element, extra", [
    (lambda p: torch.optim.SGD(p, lr=0.1), 0, 0),
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), F32, 0),
    # Adam: two float32 moments per element and a float32 step count per
    # weight tensor.
    (lambda p: torch.optim.Adam(p), 2 * F32, F32),
    (lambda p: poptorch.optim.AdamW(
        p, first_order_momentum_accum_type=torch.float16,
        second_order_momentum_accum_type=torch.float16), 2 * F16, F32),
    # Centred RMSprop with momentum: mean square, mean gradient, momentum.
    (lambda p: torch.optim.RMSprop(p, momentum=0.5, centered=True), 3 * F32,
     0),
])
def test_weight_gradient_and_optimizer_bytes_are_exact(
        case, optimizer, state_per_element, extra):
    build, numel, inputs = CASES[case]
    model = build()
    tensors = len(list(model.parameters()))
    _, report = _report(model, optimizer(model.parameters()), *inputs())
    (ipu,) = report.memory
    assert ipu.breakdown["parameters"] == F32 * numel()
    assert ipu.breakdown["gradients"] == F32 * numel()
    assert ipu.breakdown["accumulators"] == 0
    assert ipu.breakdown["optimizer_state"] == \
        state_per_element * numel() + extra * tensors


def test_gradient_accumulation_adds_one_accumulator_per_weight():
    sizes = (32, 64, 64, 10)
    model = Mlp(sizes)
    inputs = (torch.randn(32, 32), torch.randint(0, 10, (32,)))

    def accumulate(opts):
        opts.Training.gradientAccumulation(2)

    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1,
                                   accum_type=torch.float16)
    _, report = _report(model, optimizer, *inputs, configure=accumulate)
    assert report.memory[0].breakdown["accumulators"] == \
        F16 * _mlp_numel(sizes)
    # The combined SGD variant keeps one combined accumulator-velocity
    # tensor, in velocity_accum_type, as optimizer state instead.
    model = Mlp(sizes)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1,
                                   use_combined_accum=True)
    _, report = _report(model, optimizer, *inputs, configure=accumulate)
    breakdown = report.memory[0].breakdown
    assert breakdown["accumulators"] == 0
    assert breakdown["optimizer_state"] == F32 * _mlp_numel(sizes)


def test_half_precision_halves_weights_and_gradients_not_float_state():
    sizes = (32, 64, 10)
    model = Mlp(sizes).half()
    inputs = (torch.randn(16, 32).half(), torch.randint(0, 10, (16,)))
    _, report = _report(model, torch.optim.Adam(model.parameters()), *inputs)
    breakdown = report.memory[0].breakdown
    assert breakdown["parameters"] == F16 * _mlp_numel(sizes)
    assert breakdown["gradients"] == F16 * _mlp_numel(sizes)
    assert breakdown["optimizer_state"] == \
        2 * F32 * _mlp_numel(sizes) + F32 * 4
    full = _report(Mlp(sizes), None, torch.randn(16, 32),
                   torch.randint(0, 10, (16,)), training=False)[1]
    half = _report(Mlp(sizes).half(), None, *inputs, training=False)[1]
    assert half.memory[0].breakdown["activations"] * 2 == \
        full.memory[0].breakdown["activations"]


def test_inference_holds_no_gradients_or_state():
    model = Mlp()
    _, report = _report(model, None, torch.randn(8, 32),
                        torch.randint(0, 10, (8,)), training=False)
    breakdown = report.memory[0].breakdown
    assert breakdown["parameters"] == F32 * _mlp_numel((32, 64, 64, 10))
    assert breakdown["gradients"] == breakdown["optimizer_state"] == 0


# --- Activations against torch.profiler -----------------------------------

def _profiled_peak(step) -> int:
    """Peak bytes allocated above the starting point while ``step`` runs,
    from the profiler's allocation events."""
    with profile(activities=[ProfilerActivity.CPU],
                 profile_memory=True) as prof:
        step()
    events = sorted((e for e in prof.profiler.kineto_results.events()
                     if e.name() == "[memory]"), key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def _measure_step(wrapped, inputs, training):
    """Runs the compiled model's own traced step once on the CPU (forward,
    and backward when training) under the profiler."""
    program = wrapped._state.program
    params, buffers = program.state.params, program.state.buffers()
    flat = program.device_inputs(list(inputs))
    for p in params:
        # The IPU keeps one gradient tensor per weight (the "gradients"
        # category): allocate them first, so that the profile sees the
        # step's working memory.
        p.grad = torch.zeros_like(p) if training else None

    def step():
        # As the executor runs it: inference without autograd.
        with torch.set_grad_enabled(training):
            outputs = program.executable.run(params + buffers + flat)
        if training:
            outputs[program.captured.loss_index].backward()

    step()  # warm-up: lazy initialisation is not the model's memory
    return _profiled_peak(step)


ACTIVATION_CASES = {
    # Activation-heavy shapes: many rows, small weights.
    "mlp": (lambda: Mlp((64, 256, 256, 10)),
            lambda: (torch.randn(2048, 64), torch.randint(0, 10, (2048,)))),
    "transformer": (lambda: Transformer(vocab=500, d=64, heads=4, ff=128),
                    lambda: (torch.randint(0, 500, (16, 64)),
                             torch.randint(0, 500, (16, 64)))),
    "gnn": (lambda: GraphLayer(),
            lambda: (torch.randn(4000, 8), torch.randint(0, 4000, (2, 32000)),
                     torch.randint(0, 3, (4000,)))),
}


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("case", sorted(ACTIVATION_CASES))
def test_activation_estimate_matches_the_profiled_step(case, training):
    """The estimate counts every tensor the traced graph creates and every
    tensor autograd saves for the backward, with their live ranges. What it
    cannot see is memory allocated inside one kernel: the CPU attention
    kernel's per-block buffers and torch's transient copy of a weight
    gradient before it is added into ``.grad`` (on the IPU the gradient is
    written in place). For graphs of single ATen kernels (MLP, GNN) the two
    agree to 2%; for the transformer these internals are up to 20% of the
    peak. Hence: the estimate never exceeds the measurement by more than 2%
    and is at least 78% of it."""
    torch.manual_seed(0)
    build, make_inputs = ACTIVATION_CASES[case]
    model = build()
    inputs = make_inputs()
    # The step measured is the traced graph run op by op, what the estimate
    # models (a compiled graph fuses ops and keeps fewer activations).
    wrapped, report = _report(model, torch.optim.SGD(model.parameters(),
                                                     lr=0.1),
                              *inputs, training=training,
                              configure=lambda o: o.Simulator.backend(
                                  "interpret"))
    measured = _measure_step(wrapped, inputs, training)
    estimate = report.memory[0].breakdown["activations"]
    assert 0.78 * measured <= estimate <= 1.02 * measured, \
        (estimate, measured)


# --- Recomputation and available memory ------------------------------------

class Chain(torch.nn.Module):
    """Four blocks of two tanh layers; optionally a checkpoint after each
    block."""

    def __init__(self, width=256, checkpoints=False):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(width, width, bias=False) for _ in range(8))
        self.checkpoints = checkpoints

    def forward(self, x):
        for first, second in zip(self.layers[::2], self.layers[1::2]):
            x = torch.tanh(second(torch.tanh(first(x))))
            if self.checkpoints:
                x = poptorch.recomputationCheckpoint(x)
        return x, poptorch.identity_loss(x.sum(), reduction="none")


def test_recomputation_checkpoints_keep_only_the_checkpoints():
    rows, width = 512, 256
    unit = rows * width * F32  # one activation
    x = torch.randn(rows, width)
    model = Chain(width)
    plain = _report(model, torch.optim.SGD(model.parameters(), lr=0.1),
                    x)[1]
    model = Chain(width, checkpoints=True)
    marked = _report(model, torch.optim.SGD(model.parameters(), lr=0.1),
                     x)[1]
    # Without checkpoints the backward needs all eight tanh outputs (each
    # tanh's and the next linear layer's saved tensor). With a checkpoint
    # after every block only the three checkpoints that feed a linear layer
    # stay, and one block's two tanh outputs are recomputed at a time: at
    # least three activations fewer.
    plain_act = plain.memory[0].breakdown["activations"]
    marked_act = marked.memory[0].breakdown["activations"]
    assert plain_act >= 8 * unit
    assert marked_act <= plain_act - 3 * unit
    # Recomputation costs time: the checkpointed stage runs its forward
    # again in the backward.
    assert marked.stages[0].backward > plain.stages[0].backward


def test_available_memory_proportion_caps_temporaries_and_costs_time():
    model = Mlp((1024, 1024, 10))
    inputs = (torch.randn(512, 1024), torch.randint(0, 10, (512,)))

    def tight(opts):
        opts.setAvailableMemoryProportion({"IPU0": 0.001})

    roomy = _report(model, None, *inputs, training=False)[1]
    capped = _report(model, None, *inputs, training=False,
                     configure=tight)[1]
    capacity = capped.chip.memory_bytes
    # The first product re-lays out its 2 MB input (the weight is created
    # in the layout the product wants) and keeps 2 MB of float32 partials:
    # 4 MB, more than 0.1% of 940 MB.
    need = 512 * 1024 * F32 + 512 * 1024 * F32
    assert roomy.memory[0].breakdown["temporaries"] == need
    assert capped.memory[0].breakdown["temporaries"] == int(0.001 * capacity)
    assert capped.stages[0].forward > roomy.stages[0].forward


def test_set_available_memory_overrides_the_ipu_setting():
    class Marked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(1024, 1024)

        def forward(self, x):
            return poptorch.set_available_memory(self.fc(x), 0.001)

    report = _report(Marked(), None, torch.randn(512, 1024),
                     training=False)[1]
    assert report.memory[0].breakdown["temporaries"] == \
        int(0.001 * report.chip.memory_bytes)
