"""The ``compile`` backend's vectorisation strides
(``inductor.linear_strides``):
the same strides as inductor's own analysis, and the same generated code,
without ``sympy.simplify`` for linear indices."""
import pathlib

import pytest
import sympy
import torch
from hypothesis import given, settings, strategies as st
from torch._inductor import sizevars
from torch._inductor.utils import fresh_cache
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from poptorch_core._executor.backends.inductor import (background_builds,
                                                      linear_strides)
from poptorch_core._executor.backends.executable import Executable

_SYMBOLS = sympy.symbols("x0 x1 tmp5 indirect2", integer=True)
_X0, _X1, _TMP5, _INDIRECT2 = _SYMBOLS


@pytest.mark.parametrize("index, linear", [
    (64 * _X0 + _X1 + 9664, True),
    (_X1 + 64 * _TMP5, True),
    (-3 * _X0, True),
    (_X0, True),
    (sympy.Integer(7), True),
    (_X0 * _X1, False),
    (2 * _X0 ** 2, False),
    (sympy.Rational(1, 2) * _X0, False),
    (FloorDiv(_X0, 16) + _X1, False),
    (ModularIndexing(_X0, 1, 32), False),
    (4, False),
])
def test_linear_indices_are_recognised(index, linear):
    assert linear_strides.is_linear(index) is linear


_linear_terms = st.lists(
    st.tuples(st.sampled_from(_SYMBOLS), st.integers(-200, 200)),
    min_size=0, max_size=4)


@settings(max_examples=60, deadline=None)
@given(terms=_linear_terms, constant=st.integers(-10_000, 10_000),
       var=st.sampled_from(_SYMBOLS), vec_length=st.sampled_from([8, 16]))
def test_strides_of_linear_indices_are_inductors(terms, constant, var,
                                                 vec_length):
    index = sympy.Integer(constant) + sum(
        (coefficient * symbol for symbol, coefficient in terms),
        sympy.Integer(0))
    assert linear_strides.is_linear(index)
    assert linear_strides.stride_at_vec_range(index, var, vec_length) == \
        sizevars.stride_at_vec_range(index, var, vec_length)


@pytest.mark.parametrize("index", [
    FloorDiv(_X0, 16) * 4 + _X1,
    ModularIndexing(_X0, 1, 32) + 64 * _X1,
    _X0 * _X1 + 3,
])
def test_other_indices_go_to_inductor(index):
    assert linear_strides.stride_at_vec_range(index, _X0, 16) == \
        sizevars.stride_at_vec_range(index, _X0, 16)


def _message_passing_step(x, w, src, dst):
    messages = (x.index_select(0, src) @ w).relu()
    # Rows read in another order through a view: indices with // and %.
    mixed = x.view(4, 10, 16).transpose(0, 1).reshape(40, 16)
    return ((torch.zeros_like(x).index_add(0, dst, messages) * mixed).sum(),)


def _generated_sources(cache: pathlib.Path) -> dict:
    """The compiled graph's generated C++ files (the wrapper's and the
    kernels', not the ISA checks'), by name (a hash of the contents and
    the command line)."""
    x, w = torch.randn(40, 16), torch.randn(16, 16)
    src, dst = torch.randint(0, 40, (96,)), torch.randint(0, 40, (96,))
    cache.mkdir()
    with fresh_cache(dir=str(cache), delete=False):
        Executable(make_fx(_message_passing_step)(x, w, src, dst),
                   "compile").run([x, w, src, dst])
    return {path.name: path.read_bytes() for pattern in
            ("*.main.cpp", "*.optimized.cpp") for path in cache.rglob(pattern)}


def test_the_generated_code_is_inductors(tmp_path, monkeypatch):
    """A compilation with the fast path writes exactly the C++ files that
    inductor's own stride analysis leads to, and asks about both linear
    indices (the fast path) and others (inductor's)."""
    linear = linear_strides.is_linear
    seen = []
    monkeypatch.setattr(linear_strides, "is_linear",
                        lambda index: seen.append(linear(index)) or seen[-1])
    linear_strides.stride_at_vec_range.cache_clear()
    ours = _generated_sources(tmp_path / "ours")
    assert True in seen and False in seen
    monkeypatch.setattr(background_builds, "_vec_strides", None)
    linear_strides.stride_at_vec_range.cache_clear()
    inductors = _generated_sources(tmp_path / "inductors")
    assert linear_strides.stride_at_vec_range.cache_info().misses == 0
    assert len(ours) == 2 and ours == inductors
