"""Inductor's vectorisation strides without ``sympy.simplify`` where it
cannot change them.

To vectorise a CPU loop, inductor's C++ code generation asks for the stride
of every index along the vectorised loop variable
(``codegen.cpp.stride_at_vec_range``). That first rewrites the index for
the vector's range (``sizevars.simplify_index_in_vec_range``), which ends in
``sympy.simplify(index)`` (slow, and called for every index), then takes
the difference of the index at ``var + 1`` and at
``var``. For a *linear* index, a sum of integer multiples of symbols plus
an integer (``64*x0 + x1 + 9664``, ``64*tmp5 + d1``: every index of a
static-shape graph without ``//`` or ``%`` in it), the rewrite changes
nothing, and whatever form ``simplify`` gives it, the difference is the
integer coefficient of ``var``: :func:`stride_at_vec_range` goes straight
to that difference (``sizevars.stride_at``, which inductor runs next
anyway), and leaves every other index to inductor's own function.

A GNN training step's indices are all linear, so its first compilation
skips every ``simplify`` call, and the generated C++ is byte for byte the
same (``docs/design/compile_backend.rst``). The ``compile`` backend swaps
this function in while it compiles (``inductor.background_builds``).

Example::

    >>> import sympy
    >>> x0, x1 = sympy.symbols("x0 x1", integer=True)
    >>> is_linear(64 * x0 + x1 + 9664), is_linear(x0 * x1)
    (True, False)
    >>> stride_at_vec_range(64 * x0 + x1 + 9664, x0, 16)
    64
"""
import functools
from typing import Optional

import sympy
from torch._inductor import sizevars


def is_linear(index: object) -> bool:
    """Whether ``index`` is a sum of integer multiples of symbols plus an
    integer (see the module docstring)."""
    if not isinstance(index, sympy.Expr):
        return False
    return all((term is sympy.S.One or isinstance(term, sympy.Symbol))
               and isinstance(coefficient, sympy.Integer)
               for term, coefficient in index.as_coefficients_dict().items())


@functools.lru_cache  # as inductor caches its own (128 entries)
def stride_at_vec_range(index: sympy.Expr, var: sympy.Symbol,
                        vec_length: Optional[int] = None) -> sympy.Expr:
    """``sizevars.stride_at_vec_range``, without the ``simplify`` of a
    linear ``index`` (see the module docstring)."""
    if is_linear(index):
        return sizevars.stride_at(index, var)
    return sizevars.stride_at_vec_range(index, var, vec_length)
