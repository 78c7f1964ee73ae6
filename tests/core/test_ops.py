"""Tests of the ``poptorch`` ops: plain CPU meaning against plain torch, and
simulated-IPU meaning by tracing with ``make_fx`` inside ``ipu_tracing()``
and re-running the captured graph on new inputs. Losses, printing, hints,
control flow and dynamic slicing; the host-side ops are in
``test_ops_host.py``."""
import itertools

import pytest
import torch

import poptorch_core as poptorch
from poptorch_core.ops._tensor_format import format_tensor
from ._ops_helpers import check_error, targets, trace_ipu


# identity_loss ---------------------------------------------------------------
@pytest.mark.parametrize("reduction, reference", [
    ("sum", torch.sum),
    ("mean", torch.mean),
    ("none", lambda t: t),
])
def test_identity_loss_cpu_and_traced(reduction, reference):
    x = torch.randn(3, 4)
    torch.testing.assert_close(poptorch.identity_loss(x, reduction),
                               reference(x))
    gm = trace_ipu(lambda t: poptorch.identity_loss(t * 2, reduction), x)
    assert torch.ops.poptorch.identity_loss.default in targets(gm)
    new = torch.randn(3, 4, requires_grad=True)
    out = gm(new)
    out.sum().backward()
    ref_in = new.detach().clone().requires_grad_()
    reference(ref_in * 2).sum().backward()
    torch.testing.assert_close(out, reference(new.detach() * 2))
    torch.testing.assert_close(new.grad, ref_in.grad)


def test_identity_loss_none_returns_a_copy():
    x = torch.randn(3)
    out = poptorch.identity_loss(x, "none")
    out.add_(1)
    assert not torch.equal(out, x)


@pytest.mark.parametrize("reduction", ["max", 1, None])
def test_identity_loss_unsupported_reduction(reduction):
    with pytest.raises(AssertionError, match="Unsupported reduction type!"):
        poptorch.identity_loss(torch.ones(2), reduction)


def test_identity_loss_op_rejects_bad_codes():
    with pytest.raises(ValueError, match=r"poptorch.identity_loss reduction "
                       r"must be 0 \(sum\), 1 \(mean\) or 2 \(none\), got 7"):
        torch.ops.poptorch.identity_loss(torch.ones(2), 7)


# ipu_print_tensor ------------------------------------------------------------
def test_print_tensor_rejects_non_tensors():
    check_error(
        "ipu print tensor must take a torch.tensor argument. "
        "<class 'int'> is not supported.", poptorch.ipu_print_tensor, 3)


def test_print_tensor_rejects_unknown_float_format():
    with pytest.raises(ValueError, match="float_format"):
        poptorch.ipu_print_tensor(torch.ones(1), float_format="hex")


def test_print_tensor_is_identity_on_cpu(capfd):
    x = torch.ones(2)
    assert poptorch.ipu_print_tensor(x, "x") is x
    assert capfd.readouterr().err == ""


def test_print_tensor_prints_when_the_graph_runs(capfd):
    gm = trace_ipu(lambda t: poptorch.ipu_print_tensor(t * 2, "t") + 1,
                   torch.zeros(3))
    assert capfd.readouterr().err == ""  # nothing at trace time
    x = torch.tensor([1.0, 2.5, -3.0], requires_grad=True)
    out = gm(x)
    assert capfd.readouterr().err == "t: ( 2.0000,  5.0000, -6.0000)\n"
    out.backward(torch.tensor([1.0, 0.0, 2.0]))
    assert capfd.readouterr().err == "t_gradient: (1.0000, 0.0000, 2.0000)\n"
    torch.testing.assert_close(x.grad, torch.tensor([2.0, 0.0, 4.0]))


def test_print_tensor_without_gradient(capfd):
    gm = trace_ipu(
        lambda t: poptorch.ipu_print_tensor(t, "t", print_gradient=False),
        torch.zeros(1))
    x = torch.ones(1, requires_grad=True)
    gm(x).sum().backward()
    assert capfd.readouterr().err == "t: (1.0000)\n"


def test_print_tensor_format_arguments_reach_the_output(capfd):
    gm = trace_ipu(
        lambda t: poptorch.ipu_print_tensor(t, "v", open_bracket="[",
                                            close_bracket="]", separator=" ",
                                            float_format="fixed", digits=1),
        torch.zeros(2))
    gm(torch.tensor([0.25, 3.0]))
    assert capfd.readouterr().err == "v: [0.2 3.0]\n"


@pytest.mark.parametrize("tensor, kwargs, expected", [
    (torch.tensor([1.0, 2.5, -3.0]), {}, "( 1.0000,  2.5000, -3.0000)"),
    (torch.tensor([[1, 20], [300, 4]]), {}, "((  1,  20),\n (300,   4))"),
    (torch.tensor([1234.5]), dict(float_format="scientific", digits=2),
     "(1.23e+03)"),
    (torch.tensor([3.14159]), dict(float_format="none", digits=3), "(3.14)"),
    (torch.tensor([1e-6, 1.0]), {}, "(1.0000e-06, 1.0000e+00)"),
    (torch.arange(10), dict(summarise_threshold=5, edge_items=2),
     "(0, 1, ..., 8, 9)"),
    (torch.arange(6), dict(max_line_width=10), "(0, 1, 2,\n 3, 4, 5)"),
    (torch.tensor([True, False]), {}, "( true, false)"),
    (torch.tensor(2.0), {}, "2.0000"),
    (torch.tensor([float("nan"), float("-inf")]), {}, "( nan, -inf)"),
])
def test_print_format(tensor, kwargs, expected):
    assert format_tensor(tensor, **kwargs) == expected


# nop and the hint ops --------------------------------------------------------
def test_nop():
    check_error("nop must take a torch.tensor argument", poptorch.nop, [1])
    x = torch.ones(2)
    assert poptorch.nop(x) is x
    gm = trace_ipu(lambda t: poptorch.nop(t) * 3, x)
    assert torch.ops.poptorch.nop.default in targets(gm)
    new = torch.randn(2, requires_grad=True)
    gm(new).sum().backward()
    torch.testing.assert_close(new.grad, torch.full((2, ), 3.0))


def test_recomputation_checkpoint_containers():
    a, b = torch.ones(2), torch.zeros(3)
    assert poptorch.recomputationCheckpoint(a) is a
    assert poptorch.recomputationCheckpoint(a, b) == (a, b)
    as_list = poptorch.recomputationCheckpoint([a, b])
    assert isinstance(as_list, list) and as_list == [a, b]
    as_tuple = poptorch.recomputationCheckpoint((a, ))
    assert isinstance(as_tuple, tuple) and as_tuple == (a, )
    with pytest.raises(ValueError, match="All inputs must be tensors"):
        poptorch.recomputationCheckpoint(a, 2)


def test_recomputation_checkpoint_traced():
    gm = trace_ipu(lambda t: poptorch.recomputationCheckpoint(t.sin()).cos(),
                   torch.zeros(3))
    assert torch.ops.poptorch.recomputation_checkpoint.default in targets(gm)
    x = torch.randn(3, requires_grad=True)
    gm(x).sum().backward()
    torch.testing.assert_close(x.grad, -torch.sin(x.sin()) * x.cos())


def test_set_available_memory():
    check_error(
        "You may only set available memory for torch.tensor values. "
        "<class 'float'> is not supported.", poptorch.set_available_memory,
        1.0, 0.5)
    x = torch.ones(2)
    assert poptorch.set_available_memory(x, 0.3) is x
    gm = trace_ipu(lambda t: poptorch.set_available_memory(t + 1, 0.3), x)
    node = next(n for n in gm.graph.nodes
                if n.target == torch.ops.poptorch.set_available_memory.default)
    assert node.args[1] == pytest.approx(0.3)
    torch.testing.assert_close(gm(torch.arange(2.0)), torch.arange(2.0) + 1)


@pytest.mark.parametrize("traced", [False, True])
def test_serialized_matmul(traced):
    lhs, rhs = torch.randn(4, 6), torch.randn(6, 5)
    mode = poptorch.MatMulSerializationMode.OutputChannels

    def fn(a, b):
        return poptorch.serializedMatMul(a, b, mode, 2, True)

    run = trace_ipu(fn, lhs, rhs) if traced else fn
    torch.testing.assert_close(run(lhs, rhs), torch.matmul(lhs, rhs))


@pytest.mark.parametrize("args, message", [
    (("bad", 2, False), r"mode must be a poptorch.MatMulSerializationMode "
     r"\(got str\)"),
    ((None, 2.0, False), r"factor must be an int \(got float\)"),
    ((None, 2, 1), r"keep_precision must be a bool \(got int\)")])
def test_serialized_matmul_asserts_argument_types(args, message):
    mode, factor, keep = args
    mode = mode or poptorch.MatMulSerializationMode.ReducingDim
    with pytest.raises(AssertionError, match=message):
        poptorch.serializedMatMul(torch.ones(2, 2), torch.ones(2, 2), mode,
                                  factor, keep)


@pytest.mark.parametrize(
    "setter", [poptorch.set_overlap_for_input, poptorch.set_overlap_for_output])
def test_set_overlap_keeps_any_nesting(setter):
    mode = poptorch.OverlapMode.OverlapAccumulationLoop
    a, b, c = torch.ones(1), torch.ones(2), torch.ones(3)
    nested = (a, [b, {"c": c}])
    assert setter(nested, mode) == nested
    with pytest.raises(poptorch.Error,
                       match="You may only set overlap for torch.tensor "
                       "inputs/outputs."):
        setter([a, "text"], mode)

    gm = trace_ipu(lambda x, y: setter([x, y], mode), a, b)
    name = setter.__name__
    assert getattr(torch.ops.poptorch, name).default in targets(gm)
    outs = gm(torch.full((1, ), 4.0), torch.zeros(2))
    torch.testing.assert_close(outs[0], torch.full((1, ), 4.0))


# for_loop --------------------------------------------------------------------
def test_for_loop_input_validation():
    message = "poptorch.for_loop expects input tensors (inputs) to be a list"
    with pytest.raises(ValueError, match=r"\(Object is not list\)"):
        poptorch.for_loop(2, lambda x: x, (torch.ones(1), ))
    with pytest.raises(ValueError) as info:
        poptorch.for_loop(2, lambda x, y: x, [torch.ones(1), 3])
    assert str(info.value) == (
        f"{message} of tensors. (Object contained in list at index 1 is not "
        "torch.tensor)")


def test_for_loop_on_cpu_runs_the_body_once():
    out = poptorch.for_loop(5, lambda x: x * 2, [torch.ones(2)])
    assert isinstance(out, list)
    torch.testing.assert_close(out[0], torch.full((2, ), 2.0))


def test_for_loop_traced_runs_count_times_on_new_inputs():
    count = 4

    def body(x, acc):
        return x * 2, acc + x

    def model(x, acc):
        return poptorch.for_loop(count, body, [x, acc])

    gm = trace_ipu(model, torch.ones(3), torch.zeros(3))
    x, acc = torch.randn(3), torch.randn(3)
    ref_x, ref_acc = x.clone(), acc.clone()
    for _ in range(count):
        ref_x, ref_acc = ref_x * 2, ref_acc + ref_x
    got_x, got_acc = gm(x, acc)
    torch.testing.assert_close(got_x, ref_x)
    torch.testing.assert_close(got_acc, ref_acc)


def test_for_loop_passes_inputs_by_value():

    def body(x):
        x.add_(1)
        return x

    gm = trace_ipu(lambda x: poptorch.for_loop(3, body, [x]), torch.zeros(2))
    x = torch.zeros(2)
    torch.testing.assert_close(gm(x)[0], torch.full((2, ), 3.0))
    torch.testing.assert_close(x, torch.zeros(2))


def test_for_loop_errors_on_the_ipu():
    with pytest.raises(poptorch.Error) as info:
        trace_ipu(lambda x: poptorch.for_loop(2, lambda t: t, [x]),
                  torch.ones(1), training=True)
    assert info.value.message == ("poptorch.for_loop() is only supported in "
                                  "inference.")
    check_error("outputs must match its inputs", trace_ipu,
                lambda x: poptorch.for_loop(2, lambda t: (t, t), [x]),
                torch.ones(1))
    check_error("outputs must match its inputs", trace_ipu,
                lambda x: poptorch.for_loop(2, lambda t: t.sum(), [x]),
                torch.ones(2))


# cond ------------------------------------------------------------------------
def test_cond_input_validation():
    with pytest.raises(ValueError) as info:
        poptorch.cond(True, lambda x: x, torch.ones(1), lambda x: x,
                      [torch.ones(1)])
    assert str(info.value) == (
        "poptorch.cond expects then_inps and else_inps tensors to be a list "
        "of tensors. (Object is not list)")
    with pytest.raises(ValueError, match="index 0 is not torch.tensor"):
        poptorch.cond(True, lambda x: x, [torch.ones(1)], lambda x: x, [1])


def test_cond_on_cpu_picks_a_branch_in_python():
    calls = []

    def then_body(x):
        calls.append("then")
        return x + 1

    def else_body(x):
        calls.append("else")
        return x - 1

    x = torch.zeros(2)
    out = poptorch.cond(torch.tensor(False), then_body, [x], else_body, [x])
    assert calls == ["else"] and isinstance(out, list)
    torch.testing.assert_close(out[0], x - 1)


def test_cond_traced_chooses_at_run_time_with_captures_and_nesting():
    weight = torch.tensor([10.0, 20.0])

    def model(flag, inner_flag, x):

        def then_body(t):
            return poptorch.cond(inner_flag, lambda u: u * weight, [t],
                                 lambda u: u + weight, [t])[0]

        return poptorch.cond(flag, then_body, [x], lambda t: -t, [x])[0]

    gm = trace_ipu(model, torch.tensor(True), torch.tensor(True),
                   torch.ones(2))
    x = torch.tensor([1.0, 2.0])
    for flag, inner in itertools.product([True, False], repeat=2):
        expected = (x * weight if inner else x + weight) if flag else -x
        torch.testing.assert_close(
            gm(torch.tensor(flag), torch.tensor(inner), x), expected)


def test_cond_errors_on_the_ipu():
    with pytest.raises(poptorch.Error) as info:
        trace_ipu(
            lambda c, x: poptorch.cond(c, lambda t: t, [x], lambda t: t, [x]),
            torch.tensor(True), torch.ones(1), training=True)
    assert info.value.message == (
        "poptorch.cond() is only supported in inference.")
    check_error(
        "then_body and else_body outputs differ", trace_ipu,
        lambda c, x: poptorch.cond(c, lambda t: [t, t], [x], lambda t: t, [x]),
        torch.tensor(True), torch.ones(1))


# dynamic_slice / dynamic_update ----------------------------------------------
@pytest.mark.parametrize("args, message", [
    ((1, 0, torch.tensor(0), 2, 1), "dynamic_slice must take a torch.tensor "
     "input. <class 'int'> is not supported."),
    ((None, 0.5, torch.tensor(0), 2, 1), "Dimension must be an integer."),
    ((None, 0, 0, 2, 1), "Slice start argument to dynamic_slice must be a "
     "torch.tensor. <class 'int'> is not supported."),
    ((None, 0, torch.tensor(0), 2.0, 1), "Size must be an integer."),
    ((None, 0, torch.tensor(0), 2, 1.0), "Step must be an integer."),
])
def test_dynamic_slice_argument_errors(args, message):
    args = (torch.ones(8), ) + args[1:] if args[0] is None else args
    with pytest.raises(poptorch.Error) as info:
        poptorch.dynamic_slice(*args)
    assert info.value.message == message
    assert info.value.type == "poptorch_py_error"


@pytest.mark.parametrize("start, size, step", [(2, 4, 1), (6, 4, 1),
                                               (1, 4, 2)])
def test_dynamic_slice_cpu_clips_like_torch(start, size, step):
    x = torch.arange(16.0).reshape(8, 2)
    out = poptorch.dynamic_slice(x, 0, torch.tensor(start), size, step)
    torch.testing.assert_close(out, x[start:start + size:step])


@pytest.mark.parametrize("dim, size, step", [(0, 4, 1), (1, 2, 1), (0, 4, 2),
                                             (-1, 3, 2)])
def test_dynamic_slice_traced_wraps_at_run_time(dim, size, step):
    x = torch.arange(48.0).reshape(8, 6)
    gm = trace_ipu(lambda t, s: poptorch.dynamic_slice(t, dim, s, size, step),
                   x, torch.tensor(0, dtype=torch.int32))
    length = x.shape[dim]
    new_x = x * 2 + 1
    for start in [0, 1, length - 1, length + 2, -1]:
        wrapped = [(start + i) % length for i in range(0, size, step)]
        torch.testing.assert_close(
            gm(new_x, torch.tensor(start, dtype=torch.int32)),
            new_x.index_select(dim, torch.tensor(wrapped)))


@pytest.mark.parametrize("size, step, message", [
    (0, 1, "The start and end of a slice must be different."),
    (-2, 1, "Taking a slice of a tensor with the end less than the start is "
     "not supported."),
    (7, 1, r"The size of the slice \(7\) must be a factor of the slicing "
     r"dimension \(8\)."),
    (4, 0, "Slicing step must be at least 1"),
])
def test_dynamic_slice_compile_time_errors(size, step, message):
    check_error(message, trace_ipu,
                lambda t, s: poptorch.dynamic_slice(t, 0, s, size, step),
                torch.ones(8), torch.tensor(0))


def test_dynamic_update_argument_errors():
    x, s = torch.ones(4, 2), torch.tensor(0)
    check_error(r"input and src tensors must have same dimensionality. "
                r"\(2\) vs \(1\)", poptorch.dynamic_update, x, torch.ones(2),
                0, s, 2)
    check_error(
        r"input and src tensor must have same dtype. \(torch.float32 vs "
        r"torch.int32\)", poptorch.dynamic_update, x,
        torch.ones(2, 2, dtype=torch.int32), 0, s, 2)
    check_error("dynamic_update must take a torch.tensor src",
                poptorch.dynamic_update, x, 1, 0, s, 2)
    check_error("Slice start argument to dynamic_update must be a "
                "torch.tensor", poptorch.dynamic_update, x, x, 0, 0, 2)
    for size, message in [(0, "must be different"), (-1, "end less than")]:
        check_error(message, trace_ipu,
                    lambda t, u, st: poptorch.dynamic_update(t, u, 0, st, size),
                    x, torch.ones(1, 2), s)


def test_dynamic_update_cpu_matches_slice_scatter():
    x, src = torch.zeros(5, 3), torch.ones(2, 3)
    out = poptorch.dynamic_update(x, src, 0, torch.tensor(1), 2)
    expected = x.clone()
    expected[1:3] = src
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, torch.zeros(5, 3))  # out of place


def test_dynamic_update_traced_uses_the_run_time_offset():
    x, src = torch.zeros(3, 6), torch.ones(3, 2)
    gm = trace_ipu(lambda t, u, s: poptorch.dynamic_update(t, u, 1, s, 2), x,
                   src, torch.tensor(0))
    new_src = torch.arange(6.0).reshape(3, 2) + 1
    for start in [1, 3, 5]:
        expected = x.clone()
        for i in range(2):  # documented: positions wrap past the end
            expected[:, (start + i) % 6] = new_src[:, i]
        torch.testing.assert_close(gm(x, new_src, torch.tensor(start)),
                                   expected)
    torch.testing.assert_close(x, torch.zeros(3, 6))
    check_error("must be equal", trace_ipu,
                lambda t, u, s: poptorch.dynamic_update(t, u, 1, s, 3), x,
                src, torch.tensor(0))
