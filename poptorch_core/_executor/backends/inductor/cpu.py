"""What the ``compile`` backend changes in inductor for CPU graphs.

Two things that inductor's generated CPU code does much slower than ATen
(the measurements are in ``docs/design/compile_backend.rst``):

* **Row scatter-adds.** Message passing sums edge rows into node rows:
  ``scatter_add`` with an index expanded along the feature dims in the
  forward pass, and in the backward pass of every row gather
  (``index_select``, embeddings) an ``index_put`` with ``accumulate=True``.
  Inductor runs a ``scatter_add`` (a sum ``scatter_reduce``) on the CPU as
  ATen's kernel, through its C shim, when it has more than one thread
  (``config.cpp.fallback_scatter_reduce_sum``), but lowers an
  ``index_put`` to loops of atomic adds, several times slower. The
  post-grad pass (:class:`CpuPostGradPass`) rewrites each row-accumulating
  ``index_put`` into the ``scatter_add`` of an expanded column, so both
  run as ATen's kernel while inductor still fuses the element-wise work
  around them; narrow float32 rows, the GNN case, then run as a plain
  loop, faster than ATen's (``inductor.row_scatter``). Neither a Python custom
  op (its call overhead) nor ``aten.index_add`` (which inductor can only call
  through its generic dispatcher path, a slower C++ build) does as well.
* **Saved boolean masks.** Decomposed, ``relu``'s backward is
  ``where(out <= 0, 0, grad)``, and the partitioner saves the bool mask
  ``out <= 0`` from the forward pass; inductor's vectorised CPU code stores
  a bool tensor far more slowly than a float one. ``threshold_backward`` is
  therefore not
  decomposed (:data:`KEPT_ATEN_OPS`) until the graph is split: the forward
  pass saves ``relu``'s float output, and the post-grad pass turns the op
  into ``where(out <= threshold, 0, grad)`` in the backward graph, where
  inductor computes the mask in registers and never stores it.

The row rewrite takes only exact equivalents:
``index_put(base, [index], values, accumulate=True)`` with a 1-D int64
``index`` and ``values`` of shape ``(len(index), *base.shape[1:])``.
Negative indices of an ``index_put`` count from the end, as it counts them
(``scatter_add`` rejects them): the rewrite adds the row count to those in
range first, so out-of-range ones still raise with their own value.

How the C++ is built (:data:`FIRST_COMPILE_PATCHES`) is chosen for the
first step, whose compilation a user waits for:

* **One library per graph** (``cpp_wrapper``). By default every kernel is
  its own shared library, one ``g++`` run each; with the wrapper in C++ a
  graph is one library (a training step on the CPU is one graph,
  ``passes.training_step``: one library). Steady steps take as long either way.
* **The wrapper and the kernels as two objects**
  (``cpp_wrapper_build_separate``): the wrapper (allocations and calls,
  built at -O1) and the kernels (at -O3) are compiled by two ``g++`` runs
  side by side (``inductor.background_builds``), then linked, so that the build
  uses two cores.
* **Precompiled headers, built in the background.** Inductor's own
  setting (``cpp_cache_precompile_headers``, on unless
  ``TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS=0``) applies where inductor
  can key the headers (:func:`use_precompiled_headers`), but a missing
  header (built once per machine) is built after the compilation that
  needed it, at the lowest priority, rather than inside it
  (``inductor.precompiled_headers``): a first run on a machine takes as long as
  without headers, and later compilations are shorter.

All these choices live in this file and ``inductor.row_scatter``, whose hashes
are the pass's cache key: a change to any of them compiles afresh instead of
reusing inductor's cache.

Example::

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def gather_grad(base, index, values):
    ...     return torch.ops.aten.index_put(base, [index], values, True)
    >>> gm = make_fx(gather_grad, tracing_mode="fake")(
    ...     torch.zeros(3, 2), torch.tensor([0, 2, -1]), torch.ones(3, 2))
    >>> POST_GRAD_PASS(gm.graph)
    >>> torch.ops.aten.scatter_add.default in [
    ...     n.target for n in gm.graph.nodes]
    True
"""
import functools
from typing import Any, Dict

import torch
import torch.fx
from torch import Tensor
from torch._inductor.custom_graph_pass import (CustomGraphPass,
                                               get_hash_for_files)

from .precompiled_headers import use_precompiled_headers

_aten = torch.ops.aten


def _val(node) -> object:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _is_long_vector(value: object, length: int) -> bool:
    return isinstance(value, Tensor) and value.dtype == torch.int64 and \
        value.dim() == 1 and value.shape[0] == length


def _index_put_rows(node: torch.fx.Node):
    """``(base, index, values)`` of a row-accumulating ``index_put``."""
    if node.target is not _aten.index_put.default or len(node.args) < 4 or \
            node.args[3] is not True or node.kwargs:
        return None
    base, indices, values = node.args[:3]
    if not isinstance(indices, (list, tuple)) or len(indices) != 1:
        return None
    base_val, values_val = _val(base), _val(values)
    if not isinstance(base_val, Tensor) or base_val.dim() < 1 or \
            not isinstance(values_val, Tensor) or values_val.dim() < 1:
        return None
    if not _is_long_vector(_val(indices[0]), values_val.shape[0]) or \
            values_val.shape[1:] != base_val.shape[1:] or \
            values_val.dtype != base_val.dtype:
        return None
    return base, indices[0], values


def _expand_threshold_backward(graph: torch.fx.Graph,
                               node: torch.fx.Node) -> bool:
    """Replaces ``threshold_backward(grad, out, threshold)`` with inductor's
    own decomposition, ``where(out <= threshold, 0, grad)``."""
    if node.target is not _aten.threshold_backward.default or node.kwargs:
        return False
    grad, out, threshold = node.args
    with graph.inserting_before(node):
        mask = _call(graph, _aten.le.Scalar, out, threshold)
        new = graph.call_function(_aten.where.ScalarSelf, (mask, 0.0, grad))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    graph.erase_node(node)
    return True


def _call(graph: torch.fx.Graph, op: Any, *args: Any) -> torch.fx.Node:
    """A new node ``op(*args)``, without a fake value: inductor's
    ``FakeTensorUpdater`` runs right after this pass and computes one for
    every node it has not seen (computing them here too would run each
    fake op twice)."""
    return graph.call_function(op, args)


def _count_negatives_from_the_end(graph: torch.fx.Graph,
                                  index: torch.fx.Node,
                                  rows: int) -> torch.fx.Node:
    """``index`` with its entries in ``[-rows, 0)`` moved up by ``rows``,
    as ``index_put`` reads them; others, out-of-range ones included (which
    ``scatter_add`` then rejects by their own value), stay."""
    in_range = _call(graph, _aten.bitwise_and.Tensor,
                     _call(graph, _aten.lt.Scalar, index, 0),
                     _call(graph, _aten.ge.Scalar, index, -rows))
    return _call(graph, _aten.where.self, in_range,
                 _call(graph, _aten.add.Scalar, index, rows), index)


def _rewrite_row_sum(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """Replaces a row-accumulating ``index_put`` with the ``scatter_add``
    of an expanded column, which inductor runs as ATen's kernel."""
    match = _index_put_rows(node)
    if match is None:
        return False
    base, index, values = match
    shape = list(_val(values).shape)
    with graph.inserting_before(node):
        index = _count_negatives_from_the_end(graph, index,
                                              _val(base).shape[0])
        column = _call(graph, _aten.view.default, index,
                       [shape[0]] + [1] * (len(shape) - 1))
        new = graph.call_function(
            _aten.scatter_add.default,
            (base, 0, _call(graph, _aten.expand.default, column, shape),
             values))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    graph.erase_node(node)
    return True


class CpuPostGradPass(CustomGraphPass):
    """The inductor post-grad pass (see the module docstring).
    :attr:`row_sums` and :attr:`relu_masks` count the ops it replaced, over
    all graphs."""

    def __init__(self) -> None:
        self.row_sums = 0
        self.relu_masks = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.op != "call_function":
                continue
            if _expand_threshold_backward(graph, node):
                self.relu_masks += 1
            elif _rewrite_row_sum(graph, node):
                self.row_sums += 1
        graph.eliminate_dead_code()

    def uuid(self) -> bytes:
        return _source_hash()


@functools.lru_cache(maxsize=None)
def _source_hash() -> bytes:
    from . import row_scatter
    return get_hash_for_files((__file__, row_scatter.__file__))


#: The post-grad pass the ``compile`` backend gives inductor for CPU graphs.
POST_GRAD_PASS = CpuPostGradPass()

#: How inductor builds the generated C++ (see the module docstring).
FIRST_COMPILE_PATCHES = {"cpp_wrapper": True,
                         "cpp_wrapper_build_separate": True,
                         "cpp_cache_precompile_headers":
                             use_precompiled_headers()}

#: Ops whose inductor decomposition the ``compile`` backend leaves out on
#: the CPU (see the module docstring).
KEPT_ATEN_OPS = frozenset({_aten.threshold_backward.default})


class _DecompositionsWithout(dict):
    """Inductor's decomposition table without some ops.

    Inductor's compilation caches hash what ``compile_fx`` is given, and
    the table's functions do not pickle, which made every compilation
    bypass the caches (a warm start recompiled everything). This table
    pickles as the names of the ops it leaves out: the rest is inductor's
    own table, which the torch version in the cache key already pins.
    """

    def __init__(self, left_out: frozenset):
        from torch._inductor.decomposition import select_decomp_table
        super().__init__((op, fn) for op, fn in select_decomp_table().items()
                         if op not in left_out)
        self.left_out = left_out

    def __reduce_ex__(self, protocol):
        return (_decompositions_without,
                (tuple(sorted(str(op) for op in self.left_out)),))


def _decompositions_without(op_names) -> _DecompositionsWithout:
    """Rebuilds a :class:`_DecompositionsWithout` from its op names."""
    ops = frozenset(op for op in KEPT_ATEN_OPS if str(op) in op_names)
    return _DecompositionsWithout(ops)


def compile_fx_options() -> Dict[str, Any]:
    """Keyword arguments for ``compile_fx`` on CPU graphs: the post-grad
    pass and the decompositions without :data:`KEPT_ATEN_OPS`."""
    return {"config_patches": {"post_grad_custom_post_pass": POST_GRAD_PASS,
                               **FIRST_COMPILE_PATCHES},
            "decompositions": _DecompositionsWithout(KEPT_ATEN_OPS)}
