"""Index inputs that may skip the round trip through int32 on the host.

The IPU has no 64-bit integers, so an int64 input reaches the graph as
int32 (range-checked: a value that does not fit is an error). Index inputs
(``edge_index``, ``batch``, categorical features) are then usually widened
straight back to int64 inside the graph, because that is what ATen's index
kernels take: two copies of every index tensor per step, for nothing that
can be observed.

An int32 input placeholder *only widens* when every path from it goes
through int32 views (``select``, ``reshape``, ``expand``, ``unbind``, ...)
to a cast to int64, no op writes it or a view of it in place, and no view of it is a
graph output. Feeding such an input its int64 host tensor (after the same
range check) then gives every op exactly the values it saw before: the
views are int64 views, and ``aten::to`` to the dtype a tensor already has
returns it unchanged.

Example::

    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> f = lambda w, idx: w.index_select(0, idx[0].to(torch.int64))
    >>> gm = make_fx(f)(torch.ones(4, 2), torch.zeros(2, 3, dtype=torch.int32))
    >>> only_widened_inputs(gm.graph, num_inputs=1)
    [0]
"""
import operator
from typing import Any, List, Optional

import torch
import torch.fx

from .aliasing import is_view, written_roots

_aten = torch.ops.aten


def _widens_to_int64(node: torch.fx.Node, source: torch.fx.Node) -> bool:
    """``node`` is ``source.to(torch.int64)`` (an ``aten::to`` that only
    changes the dtype, or the ``_to_copy`` it decomposes to)."""
    if node.op != "call_function" or not node.args or \
            node.args[0] is not source:
        return False
    if node.target is _aten.to.dtype:
        return len(node.args) >= 2 and node.args[1] is torch.int64
    if node.target is _aten._to_copy.default:
        return len(node.args) == 1 and \
            set(node.kwargs) == {"dtype"} and \
            node.kwargs["dtype"] is torch.int64
    return False


def _is_int32(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype is torch.int32


def _views_of(user: torch.fx.Node, node: torch.fx.Node
              ) -> Optional[List[torch.fx.Node]]:
    """The int32 views of ``node`` that ``user`` makes (one, or the
    ``getitem`` nodes of a list of views such as ``unbind``'s), or None
    when ``user`` is anything else. A view that reinterprets the dtype
    (``view(dtype)``) or an ``aten::to`` (which may return its input) is
    not one."""
    if not is_view(user) or user.args[0] is not node or \
            user.target.overloadpacket is _aten.to or \
            any(arg is node for arg in user.args[1:]) or \
            node in user.kwargs.values():
        return None
    value = user.meta.get("val")
    if isinstance(value, (list, tuple)):
        items = list(user.users)
        if not all(item.target is operator.getitem and
                   _is_int32(item.meta.get("val")) for item in items):
            return None
        return items
    return [user] if _is_int32(value) else None


def _only_widens(node: torch.fx.Node) -> bool:
    """Every use of ``node`` is a view that only widens, or a widening."""
    for user in node.users:
        if user.op == "output":
            return False
        if _widens_to_int64(user, node):
            if any(u.op == "output" for u in user.users):
                return False
            continue
        views = _views_of(user, node)
        if views is None or not all(_only_widens(v) for v in views):
            return False
    return True


def only_widened_inputs(graph: torch.fx.Graph, num_inputs: int
                        ) -> List[int]:
    """Positions, among the last ``num_inputs`` placeholders (the inputs;
    parameters and buffers come first), of the int32 inputs that only
    widen to int64 (see the module docstring)."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    inputs = placeholders[len(placeholders) - num_inputs:]
    written = written_roots(graph)
    positions = []
    for position, node in enumerate(inputs):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or \
                value.dtype is not torch.int32 or node in written:
            continue
        # ``aten::to`` may return its input, so its schema marks it a view:
        # a write to a widened value names the input in ``written`` too.
        if _only_widens(node):
            positions.append(position)
    return positions
