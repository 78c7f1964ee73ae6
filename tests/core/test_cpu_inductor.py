"""What the ``compile`` backend changes in inductor on the CPU: the pass
that turns row scatter-adds into ATen ``index_add`` (what it rewrites, that
rewritten graphs compute the same values), ``relu``'s backward kept as an
ATen op, and a message-passing model trained with both."""
import copy
import pickle

import pytest
import torch
import torch._functorch.config
import torch._inductor.config
from torch.fx.experimental.proxy_tensor import make_fx

import poptorch
from poptorch_core._executor.backends.inductor import row_scatter
from poptorch_core._executor.backends.inductor.cpu import (
    POST_GRAD_PASS, CpuPostGradPass, compile_fx_options)

_ROWS = torch.ops.aten.scatter_add.default


def _rewrite(fn, *inputs):
    """``fn`` traced to ATen with fake values (as post-grad graphs have
    them), the pass applied; returns the module and how many ops it
    rewrote."""
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    rewrites = CpuPostGradPass()
    rewrites(gm.graph)
    gm.recompile()
    return gm, rewrites.row_sums


def _put_rows(base, index, values):
    return torch.ops.aten.index_put(base, [index], values, True)


def _scatter_rows(base, column, src):
    return base.scatter_add(0, column.expand(src.shape), src)


def test_index_put_rows_become_scatter_adds_with_negative_indices():
    base, values = torch.randn(5, 3), torch.randn(6, 3)
    index = torch.tensor([0, 4, -1, 2, 2, -5])
    gm, rewritten = _rewrite(_put_rows, base, index, values)
    assert rewritten == 1
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert _ROWS in targets
    assert torch.ops.aten.index_put.default not in targets
    torch.testing.assert_close(gm(base, index, values),
                               _put_rows(base, index, values))


def test_relu_backward_expands_to_inductors_own_decomposition():
    grad = torch.randn(6, 3)
    out = torch.tensor([0.0, -1.0, 2.0, float("nan"), 0.5, -0.0]) \
        .repeat(3, 1).t().contiguous()

    def relu_backward(grad, out):
        return torch.ops.aten.threshold_backward(grad, out, 0)

    gm = make_fx(relu_backward, tracing_mode="fake")(grad, out)
    rewrites = CpuPostGradPass()
    rewrites(gm.graph)
    gm.recompile()
    assert rewrites.relu_masks == 1
    assert torch.ops.aten.threshold_backward.default not in [
        n.target for n in gm.graph.nodes]
    torch.testing.assert_close(gm(grad, out), relu_backward(grad, out))


def test_relu_backward_is_not_decomposed_before_the_split():
    decompositions = compile_fx_options()["decompositions"]
    assert torch.ops.aten.threshold_backward.default not in decompositions
    # Everything else inductor decomposes is still decomposed.
    assert torch.ops.aten.gelu_backward.default in decompositions


def test_out_of_range_indices_still_raise():
    base, values = torch.randn(5, 3), torch.randn(2, 3)
    gm, _ = _rewrite(_put_rows, base, torch.tensor([0, 1]), values)
    for bad in (5, -6, -100):
        # Named by its own value, as the op it replaces names it.
        with pytest.raises(RuntimeError, match=rf"index {bad} is out of "
                           r"bounds for dimension 0 with size 5"):
            gm(base, torch.tensor([0, bad]), values)


@pytest.mark.parametrize("fn,inputs", [
    # a scatter_add of an expanded column: inductor runs ATen's kernel
    (_scatter_rows,
     (torch.randn(4, 2, 3), torch.randint(0, 4, (7, 1, 1)),
      torch.randn(7, 2, 3))),
    # not accumulating: a plain write
    (lambda b, i, v: torch.ops.aten.index_put(b, [i], v, False),
     (torch.randn(5, 3), torch.tensor([0, 1]), torch.randn(2, 3))),
    # two index tensors
    (lambda b, i, v: torch.ops.aten.index_put(b, [i, i], v, True),
     (torch.randn(5, 5), torch.tensor([0, 1]), torch.randn(2))),
    # broadcast values
    (lambda b, i, v: torch.ops.aten.index_put(b, [i], v, True),
     (torch.randn(5, 3), torch.tensor([0, 1]), torch.randn(3))),
    # a full index, not an expanded column
    (lambda b, i, s: b.scatter_add(0, i, s),
     (torch.zeros(4, 3), torch.randint(0, 4, (6, 3)), torch.randn(6, 3))),
    # an index narrower than src: only part of src is added
    (lambda b, c, s: b.scatter_add(0, c.expand(6, 2), s),
     (torch.zeros(4, 3), torch.randint(0, 4, (6, 1)), torch.randn(6, 3))),
    # along dim 1
    (lambda b, c, s: b.scatter_add(1, c.expand(3, 6), s),
     (torch.zeros(3, 4), torch.randint(0, 4, (1, 6)), torch.randn(3, 6))),
])
def test_anything_else_is_left_alone(fn, inputs):
    _, rewritten = _rewrite(fn, *inputs)
    assert rewritten == 0


class _MessagePassing(torch.nn.Module):
    """Embeddings, a GINE-style message (gather, add, relu, scatter-add)
    and a pooled regression loss."""

    def __init__(self):
        super().__init__()
        self.atoms = torch.nn.Embedding(10, 16)
        self.bonds = torch.nn.Embedding(4, 16)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 16),
                                       torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))

    def forward(self, x, edge_index, edge_attr, batch, y):
        h, e = self.atoms(x), self.bonds(edge_attr)
        src, dst = edge_index[0].long(), edge_index[1].long()
        msg = (h.index_select(0, src) + e).relu()
        column = dst.view(-1, 1).expand_as(msg)
        h = h + torch.zeros_like(h).scatter_add(0, column, msg)
        out = self.mlp(h).squeeze(-1)
        pooled = out.new_zeros(4).scatter_add(0, batch.long(), out)
        loss = ((pooled - y) ** 2).mean()
        return pooled, poptorch.identity_loss(loss, reduction="none")


#: Row-accumulating index_puts in _MessagePassing's backward pass: the
#: gradients of its two embeddings and of its gather.
_ROW_GRADIENTS = 3


def _batches():
    gen = torch.Generator().manual_seed(0)
    for _ in range(8):
        yield (torch.randint(0, 10, (20,), generator=gen),
               torch.randint(0, 20, (2, 40), generator=gen),
               torch.randint(0, 4, (40,), generator=gen),
               torch.arange(20) // 5, torch.randn(4, generator=gen))


@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_message_passing_matches_interpret(threads):
    """With two threads inductor calls a scatter kernel for the row sums,
    which the ``compile`` backend writes as its own loop
    (``inductor.row_scatter``);
    with one it writes its own serial loop."""
    # Graphs loaded from inductor's caches skip the passes: compile afresh
    # so that the count below sees this run's rewrites.
    before = row_scatter.emitted()
    with torch._inductor.config.patch({"fx_graph_cache": False,
                                       "cpp.threads": threads}), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        _compiled_message_passing_matches_interpret()
    # The message sum and the three row gradients; the pooling sums a
    # vector, which stays ATen's.
    assert row_scatter.emitted() - before == (4 if threads == 2 else 0)


def _compiled_message_passing_matches_interpret():
    torch.manual_seed(0)
    model = _MessagePassing()
    results = {}
    before = (POST_GRAD_PASS.row_sums, POST_GRAD_PASS.relu_masks)
    for backend in ("compile", "interpret"):
        m = copy.deepcopy(model)
        opts = poptorch.Options()
        opts.Simulator.backend(backend)
        ipu = poptorch.trainingModel(
            m, opts, torch.optim.Adam(m.parameters(), lr=0.01))
        *first, last = _batches()
        losses = [ipu(*b)[1] for b in first + [last]]
        ipu.copyWeightsToHost()
        results[backend] = (m, torch.stack(losses))
    # The backward pass's embedding and gather gradients (index_put with
    # accumulate); the forward message sum is a scatter_add already.
    assert POST_GRAD_PASS.row_sums - before[0] == _ROW_GRADIENTS
    # relu's backward (two relus) is expanded after the split, so the
    # forward saved relu's output and no bool mask.
    assert POST_GRAD_PASS.relu_masks - before[1] == 2
    torch.testing.assert_close(results["compile"][1],
                               results["interpret"][1], rtol=1e-4, atol=1e-5)
    for p, q in zip(results["compile"][0].parameters(),
                    results["interpret"][0].parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_the_compile_options_keep_inductor_caches_usable():
    """Inductor hashes what compile_fx is given; a table of unpicklable
    decomposition functions made every compilation bypass its caches (a
    warm start recompiled everything). The table pickles by the ops it
    leaves out, so its hash is stable and names what it changes."""
    from torch._inductor.codecache import FxGraphCachePickler
    from torch._inductor.compile_fx import _ConstantDecompTable
    from poptorch_core._executor.backends.inductor.cpu import (
        KEPT_ATEN_OPS, compile_fx_options)
    pickler = FxGraphCachePickler(torch.fx.GraphModule(torch.nn.Module(),
                                                       torch.fx.Graph()))
    first = compile_fx_options()["decompositions"]
    second = compile_fx_options()["decompositions"]
    assert pickler.dumps(_ConstantDecompTable(first)) == \
        pickler.dumps(_ConstantDecompTable(second))
    assert not KEPT_ATEN_OPS & set(first) and len(first) > 100
    rebuilt = pickle.loads(pickle.dumps(first))
    assert set(rebuilt) == set(first)
