"""Tests of the ``poptorch`` ops that call host code or annotate the graph:
custom ops, the CTC decoder, ``poptorch.CPU``, MultiConv, NameScope,
Attribute, ``nearest`` and ``fps``."""
import gc
import itertools
import math

import pytest
import torch
import torch.fx.traceback as fx_traceback

import poptorch_core as poptorch
from ._ops_helpers import check_error, trace_ipu


# custom_op -------------------------------------------------------------------
@pytest.fixture
def scale_op():
    poptorch.registerCustomOp("Scale", "test.ops", 1,
                              lambda x, factor=1.0: [x * factor])
    yield
    poptorch.registerCustomOp("Scale", "test.ops", 1, None)


@pytest.mark.parametrize("attributes, message", [
    ({1: 2}, "All attribute keys must be strings."),
    ({"a": None}, "Attribute values must be"),
    ({"a": [1, "b"]}, "The types in a list/tuple attribute must all be the "
     "same."),
    ({"a": "caf\u00e9"}, "caf\u00e9 contains non-ASCII characters."),
    ({"\u00e9": 1}, "\u00e9 contains non-ASCII characters."),
])
def test_custom_op_attribute_validation(attributes, message):
    with pytest.raises(ValueError) as info:
        poptorch.custom_op([torch.ones(1)], "Op", "d", 1, [torch.ones(1)],
                           attributes)
    assert str(info.value).startswith(message)


def test_custom_op_on_cpu_returns_zeros_like_the_examples():
    example = torch.ones(2, 3, dtype=torch.float16)
    out = poptorch.custom_op([torch.ones(1)], "Op", "d", 1, [example])
    assert isinstance(out, list) and len(out) == 1
    torch.testing.assert_close(out[0], torch.zeros_like(example))


def test_custom_op_without_registration_names_the_op():
    check_error(r"Custom op my.domain::Missing \(version 3\).*"
                r"registerCustomOp", trace_ipu,
                lambda x: poptorch.custom_op([x], "Missing", "my.domain", 3,
                                             [x]), torch.ones(1))


def test_custom_op_registered_implementation_runs_in_the_graph(scale_op):
    del scale_op

    def model(x):
        return poptorch.custom_op([x], "Scale", "test.ops", 1, [x],
                                  {"factor": 3.0})[0]

    gm = trace_ipu(model, torch.ones(2))
    x = torch.randn(2, requires_grad=True)
    out = gm(x)
    torch.testing.assert_close(out, x.detach() * 3)
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2, ), 3.0))
    check_error("example_outputs describe", trace_ipu,
                lambda t: poptorch.custom_op([t], "Scale", "test.ops", 1,
                                             [t, t]), torch.ones(2))


# ctc_beam_search_decoder -----------------------------------------------------
def _collapse(alignment, blank):
    labels = []
    previous = None
    for a in alignment:
        if a != blank and a != previous:
            labels.append(a)
        previous = a
    return tuple(labels)


def _exact_ctc_ranking(log_probs, blank):
    """Every label sequence with its exact log probability (sum over all
    alignments), best first."""
    steps, classes = log_probs.shape
    totals = {}
    for alignment in itertools.product(range(classes), repeat=steps):
        score = sum(float(log_probs[t, a]) for t, a in enumerate(alignment))
        key = _collapse(alignment, blank)
        totals[key] = float(
            torch.logaddexp(torch.tensor(totals.get(key, -math.inf)),
                            torch.tensor(score)))
    return sorted(totals.items(), key=lambda kv: -kv[1])


def test_ctc_decoder_cpu_returns_zeros():
    probs = torch.randn(5, 2, 4)
    path_probs, lens, paths = poptorch.ctc_beam_search_decoder(
        probs, torch.tensor([5, 5]), top_paths=2)
    assert path_probs.shape == (2, 2) and lens.shape == (2, 2)
    assert paths.shape == (2, 2, 5)
    assert not path_probs.any() and not lens.any() and not paths.any()
    check_error("ctc_beam_search_decoder must take a torch.tensor",
                poptorch.ctc_beam_search_decoder, [1.0], torch.tensor([1]))


def test_ctc_decoder_traced_matches_exhaustive_search():
    steps, batch, classes, top = 4, 2, 3, 3
    gm = trace_ipu(
        lambda p, n: poptorch.ctc_beam_search_decoder(p, n, 0, 50, top),
        torch.zeros(steps, batch, classes).log_softmax(-1),
        torch.tensor([steps, steps]))
    log_probs = torch.randn(steps, batch, classes).log_softmax(-1)
    lengths = torch.tensor([4, 3])
    path_probs, lens, paths = gm(log_probs, lengths)
    for b in range(batch):
        ranking = _exact_ctc_ranking(log_probs[:lengths[b], b], 0)[:top]
        for rank, (labels, score) in enumerate(ranking):
            assert lens[b, rank] == len(labels)
            assert tuple(paths[b, rank, :len(labels)].tolist()) == labels
            assert not paths[b, rank, len(labels):].any()
            assert path_probs[b, rank].item() == pytest.approx(score,
                                                               abs=1e-5)


# CPU host callbacks ----------------------------------------------------------
def test_cpu_op_calls_the_host_function_at_run_time():
    seen = []

    def host(x):
        seen.append(x.clone())
        return x * 10

    op = poptorch.CPU(host, "host")
    torch.testing.assert_close(op(torch.ones(1)), torch.full((1, ), 10.0))
    seen.clear()
    gm = trace_ipu(lambda t: op(t + 1) - 1, torch.zeros(2))
    seen.clear()  # the trace-time call only discovers the outputs
    out = gm(torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(out, torch.tensor([19.0, 29.0]))
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], torch.tensor([2.0, 3.0]))


def test_cpu_op_returning_a_list():
    op = poptorch.CPU(lambda a, b: [a + b, a - b], "pair")
    gm = trace_ipu(lambda a, b: op(a, b), torch.ones(2), torch.ones(2))
    a, b = torch.randn(2), torch.randn(2)
    outs = gm(a, b)
    torch.testing.assert_close(outs[0], a + b)
    torch.testing.assert_close(outs[1], a - b)


def test_cpu_op_is_inference_only():
    op = poptorch.CPU(lambda a: a, "id")
    check_error("only supported in inference", trace_ipu, op, torch.ones(1),
                training=True)


# MultiConv, NameScope, Attribute ---------------------------------------------
def test_multi_conv_setters_and_errors():
    mc = (poptorch.MultiConv().availableMemoryProportions([0.1, 0.2])
          .partialsTypes(torch.half).enableConvDithering(True)
          .planType(poptorch.MultiConvPlanType.Serial)
          .perConvReservedTiles(10).cycleBackOff(0.5))
    assert isinstance(mc, poptorch.MultiConv)
    with pytest.raises(AssertionError,
                       match="Invalid available memory proportion!"):
        poptorch.MultiConv().availableMemoryProportions(1)
    with pytest.raises(ValueError, match="Invalid partials types. Expecting "
                       "torch.float or torch.half, got torch.int32"):
        poptorch.MultiConv().partialsTypes(torch.int32)
    with pytest.raises(ValueError, match="value must be bool or list of bools"):
        poptorch.MultiConv().enableConvDithering("yes")
    with pytest.raises(AssertionError, match="Invalid plan type!"):
        poptorch.MultiConv().planType("serial")
    with pytest.raises(AssertionError, match=r"perConvReservedTiles expects "
                       r"an int \(got float\)"):
        poptorch.MultiConv().perConvReservedTiles(1.5)
    with pytest.raises(AssertionError,
                       match=r"cycleBackOff expects a float \(got int\)"):
        poptorch.MultiConv().cycleBackOff(1)


def test_multi_conv_annotates_ops_and_refuses_nesting():
    conv_a, conv_b = torch.nn.Conv2d(1, 2, 3), torch.nn.Conv2d(1, 2, 3)

    def model(x):
        with poptorch.MultiConv().availableMemoryProportions(0.3):
            return conv_a(x) + conv_b(x)

    x = torch.randn(1, 1, 5, 5)
    with fx_traceback.preserve_node_meta():
        gm = trace_ipu(model, x)
    convs = [n for n in gm.graph.nodes if "convolution" in str(n.target)]
    assert len(convs) == 2
    for node in convs:
        settings = node.meta["custom"]["poptorch_multi_conv"]
        assert settings["available_memory_proportions"] == (0.3, )
    torch.testing.assert_close(gm(x), conv_a(x) + conv_b(x))
    with pytest.raises(poptorch.Error, match="Nested"):
        with poptorch.MultiConv():
            with poptorch.MultiConv():
                pass


def test_name_scope_prefixes_nested_ops():
    with pytest.raises(AssertionError,
                       match="Parameter to NameScope must be a string"):
        poptorch.NameScope(1)

    def model(x):
        with poptorch.NameScope("outer"):
            y = x + 1
            with poptorch.NameScope("inner"):
                y = y * 2
        return y - 1

    with fx_traceback.preserve_node_meta():
        gm = trace_ipu(model, torch.ones(1))
    scopes = {
        str(n.target): n.meta.get("custom", {}).get("poptorch_name_scope")
        for n in gm.graph.nodes if n.op == "call_function"
    }
    assert scopes == {"aten.add.Tensor": "outer",
                      "aten.mul.Tensor": "outer/inner",
                      "aten.sub.Tensor": None}


def test_attribute_sets_and_restores_values():
    from poptorch_core.ops.scopes import _current_attributes
    with pytest.raises(TypeError, match=r"poptorch.Attribute\(__outline=...\) "
                       r"expects a dict of attribute values"):
        poptorch.Attribute(__outline="layer")
    with pytest.raises(ValueError, match="non-ASCII"):
        poptorch.Attribute(__outline={"layer": "\u00e9"})
    with poptorch.Attribute(__outline={"layer": "a", "keep": 1}):
        with poptorch.Attribute(__outline={"layer": "b"}):
            assert _current_attributes() == {
                "__outline": {"layer": "b", "keep": 1}}
        assert _current_attributes() == {
            "__outline": {"layer": "a", "keep": 1}}
    assert _current_attributes() == {}


# nearest / fps ---------------------------------------------------------------
def _nearest_reference(x, y, batch_x, batch_y):
    out = []
    for i in range(x.size(0)):
        candidates = [j for j in range(y.size(0)) if batch_y[j] == batch_x[i]]
        dists = [float(((x[i] - y[j])**2).sum()) for j in candidates]
        out.append(candidates[dists.index(min(dists))])
    return torch.tensor(out)


def test_nearest_matches_a_brute_force_search():
    x, y = torch.randn(9, 3), torch.randn(5, 3)
    batch_x, batch_y = [0, 0, 0, 0, 1, 1, 1, 2, 2], [0, 0, 1, 2, 2]
    expected = _nearest_reference(x, y, batch_x, batch_y)
    torch.testing.assert_close(poptorch.nearest(x, y, batch_x, batch_y),
                               expected)
    torch.testing.assert_close(
        poptorch.nearest(x, y, torch.tensor(batch_x), torch.tensor(batch_y)),
        expected)
    no_batch = _nearest_reference(x, y, [0] * 9, [0] * 5)
    torch.testing.assert_close(poptorch.nearest(x, y), no_batch)
    # 1-D points are single features
    torch.testing.assert_close(
        poptorch.nearest(x[:, 0], y[:, 0]),
        _nearest_reference(x[:, :1], y[:, :1], [0] * 9, [0] * 5))


def test_nearest_traced_runs_on_new_points():
    batch_x, batch_y = [0, 0, 1, 1], [0, 1]
    gm = trace_ipu(lambda a, b: poptorch.nearest(a, b, batch_x, batch_y),
                   torch.zeros(4, 2), torch.zeros(2, 2))
    x, y = torch.randn(4, 2), torch.randn(2, 2)
    torch.testing.assert_close(gm(x, y),
                               _nearest_reference(x, y, batch_x, batch_y))


@pytest.mark.parametrize("batch_x, batch_y, match", [
    ([1, 0, 0], [0, 1], "'batch_x' is not sorted"),
    ([0, 0, 1], [1, 0], "'batch_y' is not sorted"),
    ([0, 0, 2], [0, 1], "Some batch indices occur in 'batch_x'"),
    ([0, 0], [0, 1], "entries"),
])
def test_nearest_rejects_bad_batch_lists(batch_x, batch_y, match):
    with pytest.raises(ValueError, match=match):
        poptorch.nearest(torch.randn(3, 2), torch.randn(2, 2), batch_x,
                         batch_y)


def _fps_reference(src, ptr, ratio):
    out = []
    for start, end in zip(ptr, ptr[1:]):
        points = src[start:end].double()
        count = math.ceil((end - start) * ratio)
        if count == 0:
            continue
        picked = [0]
        dist = ((points - points[0])**2).sum(1)
        while len(picked) < count:
            nxt = int(dist.argmax())
            picked.append(nxt)
            dist = torch.minimum(dist, ((points - points[nxt])**2).sum(1))
        out.extend(start + p for p in picked)
    return torch.tensor(out, dtype=torch.long)


@pytest.mark.parametrize("ptr, ratio", [([0, 10], 0.5), ([0, 4, 4, 11], 0.3),
                                        ([0, 3, 9, 12], 1.0)])
def test_fps_matches_the_reference(ptr, ratio):
    src = torch.randn(ptr[-1], 3)
    expected = _fps_reference(src, ptr, ratio)
    torch.testing.assert_close(poptorch.fps(src, ptr, ratio), expected)
    gm = trace_ipu(lambda s: poptorch.fps(s, ptr, ratio), torch.zeros_like(src))
    new = torch.randn_like(src)
    torch.testing.assert_close(gm(new), _fps_reference(new, ptr, ratio))


def test_fps_random_start_picks_farthest_points_per_example():
    ptr = [0, 6, 14]
    src = torch.randn(14, 2)
    out = poptorch.fps(src, ptr, 0.5, random_start=True)
    assert len(out) == 3 + 4 and len(set(out.tolist())) == len(out)
    assert all(0 <= i < 6 for i in out[:3]) and all(6 <= i < 14
                                                    for i in out[3:])
    # After the first pick, each pick is the farthest from those before it.
    for start, end, picks in ((0, 6, out[:3]), (6, 14, out[3:])):
        for k in range(1, len(picks)):
            dist = torch.stack([((src[start:end] - src[p])**2).sum(1)
                                for p in picks[:k]]).min(0).values
            assert dist.argmax() + start == picks[k]


_PTR_RULE = r"ptr must start at 0, never decrease and end at the number of " \
    r"points \(4\)"


@pytest.mark.parametrize("args, error, message", [
    (([1.0], [0, 1]), TypeError, "src must be a torch.Tensor, got list"),
    ((None, (0, 4)), TypeError, "ptr must be a non-empty list of ints"),
    ((None, [0, 4], "0.5"), TypeError, "ratio must be a float, got str"),
    ((None, [0, 4], 0.5, 1), TypeError, "random_start must be a bool, got int"),
    ((None, [0, 4], 1.5), ValueError, r"ratio must be in \(0, 1\], got 1.5"),
    ((None, [0, 3]), ValueError, _PTR_RULE),
    ((None, [0, 3, 2, 4]), ValueError, _PTR_RULE),
])
def test_fps_checks_its_arguments(args, error, message):
    args = (torch.randn(4, 2), ) + args[1:] if args[0] is None else args
    with pytest.raises(error, match=message):
        poptorch.fps(*args)


def test_cpu_op_graph_outliving_its_op_says_so():
    op = poptorch.CPU(lambda a: a + 1, "short-lived")
    gm = trace_ipu(lambda a: op(a), torch.ones(1))
    del op
    gc.collect()
    with pytest.raises(RuntimeError, match="no longer exists"):
        gm(torch.ones(1))
