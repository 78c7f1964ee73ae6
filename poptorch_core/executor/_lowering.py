"""The host form of a captured graph: PopTorch marker ops become ATen ops.

The captured graph keeps its ``poptorch::*`` ops: the Ir, the loss detection
and the IPU rule checks read them. On the host each of them is a Python
custom op, whose dispatch and autograd wrapper cost about 0.1 ms per call
and per backward. The graph the executor runs is a copy in which the ops
whose meaning ATen already has are replaced by those ATen ops, with the same
values and the same gradients:

* ``identity_loss(x, 0|1|2)`` -> ``aten.sum(x)`` / ``aten.mean(x)`` /
  ``aten.clone(x)``;
* identity markers (``nop``, ``set_available_memory``, ...) ->
  ``aten.clone(x)``.

Every other node, including ops with side effects (``ipu_print_tensor``,
host callbacks), is left as it is.

Example::

    >>> gm = lower_marker_ops(captured.graph_module)
    >>> any(n.target is torch.ops.poptorch.identity_loss.default
    ...     for n in gm.graph.nodes)
    False
"""
import torch
import torch.fx

from ..ops._registration import is_identity_op

__all__: list = []

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


def lower_marker_ops(graph_module: torch.fx.GraphModule
                     ) -> torch.fx.GraphModule:
    """A copy of ``graph_module`` with the marker ops replaced (the
    original, and its graph, are not modified); ``graph_module`` itself
    when it has none."""
    if all(_lowered_target(n) is None for n in graph_module.graph.nodes):
        return graph_module
    graph = torch.fx.Graph()
    graph.set_codegen(graph_module.graph._codegen)
    graph.output(graph.graph_copy(graph_module.graph, {}))
    for node in graph.nodes:
        target = _lowered_target(node)
        if target is not None:
            node.target = target
            node.args = (node.args[0],)
            node.kwargs = {}
    return torch.fx.GraphModule(graph_module, graph)
