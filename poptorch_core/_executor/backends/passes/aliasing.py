"""Which values of a captured graph share memory, read from op schemas.

Graph rewrites that remove a copy or an op (``passes.lowering``,
``passes.wide_inputs``) must not make a value alias one that is written in
place. ATen schemas say both things: a return annotated ``Tensor(a)`` views its
first argument (or may return it, like ``aten::to``), an argument annotated
``Tensor(a!)`` is written.

Example::

    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x.view(-1).add_(1))(torch.zeros(2, 2))
    >>> [n.name for n in written_roots(gm.graph)]
    ['x_1']
"""
from typing import Optional, Set

import torch
import torch.fx


def op_schema(node: torch.fx.Node) -> Optional[torch.FunctionSchema]:
    """The ATen schema of a ``call_function`` node, if it has one."""
    return getattr(node.target, "_schema", None) \
        if node.op == "call_function" else None


def is_view(node: torch.fx.Node) -> bool:
    """Whether ``node`` returns a view of (or may return) its first
    argument, without writing it."""
    schema = op_schema(node)
    return (schema is not None and bool(schema.returns)
            and schema.returns[0].alias_info is not None
            and not schema.returns[0].alias_info.is_write
            and bool(node.args) and isinstance(node.args[0], torch.fx.Node))


def view_root(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose memory ``node`` views (itself if it is no view)."""
    while is_view(node):
        node = node.args[0]
    return node


def written_roots(graph: torch.fx.Graph) -> Set[torch.fx.Node]:
    """Roots of every value an op of ``graph`` writes in place."""
    roots = set()
    for node in graph.nodes:
        schema = op_schema(node)
        if schema is None:
            continue
        for arg, value in zip(schema.arguments, node.args):
            if arg.alias_info is not None and arg.alias_info.is_write and \
                    isinstance(value, torch.fx.Node):
                roots.add(view_root(value))
    return roots
