"""The host form of a captured graph: PopTorch marker ops become ATen ops.

The captured graph keeps its ``poptorch::*`` ops: the Ir, the loss detection
and the IPU rule checks read them. On the host each of them is a Python
custom op, whose dispatch and autograd wrapper cost far more than the op
itself, per call and per backward. The graph the executor runs is a copy
in which the ops whose meaning ATen already has are replaced by those ATen
ops, with the same values and the same gradients:

* ``identity_loss(x, 0|1|2)`` -> ``aten.sum(x)`` / ``aten.mean(x)`` /
  ``aten.clone(x)``;
* identity markers (``nop``, ``set_available_memory``, ...) ->
  ``aten.clone(x)``.

Every other node, including ops with side effects (``ipu_print_tensor``,
host callbacks), is left as it is. Training dropouts draw their masks from
uniform numbers (``dropout_masks``).

The copy also drops arithmetic identities (``x + 0``, ``x - 0``, ``x * 1``,
``x / 1`` with the result's dtype and shape equal to ``x``'s), such as the
``0 + first`` that Python's ``sum()`` of a list of tensors starts with: a
full pass over the tensor, forward and backward, for nothing. An identity
is kept when dropping it could make a value alias another one that is
written in place, or alias a graph input or output.

It drops no-op views and casts too: ``view``/``reshape``/``expand`` to the
shape ``x`` has and ``to(dtype)`` to the dtype it has, which return ``x``
itself or a view of it with the same dtype, shape and strides. Embeddings
and PyG's message passing leave several dozen of them in a GNN's graph
(``features[:, i].reshape(-1).to(torch.long)`` for an index that is
already int64, a ``view`` of a gather to its own shape), each a dispatch
and, on tensors that need gradients, a node of the backward pass. Since
the value aliases ``x`` already, dropping one adds no aliasing; it is kept
when ``x``'s memory is written in place, or when the view is returned.

Example::

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def loss(x):
    ...     return poptorch.identity_loss(x.tanh(), reduction="mean")
    >>> captured = make_fx(loss)(torch.ones(3))
    >>> [str(n.target) for n in lower_for_host(captured).graph.nodes
    ...  if n.op == "call_function"]
    ['aten.tanh.default', 'aten.mean.default']
"""
from typing import Optional

import torch
import torch.fx

from ....ops._registration import is_identity_op
from .aliasing import view_root, written_roots
from .dropout_masks import has_dropout, rewrite_dropout

_aten = torch.ops.aten
_LOSS_REDUCTIONS = {0: _aten.sum.default, 1: _aten.mean.default,
                    2: _aten.clone.default}


def _lowered_target(node: torch.fx.Node):
    if node.op != "call_function":
        return None
    if node.target is torch.ops.poptorch.identity_loss.default:
        return _LOSS_REDUCTIONS[node.args[1]]
    if is_identity_op(node.target):
        return _aten.clone.default
    return None


_NEUTRAL = {_aten.add.Tensor: 0, _aten.add.Scalar: 0, _aten.sub.Tensor: 0,
            _aten.sub.Scalar: 0, _aten.mul.Tensor: 1, _aten.mul.Scalar: 1,
            _aten.div.Tensor: 1, _aten.div.Scalar: 1}


def _identity_input(node: torch.fx.Node, written: set
                    ) -> Optional[torch.fx.Node]:
    """``x`` when ``node`` computes ``x`` unchanged and may be dropped."""
    if node.op != "call_function" or node.target not in _NEUTRAL or \
            len(node.args) != 2 or node.kwargs:
        return None
    x, other = node.args
    if not isinstance(x, torch.fx.Node) or isinstance(other, bool) or \
            not isinstance(other, (int, float)) or \
            other != _NEUTRAL[node.target]:
        return None
    out, val = node.meta.get("val"), x.meta.get("val")
    if not isinstance(out, torch.Tensor) or \
            not isinstance(val, torch.Tensor) or out.dtype != val.dtype or \
            out.shape != val.shape:
        return None
    root = view_root(x)
    # After the swap, writes to x or to the node's value reach both.
    if root.op == "placeholder" or root in written or node in written or \
            any(user.op == "output" for user in node.users):
        return None
    return x


#: Ops that return their input, or a view of it, with the requested shape
#: or dtype.
_SHAPE_OR_DTYPE_VIEWS = (_aten.view.default, _aten.reshape.default,
                         _aten.expand.default, _aten.to.dtype)


def _no_op_view_input(node: torch.fx.Node, written: set
                      ) -> Optional[torch.fx.Node]:
    """``x`` when ``node`` views (or returns) ``x`` with ``x``'s own dtype,
    shape and strides, and may be dropped."""
    if node.op != "call_function" or \
            node.target not in _SHAPE_OR_DTYPE_VIEWS or \
            not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    if node.target is _aten.to.dtype:
        # to(x, dtype, non_blocking, copy, memory_format): only the plain
        # form returns x itself.
        if len(node.args) > 3 or set(node.kwargs) - {"non_blocking"}:
            return None
    elif len(node.args) != 2 or set(node.kwargs) - {"implicit"}:
        return None
    x = node.args[0]
    out, val = node.meta.get("val"), x.meta.get("val")
    if not isinstance(out, torch.Tensor) or \
            not isinstance(val, torch.Tensor) or out.dtype != val.dtype or \
            out.shape != val.shape or out.stride() != val.stride():
        return None
    # Values in memory that something writes in place are left alone.
    if view_root(x) in written or \
            any(user.op == "output" for user in node.users):
        return None
    return x


def _dropped_for(node: torch.fx.Node, written: set
                 ) -> Optional[torch.fx.Node]:
    """The value that replaces ``node`` when it is an identity."""
    return _identity_input(node, written) or \
        _no_op_view_input(node, written)


def _drop_identities(graph: torch.fx.Graph) -> None:
    written = written_roots(graph)
    for node in list(graph.nodes):
        x = _dropped_for(node, written)
        if x is not None:
            node.replace_all_uses_with(x)
            graph.erase_node(node)


def copied_graph(graph_module: torch.fx.GraphModule) -> torch.fx.Graph:
    """A copy of ``graph_module``'s graph (same code generator) for a pass
    to rewrite: the original stays as it is (the captured graph is what the
    Ir shows)."""
    graph = torch.fx.Graph()
    graph.set_codegen(graph_module.graph._codegen)
    graph.output(graph.graph_copy(graph_module.graph, {}))
    return graph


def lower_for_host(graph_module: torch.fx.GraphModule
                     ) -> torch.fx.GraphModule:
    """A copy of ``graph_module`` with the marker ops replaced, the
    dropouts rewritten and the arithmetic identities dropped (the original,
    and its graph, are not modified); ``graph_module`` itself when there is
    nothing to change."""
    if all(_lowered_target(n) is None and _dropped_for(n, set()) is None
           for n in graph_module.graph.nodes) and \
            not has_dropout(graph_module.graph):
        return graph_module
    graph = copied_graph(graph_module)
    for node in graph.nodes:
        target = _lowered_target(node)
        if target is not None:
            node.target = target
            node.args = (node.args[0],)
            node.kwargs = {}
    rewrite_dropout(graph)
    _drop_identities(graph)
    return torch.fx.GraphModule(graph_module, graph)
