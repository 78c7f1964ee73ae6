"""The executed graph runs PopTorch's marker ops as ATen ops: same values,
same gradients, and the captured graph (what the Ir shows) is untouched."""
import pytest
import torch

import poptorch
from poptorch_core._executor.backends.passes.lowering import lower_for_host
from poptorch_core._tracing.capture import capture_module


class _Marked(torch.nn.Module):
    def __init__(self, reduction):
        super().__init__()
        self.reduction = reduction
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = poptorch.nop(self.lin(x))
        h = poptorch.set_available_memory(h, 0.3)
        h = poptorch.ipu_print_tensor(h, "h")
        return poptorch.identity_loss(h.tanh() * 3, self.reduction)


def _poptorch_targets(graph_module):
    return sorted(str(n.target) for n in graph_module.graph.nodes
                  if str(n.target).startswith("poptorch."))


@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_values_and_gradients_match_the_captured_graph(reduction):
    torch.manual_seed(0)
    model = _Marked(reduction)
    x = torch.randn(5, 4)
    captured = capture_module(model, (x,), {}, training=True,
                              device=torch.device("cpu"))
    lowered = lower_for_host(captured.graph_module)
    assert _poptorch_targets(captured.graph_module) == [
        "poptorch.identity_loss.default", "poptorch.ipu_print_tensor.default",
        "poptorch.nop.default", "poptorch.set_available_memory.default"]
    # Only the op with a side effect stays a PopTorch op.
    assert _poptorch_targets(lowered) == ["poptorch.ipu_print_tensor.default"]

    results = []
    for graph_module in (captured.graph_module, lowered):
        params = [p.detach().clone().requires_grad_() for p in
                  model.parameters()]
        (out,) = graph_module(*params, x)
        (out if out.dim() == 0 else out.sum()).backward()
        results.append((out.detach(), [p.grad for p in params]))
    (out_a, grads_a), (out_b, grads_b) = results
    assert torch.equal(out_a, out_b)
    for grad_a, grad_b in zip(grads_a, grads_b):
        assert torch.equal(grad_a, grad_b)
    # And both are torch's own result on the plain model.
    expected = model.lin(x).tanh() * 3
    expected = {"sum": expected.sum(), "mean": expected.mean(),
                "none": expected}[reduction]
    torch.testing.assert_close(out_b, expected)


def test_a_graph_without_markers_is_returned_unchanged():
    model = torch.nn.Linear(3, 2)
    captured = capture_module(model, (torch.randn(2, 3),), {},
                              training=False, device=torch.device("cpu"))
    assert lower_for_host(captured.graph_module) is captured.graph_module


def test_training_model_runs_the_lowered_graph():
    torch.manual_seed(0)
    model = _Marked("mean")
    ipu_model = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    ipu_model(torch.randn(5, 4))
    program = ipu_model._state.program
    assert "poptorch.identity_loss.default" in _poptorch_targets(
        program.captured.graph_module)
    assert "poptorch.identity_loss.default" not in _poptorch_targets(
        program.executable.graph_module)


class _Identities(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 3)
        self.b = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = sum([self.a(x), self.b(x)])      # 0 + a(x) + b(x)
        kept_input = x * 1                   # would alias the input
        buf = torch.zeros(5, 3) + 0          # written in place below
        buf.add_(h)
        scaled = h / 1
        out = (scaled + buf).sum() + kept_input.sum()
        return out - 0, h * 1                # the second aliases an output


def test_arithmetic_identities_are_dropped_only_where_safe():
    torch.manual_seed(0)
    model = _Identities()
    x = torch.randn(5, 4)
    captured = capture_module(model, (x,), {}, training=False,
                              device=torch.device("cpu"))
    lowered = lower_for_host(captured.graph_module)

    def identities(graph_module):
        return [(n.name, str(n.target)) for n in graph_module.graph.nodes
                if n.op == "call_function" and len(n.args) == 2
                and not isinstance(n.args[1], torch.fx.Node)]

    assert identities(captured.graph_module) == [
        ("add", "aten.add.Tensor"), ("mul", "aten.mul.Tensor"),
        ("add_2", "aten.add.Tensor"), ("div", "aten.div.Tensor"),
        ("sub", "aten.sub.Tensor"), ("mul_1", "aten.mul.Tensor")]
    # Dropped: sum()'s 0 + a(x) and h / 1. Kept: x * 1 (the input),
    # zeros + 0 (written in place), out - 0 and h * 1 (returned).
    assert identities(lowered) == [
        ("mul", "aten.mul.Tensor"), ("add_2", "aten.add.Tensor"),
        ("sub", "aten.sub.Tensor"), ("mul_1", "aten.mul.Tensor")]
    params = list(model.parameters())
    for a, b in zip(captured.graph_module(*params, x), lowered(*params, x)):
        assert torch.equal(a, b)
    with torch.no_grad():
        expected = model(x)
    for a, b in zip(lowered(*params, x), expected):
        torch.testing.assert_close(a, b)


class _NoOpViews(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(6, 3)

    def forward(self, features, h):
        index = features[:, 0].reshape(-1).to(torch.int64)  # dropped twice
        e = self.emb.weight.index_select(0, index).view(4, 3)  # dropped
        e = e.expand(4, 3) * 2                                 # dropped
        flat = e.view(12)                                      # kept: reshapes
        buf = torch.zeros(4, 3)
        seen = buf.view(4, 3)                                  # kept: written
        buf.add_(e)
        return flat.sum() + seen.sum(), h.view(2, 2)           # kept: returned


def test_no_op_views_and_casts_are_dropped_only_where_safe():
    torch.manual_seed(0)
    model = _NoOpViews()
    features = torch.tensor([[1, 0], [5, 0], [5, 1], [0, 2]])
    h = torch.randn(2, 2)
    captured = capture_module(model, (features, h), {}, training=False,
                              device=torch.device("cpu"))
    lowered = lower_for_host(captured.graph_module)

    def views(graph_module):
        return [str(n.target) for n in graph_module.graph.nodes
                if n.op == "call_function" and str(n.target) in (
                    "aten.view.default", "aten.reshape.default",
                    "aten.expand.default", "aten.to.dtype")]

    assert sorted(views(captured.graph_module)) == sorted(
        ["aten.reshape.default", "aten.to.dtype"] +
        ["aten.view.default"] * 4 + ["aten.expand.default"])
    assert sorted(views(lowered)) == ["aten.view.default"] * 3
    # Same values, and the same gradients through the dropped view and
    # expand of the embedding rows.
    weight = model.emb.weight.detach().clone().requires_grad_()
    results = []
    for graph_module in (captured.graph_module, lowered):
        w = weight.detach().clone().requires_grad_()
        total, out = graph_module(w, features, h)
        total.backward()
        results.append((total.detach(), out, w.grad))
    for a, b in zip(*results):
        assert torch.equal(a, b)
    with torch.no_grad():
        expected = model(features, h)
    for a, b in zip(results[1][:2], expected):
        torch.testing.assert_close(a, b)
