"""The ``compile`` backend's row scatter-add loop (``inductor.row_scatter``):
which
scatters it takes, that compiled graphs give ATen's sums bit for bit, and
that a bad index raises ATen's message."""
import threading

import pytest
import torch
import torch._inductor.config
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from poptorch_core._executor.backends.inductor import row_scatter
from poptorch_core._executor.backends.inductor.cpu import CpuPostGradPass
from poptorch_core._executor.backends.executable import \
    _compile_with_inductor


def _fresh_two_threads():
    """Inductor's settings for these tests: no cache (it would skip code
    generation) and two threads, the case the loop is for. With one (as in
    a pytest-xdist worker) inductor writes its own serial loop instead of
    calling ATen, about as fast as this one."""
    return torch._inductor.config.patch({"fx_graph_cache": False,
                                         "cpp.threads": 2})


def _compile(fn, *inputs):
    """``fn`` traced and compiled as the ``compile`` backend compiles, and
    how many scatters that wrote as the loop."""
    gm = make_fx(fn)(*inputs)
    before = row_scatter.emitted()
    with _fresh_two_threads():
        compiled = _compile_with_inductor(gm, list(inputs))
    return compiled, row_scatter.emitted() - before


def _aggregate(rows):
    def aggregate(src, index):
        out = src.new_zeros(rows, src.shape[1])
        column = index.view(-1, 1).expand(-1, src.shape[1])
        return out.scatter_add(0, column, src * 2),
    return aggregate


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 40), n=st.integers(0, 60),
       width=st.sampled_from([1, 3, 16, 17, 64, 128]),
       seed=st.integers(0, 99))
def test_compiled_sums_equal_atens_bit_for_bit(rows, n, width, seed):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randn(n, width, generator=gen)
    # Skewed: most rows go to the first few outputs, as atom types do.
    index = torch.randint(0, rows, (n,), generator=gen) // \
        torch.randint(1, 4, (n,), generator=gen)
    compiled, loops = _compile(_aggregate(rows), src, index)
    assert loops == 1
    expected = torch.zeros(rows, width).scatter_add_(
        0, index.view(-1, 1).expand(-1, width), src * 2)
    assert torch.equal(compiled(src, index)[0], expected)


def test_embedding_gradients_from_columns_of_one_index():
    """The backward pass of summed embeddings, one table per column of
    ``x``: the index of each scatter is a strided column."""
    tables = [torch.randn(v, 8, requires_grad=True) for v in (7, 2, 5)]
    x = torch.stack([torch.randint(0, v, (30,)) for v in (7, 2, 5)], 1)
    grad = torch.randn(30, 8)

    def gradients(x, grad, *weights):
        out = sum(w.index_select(0, x[:, i]) for i, w in enumerate(weights))
        return torch.autograd.grad(out, weights, grad)

    weights = [t.detach() for t in tables]
    gm = make_fx(gradients)(x, grad, *tables)
    before = row_scatter.emitted()
    with _fresh_two_threads():
        compiled = _compile_with_inductor(gm, [x, grad] + weights)
    assert row_scatter.emitted() - before == 3
    expected = torch.autograd.grad(
        sum(t.index_select(0, x[:, i]) for i, t in enumerate(tables)),
        tables, grad)
    for got, want in zip(compiled(x, grad, *weights), expected):
        assert torch.equal(got, want)


@pytest.mark.parametrize("bad", [5, -1, -6])
def test_an_index_out_of_range_raises_atens_message(bad):
    src, index = torch.ones(4, 3), torch.tensor([0, 1, 4, 2])
    compiled, loops = _compile(_aggregate(5), src, index)
    assert loops == 1
    with pytest.raises(RuntimeError) as compiled_error:
        compiled(src, torch.tensor([0, bad, 1, 2]))
    with pytest.raises(RuntimeError) as aten_error:
        torch.zeros(5, 3).scatter_add_(
            0, torch.tensor([0, bad, 1, 2]).view(-1, 1).expand(-1, 3), src)
    assert str(compiled_error.value) == str(aten_error.value) == \
        f"index {bad} is out of bounds for dimension 0 with size 5"


def _double(src, index):
    out = src.new_zeros(3, src.shape[1])
    return out.scatter_add(0, index.view(-1, 1).expand(-1, src.shape[1]),
                           src),


def _along_columns(src, index):
    out = src.new_zeros(src.shape[0], 3)
    return out.scatter_add(1, index.view(1, -1).expand(src.shape[0], -1),
                           src),


def _not_expanded(src, index):
    return src.new_zeros(3, 2).scatter_add(0, index, src),


def _three_dims(src, index):
    out = src.new_zeros(3, 2, 2)
    return out.scatter_add(0, index.view(-1, 1, 1).expand(-1, 2, 2), src),


def _mean(src, index):
    out = src.new_zeros(3, 2)
    return out.scatter_reduce(0, index.view(-1, 1).expand(-1, 2), src,
                              "mean"),


@pytest.mark.parametrize("fn,src,index", [
    (_double, torch.randn(4, 2, dtype=torch.float64),
     torch.tensor([0, 2, 2, 1])),
    (_double, torch.randn(4, 129), torch.tensor([0, 2, 2, 1])),
    (_along_columns, torch.randn(2, 4), torch.tensor([0, 2, 2, 1])),
    (_not_expanded, torch.randn(4, 2),
     torch.tensor([[0, 1], [2, 2], [1, 0], [2, 1]])),
    (_three_dims, torch.randn(4, 2, 2), torch.tensor([0, 2, 2, 1])),
    (_mean, torch.randn(4, 2), torch.tensor([0, 2, 2, 1])),
], ids=["float64", "too wide", "dim 1", "index not expanded", "3-d",
        "mean"])
def test_other_scatters_stay_atens(fn, src, index):
    compiled, loops = _compile(fn, src, index)
    assert loops == 0
    torch.testing.assert_close(compiled(src, index)[0], fn(src, index)[0])


def test_compilations_outside_the_block_are_left_alone():
    """Only the ``compile`` backend's compilations, in their own thread,
    write the loop: a user's ``torch.compile`` elsewhere is inductor's."""
    src, index = torch.randn(6, 4), torch.tensor([0, 1, 1, 2, 0, 2])
    row_scatter._install()
    seen = []

    def user_compile():
        fn = torch.compile(_double, backend="inductor",
                           options={"cpp_wrapper": True})
        before = row_scatter.emitted()
        with _fresh_two_threads():  # inductor's settings are per thread
            seen.append(fn(src, index)[0])
        seen.append(row_scatter.emitted() - before)

    with row_scatter.fast_row_scatters():
        worker = threading.Thread(target=user_compile)
        worker.start()
        worker.join()
    torch._dynamo.reset()
    assert seen[1] == 0
    torch.testing.assert_close(seen[0], _double(src, index)[0])


def test_the_loop_is_part_of_the_compile_cache_key():
    """Inductor's cache must not hand back code written before the loop
    changed: the post-grad pass's key hashes this module too."""
    from torch._inductor.custom_graph_pass import get_hash_for_files
    from poptorch_core._executor.backends.inductor import cpu
    assert CpuPostGradPass().uuid() == get_hash_for_files(
        (cpu.__file__, row_scatter.__file__))
