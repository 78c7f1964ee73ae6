"""Tracing semantics PopTorch scripts rely on (issue 13, items 1-3): host
constants, dynamic slices with wrap-around, in-place changes of slices.

Every result is compared with eager PyTorch on the same inputs, or with the
wrapped slice computed independently from Python index arithmetic.
"""
import copy
import re

import pytest
import torch

import poptorch

STEP = torch.tensor(2)
GLOBAL_OFFSET = torch.tensor([10.0, 20.0, 30.0])


def _infer(model, *args, opts=None):
    return poptorch.inferenceModel(model, opts)(*args)


def _raises(match, model, *args):
    with pytest.raises(poptorch.Error, match=match) as info:
        _infer(model, *args)
    return str(info.value)


# --- Item 1: host constants ------------------------------------------------------

class _ClosureStep(torch.nn.Module):
    def forward(self, x):
        n = x.shape[0]
        return x[1:n:STEP.item()] + GLOBAL_OFFSET[: (n - 1) // 2 + (n - 1) % 2]


class _AttributeBranch(torch.nn.Module):
    def __init__(self, sign):
        super().__init__()
        self.const = torch.tensor([1.0, 2.0]) * sign   # not a buffer

    def forward(self, x):
        if self.const.sum() > 0:
            return x + self.const.to(x.device)
        return x * int(self.const.abs().max())


class _DeviceIdioms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.target = torch.tensor([0.5, -1.0, 2.0])

    def forward(self, x):
        zeros = torch.zeros(x.shape[1], device=x.device)
        ones = x.new_ones(x.shape[1])
        return x * self.target.to(x.device) + zeros + ones + \
            x.new_zeros(x.shape)


@pytest.mark.parametrize("model, x", [
    (_ClosureStep(), torch.arange(7.0)),
    (_AttributeBranch(1.0), torch.randn(3, 2)),
    (_AttributeBranch(-1.0), torch.randn(3, 2)),
    (_DeviceIdioms(), torch.randn(4, 3)),
])
def test_host_constants_behave_as_in_eager(model, x):
    expected = model(x.clone())
    torch.testing.assert_close(_infer(model, x), expected)


def test_host_constant_read_in_a_training_model():
    torch.manual_seed(0)
    scale = torch.tensor([3.0])

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x, y):
            out = self.fc(x) * scale.item()
            return out, torch.nn.functional.mse_loss(out, y)

    _train_one_step_like_eager(Model(), torch.randn(8, 4), torch.randn(8, 2),
                               lr=0.1)


def _train_one_step_like_eager(model, x, y, lr):
    """One SGD step on the IPU and one eager step on a copy: the outputs,
    the loss and every parameter must agree."""
    reference = copy.deepcopy(model)
    training = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=lr))
    out, loss = training(x, y)
    ref_out, ref_loss = reference(x, y)
    ref_loss.backward()
    torch.optim.SGD(reference.parameters(), lr=lr).step()
    torch.testing.assert_close(out, ref_out.detach())
    torch.testing.assert_close(loss, ref_loss.detach())
    for param, ref_param in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param, ref_param)


def test_plain_attribute_is_a_constant_touched_once_by_tracing():
    # The user guide's counter example: the attribute is not a buffer, so
    # the device returns the value traced, [1.], on every call.
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.i = torch.tensor([0.0])

        def forward(self):
            self.i += 1
            return self.i

    model = Counter()
    wrapped = poptorch.inferenceModel(model)
    for _ in range(3):
        torch.testing.assert_close(wrapped(), torch.tensor([1.0]))
    torch.testing.assert_close(model.i, torch.tensor([1.0]))


class _Moves(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x):
        y = x * 2
        if self.how == "cpu":
            return y.cpu()
        if self.how == "to_str":
            return y.to("cpu")
        if self.how == "item":
            return x + y.sum().item()
        return x + 1 if y.sum() > 0 else x - 1


@pytest.mark.parametrize("how, match", [
    ("cpu", re.escape("Illegal move to CPU (via `.to(\"cpu\")`)")),
    ("to_str", re.escape("Illegal move to CPU (via `.to(\"cpu\")`)")),
    ("item", r"Illegal call to \.item\(\)"),
    ("branch", r"Illegal call to bool\(tensor\)"),
])
def test_ipu_values_still_cannot_reach_the_host(how, match):
    message = _raises(match, _Moves(how), torch.ones(2))
    assert "test_fidelity_tracing.py" in message  # the user's line


def test_cpu_tensor_created_in_forward_is_rejected_when_mixed():
    class Model(torch.nn.Module):
        def __init__(self, move):
            super().__init__()
            self.move = move

        def forward(self, x):
            index = torch.tensor([1, 0], device="cpu")
            if self.move:
                index = index.to(x.device)
            return x[index]

    _raises(re.escape("Expected an IPU tensor but got "
                      "tensor(device=cpu, shape=[2], dtype=Long)"),
            Model(False), torch.arange(4.0))
    x = torch.arange(4.0)
    torch.testing.assert_close(_infer(Model(True), x), x[[1, 0]])


# --- Item 2: dynamic slices ------------------------------------------------------

def _wrapped(tensor, dim, start, size):
    """Reference: ``size`` elements from ``start`` along ``dim``, wrapping."""
    positions = [(start + i) % tensor.shape[dim] for i in range(size)]
    return tensor.index_select(dim, torch.tensor(positions))


class _Slice(torch.nn.Module):
    def forward(self, x, s):
        return x[s:s + 3]


class _Narrow(torch.nn.Module):
    def forward(self, x, s):
        return x.narrow(0, s, 3) * 2


class _TwoDims(torch.nn.Module):
    def forward(self, x, s, t):
        return x[s:s + 2, t:t + 3]


@pytest.mark.parametrize("start", [0, 2, 6, 7])
def test_dynamic_slice_wraps_past_the_end(start):
    x = torch.arange(8.0) * 1.5
    s = torch.tensor([start])
    torch.testing.assert_close(_infer(_Slice(), x, s), _wrapped(x, 0, start, 3))
    torch.testing.assert_close(_infer(_Narrow(), x, torch.tensor(start)),
                               _wrapped(x, 0, start, 3) * 2)
    if start + 3 <= 8:   # no wrap: exactly PyTorch's slice
        torch.testing.assert_close(_infer(_Slice(), x, s), x[start:start + 3])


def test_dynamic_slice_on_two_dimensions():
    x = torch.randn(5, 6)
    s, t = torch.tensor([4]), torch.tensor([5])
    expected = _wrapped(_wrapped(x, 0, 4, 2), 1, 5, 3)
    torch.testing.assert_close(_infer(_TwoDims(), x, s, t), expected)


def test_dynamic_slice_per_micro_batch():
    class Model(torch.nn.Module):
        def forward(self, x, s):
            return x[:, s:s + 2]

    opts = poptorch.Options().deviceIterations(3)
    x = torch.randn(3, 5)
    starts = [1, 4, 3]
    out = _infer(Model(), x, torch.tensor(starts), opts=opts)
    expected = torch.cat([_wrapped(x[i:i + 1], 1, s, 2)
                          for i, s in enumerate(starts)])
    torch.testing.assert_close(out, expected)


def test_dynamic_slice_gradients_flow_to_the_sliced_weight():
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(6, 2))

        def forward(self, x, s):
            out = (self.table[s:s + 4] * x).sum(dim=0, keepdim=True)
            return out, poptorch.identity_loss((out ** 2).sum(), "sum")

    model = Model()
    start_table = model.table.detach().clone()
    x, s = torch.randn(4, 2), torch.tensor([4])
    training = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    training(x, s)
    # Reference: the same loss on the rows (4, 5, 0, 1), by eager autograd.
    table = start_table.clone().requires_grad_()
    rows = _wrapped(table, 0, 4, 4)
    ((rows * x).sum(dim=0, keepdim=True) ** 2).sum().backward()
    torch.testing.assert_close(model.table, start_table - 0.1 * table.grad)
    assert table.grad[2:4].abs().sum() == 0 and table.grad[4:].abs().sum() > 0


def test_dynamic_slice_assignment_writes_back_wrapped():
    class Model(torch.nn.Module):
        def forward(self, x, s, v):
            x[s:s + 3] = v
            x[s:s + 1] += 100
            return x * 1

    x, v = torch.zeros(6), torch.tensor([1.0, 2.0, 3.0])
    expected = torch.zeros(6)
    expected[[5, 0, 1]] = v
    expected[5] += 100
    out = _infer(Model(), x, torch.tensor([5]), v)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, expected)   # the caller's input


class _BadSlice(torch.nn.Module):
    def __init__(self, form):
        super().__init__()
        self.form = form

    def forward(self, x, s):
        if self.form == "scaled":
            return x[s:s * 2]
        if self.form == "open":
            return x[s:]
        if self.form == "empty":
            return x[s:s]
        return x[s + 2:s]


@pytest.mark.parametrize("form, match", [
    ("scaled", r"x\[s:s \+ K\]: the end of a slice .* must be the start plus "
               r"a constant"),
    ("open", r"needs both of them as tensors"),
    ("empty", re.escape("The start and end of a slice must be different.")),
    ("reversed", re.escape("Taking a slice of a tensor with the end less "
                           "than the start is not supported.")),
])
def test_inexpressible_dynamic_slices_are_clear_errors(form, match):
    message = _raises(match, _BadSlice(form), torch.arange(8.0),
                      torch.tensor([2]))
    assert "test_fidelity_tracing.py" in message
    assert "tracing tensor" not in message


def test_run_time_size_is_a_poptorch_error_not_a_tracer_error():
    class Model(torch.nn.Module):
        def forward(self, x, n):
            return torch.zeros(n) + x.sum()

    message = _raises(r"needs the value of an IPU tensor", Model(),
                      torch.ones(2), torch.tensor(3))
    assert "test_fidelity_tracing.py" in message


# --- Item 3: in-place changes of slices and selects ---------------------------------

def _forms(x):
    x[1:3] = 5.0
    x[:, 0] += 1
    x[0].fill_(2)
    x[1:4][:, 1:2] = 7.0           # chained slices
    view = x[2:4]
    view[0] *= 3                    # a view changed before it is assigned
    x[3] = view[1] + 1
    return x


class _InputSlices(torch.nn.Module):
    def forward(self, x):
        _forms(x)
        return x.sum(dim=1)


class _IntermediateSlices(torch.nn.Module):
    def forward(self, x):
        return _forms(x * 2)


class _NestedInputs(torch.nn.Module):
    def forward(self, pair, named):
        pair[0][0, :] = pair[1][1]
        named["z"][:, 1] -= 4
        return None


@pytest.mark.parametrize("model", [_InputSlices(), _IntermediateSlices()])
def test_inplace_slices_match_eager_and_reach_the_callers_input(model):
    x = torch.randn(5, 3)
    eager_x = x.clone()
    expected = model(eager_x)
    out = _infer(model, x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, eager_x)


def test_inplace_slices_of_nested_inputs_are_written_back():
    a, b, z = torch.randn(2, 3), torch.randn(2, 3), torch.randn(4, 2)
    ref = (a.clone(), b.clone(), z.clone())
    _NestedInputs()((ref[0], ref[1]), {"z": ref[2]})
    assert _infer(_NestedInputs(), (a, b), {"z": z}) is None
    for got, want in zip((a, b, z), ref):
        torch.testing.assert_close(got, want)


def test_inplace_slices_per_device_iteration():
    opts = poptorch.Options().deviceIterations(2)
    x = torch.randn(4, 3)   # two micro-batches of two rows
    expected = x.clone()
    for rows in (expected[0:2], expected[2:4]):
        _forms_two_rows(rows)
    _infer(_TwoRowModel(), x, opts=opts)
    torch.testing.assert_close(x, expected)


def _forms_two_rows(x):
    x[0:1] = 5.0
    x[:, 2] += 1
    x[1].fill_(-2)


class _TwoRowModel(torch.nn.Module):
    def forward(self, x):
        _forms_two_rows(x)
        return x * 1


def test_inplace_slice_of_an_intermediate_in_training():
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 4)

        def forward(self, x, y):
            h = self.fc(x)
            h[:, 0] = 0.0
            h[1:3] *= 2
            return h, torch.nn.functional.mse_loss(h, y)

    _train_one_step_like_eager(Model(), torch.randn(4, 3), torch.randn(4, 4),
                               lr=0.5)


class _Strided(torch.nn.Module):
    def __init__(self, form):
        super().__init__()
        self.form = form

    def forward(self, x):
        if self.form == "assign":
            x[0:4:2] = 5.0
        elif self.form == "iadd":
            x[::2] += 1
        else:
            x[1::3].fill_(0)
        return x * 1


@pytest.mark.parametrize("form", ["assign", "iadd", "fill"])
def test_inplace_strided_slice_is_poptorchs_error(form):
    message = _raises(re.escape(
        "In-place modification of slices with step size other than 1 is not "
        "supported."), _Strided(form), torch.zeros(6))
    assert "test_fidelity_tracing.py" in message
