"""Dispatch capture and IPU rule checks (issue 3)."""
import collections
import inspect

import pytest
import torch

import poptorch
from poptorch_core._tracing.capture import capture_module
from ._models import GCN, GIN, graph_batch


def _capture(model, *args, training=False):
    return capture_module(model, args, {}, training=training,
                          device=torch.device("cpu"))


def _run(captured, model, *args):
    params = [p for p in model.parameters()]
    buffers = [b for b in model.buffers()]
    return captured.graph_module(*params, *buffers, *args)


def _int32(args):
    return [a.int() if a.dtype == torch.int64 else a for a in args]


def test_gin_graph_matches_eager_on_new_inputs():
    torch.manual_seed(0)
    model = GIN()
    captured = _capture(model, *_int32(graph_batch()))
    new = graph_batch()
    out, loss = _run(captured, model, *_int32(new))
    ref_out, ref_loss = model(*new)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(loss, ref_loss)


def test_gcn_graph_matches_eager():
    torch.manual_seed(0)
    model = GCN()
    x, ei, _, _ = graph_batch()
    captured = _capture(model, x, ei.int())
    x2, ei2, _, _ = graph_batch()
    (out,) = _run(captured, model, x2, ei2.int())
    torch.testing.assert_close(out, model(x2, ei2))


def test_mlp_with_batchnorm_and_dropout():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    reference = __import__("copy").deepcopy(model)
    x = torch.randn(6, 4)
    captured = _capture(model, x)
    assert captured.mutated_buffers  # running stats
    # Same random stream for both: dropout masks agree.
    x2 = torch.randn(6, 4)
    torch.manual_seed(1)
    (out,) = _run(captured, model, x2)
    torch.manual_seed(1)
    torch.testing.assert_close(out, reference(x2))
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)
    model.eval(), reference.eval()
    captured = _capture(model, x)
    assert not captured.mutated_buffers
    (out,) = _run(captured, model, x2)
    torch.testing.assert_close(out, reference(x2))


def test_host_model_is_left_unchanged():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    _capture(model, torch.randn(6, 4))
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    assert all(type(p) is torch.nn.Parameter for p in model.parameters())


Result = collections.namedtuple("Result", "total parts")


class Nested(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x, extra):
        h = self.fc(x)
        return Result(h.sum(), {"h": h, "both": [h * extra["scale"], "tag"],
                                "const": torch.tensor([7.0]), "n": 3})


def test_nested_containers_and_constants():
    torch.manual_seed(0)
    model = Nested()
    x = torch.randn(2, 3)
    captured = _capture(model, x, {"scale": torch.tensor(2.0)})
    constant_slots = [i for i, s in enumerate(captured.output_slots)
                      if s is None]
    assert len(constant_slots) == 1
    torch.testing.assert_close(captured.constants[constant_slots[0]],
                               torch.tensor([7.0]))
    template = captured.output_template
    assert isinstance(template, Result)
    assert template.parts["both"][1] == "tag" and template.parts["n"] == 3
    x2 = torch.randn(2, 3)
    outs = _run(captured, model, x2, torch.tensor(3.0))
    ref = model(x2, {"scale": torch.tensor(3.0)})
    torch.testing.assert_close(outs[0], ref.total)
    torch.testing.assert_close(outs[2], ref.parts["both"][0])


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(1))

    def forward(self, x):
        self.seen += x.shape[0]
        x.add_(1)
        return x * self.seen


def test_in_place_buffer_and_input_mutations_are_recorded():
    model = Counter()
    captured = _capture(model, torch.zeros(2))
    assert captured.mutated_buffers == [0]
    assert captured.mutated_inputs == [0]
    buffer = torch.zeros(1)
    x = torch.ones(2)
    (out,) = captured.graph_module(buffer, x)
    assert buffer.item() == 2.0  # updated in place, as the eager model would
    torch.testing.assert_close(x, torch.full((2,), 2.0))
    torch.testing.assert_close(out, torch.full((2,), 4.0))
    assert model.seen.item() == 0  # host untouched


def test_is_running_on_ipu_and_hooks():
    events = []

    class Model(torch.nn.Module):
        def forward(self, x):
            events.append(("forward", poptorch.isRunningOnIpu()))
            return x * 2

    pre = poptorch.registerPreCompileHook(lambda: events.append("pre"))
    post = poptorch.registerPostCompileHook(lambda: events.append("post"))
    try:
        poptorch.inferenceModel(Model())(torch.ones(2))
    finally:
        pre.remove()
        post.remove()
    assert events == ["pre", ("forward", True), "post"]
    assert not poptorch.isRunningOnIpu()
    with pytest.raises(RuntimeError, match="Pre-compile hook must be callable"):
        poptorch.registerPreCompileHook(3)
    with pytest.raises(RuntimeError, match="Post-compile hook must be callable"):
        poptorch.registerPostCompileHook(None)


def test_trace_model_returns_ir_with_streams(tmp_path, monkeypatch):
    model = torch.nn.Linear(4, 2)
    ir = poptorch.traceModel(model, torch.randn(3, 4, dtype=torch.float64))
    streams = ir.get_all_h2d_streams()
    assert [tuple(s.shape) for s in streams] == [(3, 4)]
    assert streams[0].dtype == torch.float32
    assert len(ir.get_all_d2h_streams()) == 1
    monkeypatch.setenv("POPART_DOT_CHECKS", "ALL")
    paths = ir.dot_checkpoint("trace", str(tmp_path))
    assert paths and "digraph" in open(paths[0]).read()


# --- Rule checks --------------------------------------------------------------

def _line_of(fn, marker):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, l in enumerate(lines) if marker in l)


class Nonzero(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x)  # RULE


class BoolMask(torch.nn.Module):
    def forward(self, x):
        return x[x > 0]  # RULE


class Unique(torch.nn.Module):
    def forward(self, x):
        return torch.unique(x)  # RULE


class MaskedSelect(torch.nn.Module):
    def forward(self, x):
        return torch.masked_select(x, x > 0)  # RULE


class Item(torch.nn.Module):
    def forward(self, x):
        return x * x.sum().item()  # RULE


class ToList(torch.nn.Module):
    def forward(self, x):
        return x * len(x.tolist())  # RULE


class ToCpu(torch.nn.Module):
    def forward(self, x):
        return x.to("cpu") * 2  # RULE


class Branch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # RULE
            return x
        return -x


class Backward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        (x * self.w).sum().backward()  # RULE
        return x


class PoolWithoutSize(torch.nn.Module):
    def forward(self, x, batch):
        from torch_geometric.nn import global_add_pool
        return global_add_pool(x, batch)  # RULE


@pytest.mark.parametrize("model_class,pattern", [
    (Nonzero, "aten::nonzero cannot run on an IPU: .*output shape depends on "
              "the data.*nonzero_static"),
    (BoolMask, "aten::index cannot run on an IPU: x\\[mask\\].*torch.where"),
    (Unique, "cannot run on an IPU: returns one entry per distinct value"),
    (MaskedSelect, "aten::masked_select cannot run on an IPU"),
    (Item, "Illegal call to .item\\(\\) while the model is traced"),
    (ToList, "Illegal call to .tolist\\(\\)"),
    (ToCpu, "Illegal move to CPU \\(via `.to\\(\"cpu\"\\)`\\) when using the "
            "dispatcher. Instead, return this output as an IPU tensor."),
    (Branch, "Illegal call to bool\\(tensor\\)"),
    (Backward, "Calling backward\\(\\) inside the model's forward is not "
               "supported"),
    (PoolWithoutSize, "Illegal call to int\\(tensor\\).*size=num_graphs"),
])
def test_rule_errors_name_the_op_and_the_user_line(model_class, pattern):
    args = (torch.randn(4, 3),) if model_class is not PoolWithoutSize else \
        (torch.randn(4, 3), torch.tensor([0, 0, 1, 1]))
    with pytest.raises(poptorch.Error, match=pattern) as info:
        poptorch.inferenceModel(model_class())(*args)
    line = _line_of(model_class, "# RULE")
    assert f"{__file__}:{line}" in info.value.message


def test_reassigned_and_removed_buffers_and_parameters():
    class Reassign(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("y", torch.zeros(1))

        def forward(self, x):
            self.y = self.y + 1
            return x + self.y

    class Remove(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("y", torch.zeros(1))

        def forward(self, x):
            del self.y
            return x

    class ReassignParam(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def forward(self, x):
            self.w = torch.nn.Parameter(self.w * 2)
            return x * self.w

    with pytest.raises(poptorch.Error, match="Buffer y is reassigned within "
                       "the model when calling the forward method. This is not "
                       "supported. Consider using self.y.copy_\\(src\\)"):
        poptorch.inferenceModel(Reassign())(torch.ones(1))
    with pytest.raises(poptorch.Error, match="Buffer y is removed from the "
                       "model when calling the forward method."):
        poptorch.inferenceModel(Remove())(torch.ones(1))
    with pytest.raises(poptorch.Error, match="Parameter w is reassigned"):
        poptorch.inferenceModel(ReassignParam())(torch.ones(1))


def test_zero_sized_inputs_are_rejected():
    with pytest.raises(poptorch.Error, match=r"Zero-sized tensors are "
                       r"unsupported \(Got shape \[0, 2, 5, 5\]\)"):
        poptorch.inferenceModel(torch.nn.Identity())(torch.zeros(0, 2, 5, 5))


def test_loss_detection():
    class NoLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x) * 12

    class UnreturnedLoss(NoLoss):
        def forward(self, x):
            torch.nn.functional.mse_loss(self.fc(x), x)
            return self.fc(x)

    class TwoLosses(NoLoss):
        def forward(self, x):
            out = self.fc(x).log_softmax(1)
            t = torch.zeros(x.shape[0], dtype=torch.long)
            return torch.nn.functional.nll_loss(out, t) + \
                5 * torch.nn.functional.nll_loss(out, t)

    class Wrapped(TwoLosses):
        def forward(self, x):
            return poptorch.identity_loss(super().forward(x), reduction="sum")

    for model_class in (NoLoss, UnreturnedLoss):
        with pytest.raises(poptorch.Error, match="Couldn't find a loss in "
                           "graph!"):
            poptorch.trainingModel(model_class())(torch.randn(2, 2))
    with pytest.raises(poptorch.Error, match="Multiple independent losses "
                       "found in graph. Graph must have one final loss. Wrap "
                       "final graph loss in poptorch.identity_loss."):
        poptorch.trainingModel(TwoLosses())(torch.randn(2, 2))
    loss = poptorch.trainingModel(Wrapped())(torch.randn(2, 2))
    assert loss.dim() == 0
