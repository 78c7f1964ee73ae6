"""The ``interpret`` backend writes dead temporaries in place.

A GNN's step is mostly element-wise passes over node- and edge-sized
tensors (``relu`` after each linear layer and each message, sums of
embeddings and residuals), each allocating a fresh output of the size of its
input. When the input is a temporary that nothing reads afterwards, the op
can write it instead: ``relu(a)`` becomes ``relu_(a)`` and ``add(a, b)``
becomes ``add_(a, b)`` (or ``add_(b, a)`` when ``b`` is the temporary),
which spares an allocation and keeps the pass in memory that is already
in cache (``docs/design/interpret.rst`` has the measurement). ``compile``
does not need this: inductor plans its own buffers.

Invariants a rewritten op keeps, for values and for autograd:

* the written value ``a`` is the output of an op that allocates a new
  tensor (:data:`FRESH`: no view of anything, and not a graph input);
* ``a`` has that one user, so nothing reads it after the write;
* the producer's backward does not read its own output (``relu``'s,
  ``exp``'s do, so they are not in :data:`FRESH`): autograd's saved
  tensors are never overwritten, and its version check never fires;
* the result has ``a``'s shape and dtype: no broadcast of ``a`` and no
  type promotion, which ``add_`` could not express;
* ``add`` is swapped only when it has no ``alpha`` (``a + b == b + a``
  exactly in floating point).

Example::

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def mlp(x, w, b):
    ...     return torch.relu(torch.nn.functional.linear(x, w, b))
    >>> gm = make_fx(mlp)(torch.ones(4, 3), torch.ones(2, 3), torch.ones(2))
    >>> [str(n.target) for n in write_temporaries_in_place(gm).graph.nodes
    ...  if n.op == "call_function"]
    ['aten.t.default', 'aten.addmm.default', 'aten.relu_.default']
"""
from typing import Optional

import torch
import torch.fx

from .lowering import copied_graph

_aten = torch.ops.aten

#: Ops whose output is a new tensor and whose backward does not read that
#: output.
FRESH = frozenset({
    _aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.div.Tensor,
    _aten.index_select.default, _aten.linear.default, _aten.addmm.default,
    _aten.mm.default, _aten.bmm.default, _aten.embedding.default})

#: Out-of-place op -> the in-place op that writes its first argument.
IN_PLACE = {_aten.relu.default: _aten.relu_.default,
            _aten.add.Tensor: _aten.add_.Tensor}


def _writable(value, node: torch.fx.Node) -> bool:
    """Whether ``node`` may write its result into ``value``."""
    if not isinstance(value, torch.fx.Node) or \
            value.target not in FRESH or len(value.users) != 1:
        return False
    before, after = value.meta.get("val"), node.meta.get("val")
    return isinstance(before, torch.Tensor) and \
        isinstance(after, torch.Tensor) and \
        before.shape == after.shape and before.dtype == after.dtype


def _in_place_args(node: torch.fx.Node) -> Optional[tuple]:
    """The arguments of ``node``'s in-place form, the written one first;
    None when it has none that is safe."""
    if node.op != "call_function" or node.target not in IN_PLACE or \
            not node.args:
        return None
    if _writable(node.args[0], node):
        return node.args
    if node.target is _aten.add.Tensor and len(node.args) == 2 and \
            not node.kwargs and _writable(node.args[1], node):
        return node.args[1], node.args[0]
    return None


def write_temporaries_in_place(graph_module: torch.fx.GraphModule
                               ) -> torch.fx.GraphModule:
    """A copy of ``graph_module`` whose ``relu`` and ``add`` nodes write a
    dead temporary input in place where that is safe (see the module
    docstring); ``graph_module`` itself when none can."""
    if all(_in_place_args(n) is None for n in graph_module.graph.nodes):
        return graph_module
    graph = copied_graph(graph_module)
    # Decided on the copy as it was: a rewrite changes no node's users.
    rewrites = [(n, _in_place_args(n)) for n in graph.nodes]
    for node, args in rewrites:
        if args is not None:
            node.target = IN_PLACE[node.target]
            node.args = args
    return torch.fx.GraphModule(graph_module, graph)
