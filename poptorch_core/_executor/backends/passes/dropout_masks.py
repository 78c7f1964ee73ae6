"""Dropout draws its mask as uniform numbers compared with the keep
probability, not with ``bernoulli_``.

A captured ``aten.dropout(x, p, train=True)`` runs on the CPU as
``x * bernoulli_(1 - p) / (1 - p)``, and ATen's CPU ``bernoulli_`` with a
scalar probability is several times slower than ``rand`` on the same
number of elements: on a full-batch graph (Cora's 2708 x 1433 features) the
dropout of the input is most of a training step, in both backends (inductor
calls ATen's ``bernoulli_`` on the CPU, to match eager). The host form
writes it as

    noise = (rand(x.shape) < 1 - p).to(x.dtype) / (1 - p);  out = x * noise

which is the same computation as ATen's CPU dropout (``_dropout``: a
``bernoulli_(1 - p)`` noise divided by ``1 - p``, times ``x``), with the
same distribution and the same gradient (``noise``), drawn from the same
device generator. The mask of a given seed differs from the one
``bernoulli_`` draws; the device's stream is its own anyway (the IPU draws
other masks than the CPU). Both backends run this form, and ``compile``
calls ATen's ``rand`` (``fallback_random``), so ``interpret``, ``compile``
and ``auto``'s switch between them keep one stream.

The uniform numbers are float32 whatever ``x``'s dtype, so that a float16
``x`` keeps with probability ``1 - p``, not with its float16 rounding.
``p`` of 0 or 1 and ``train=False`` are left to ATen.

Example::

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def drop(x):
    ...     return torch.nn.functional.dropout(x, 0.5, training=True)
    >>> graph = make_fx(drop, pre_dispatch=True)(torch.ones(4)).graph
    >>> rewrite_dropout(graph)
    1
    >>> [str(n.target) for n in graph.nodes if n.op == "call_function"]
    ['aten.rand.default', 'aten.lt.Scalar', 'aten._to_copy.default', \
'aten.div.Scalar', 'aten.mul.Tensor']
"""
from typing import Optional

import torch
import torch.fx

_aten = torch.ops.aten


def _dropout_probability(node: torch.fx.Node) -> Optional[float]:
    """``p`` when ``node`` is a training dropout this pass rewrites."""
    if node.op != "call_function" or node.target is not _aten.dropout.default:
        return None
    args = list(node.args) + [node.kwargs.get(k) for k in ("p", "train")
                              if k in node.kwargs]
    if len(args) != 3 or not isinstance(args[0], torch.fx.Node):
        return None
    p, train = args[1], args[2]
    val = args[0].meta.get("val")
    if train is not True or not isinstance(p, float) or not 0 < p < 1 or \
            not isinstance(val, torch.Tensor):
        return None
    return p


def _with_value(node: torch.fx.Node, value: torch.Tensor) -> torch.fx.Node:
    node.meta["val"] = value
    return node


def _rewrite(graph: torch.fx.Graph, node: torch.fx.Node, p: float) -> None:
    x = node.args[0]
    val = x.meta["val"]
    fake_mode = getattr(val, "fake_mode", None)
    keep = 1.0 - p
    with graph.inserting_before(node):
        ops = [(_aten.rand.default, (list(val.shape),),
                {"dtype": torch.float32, "device": val.device,
                 "pin_memory": False}),
               (_aten.lt.Scalar, (None, keep), {}),
               (_aten._to_copy.default, (None,), {"dtype": val.dtype}),
               (_aten.div.Scalar, (None, keep), {}),
               (_aten.mul.Tensor, (x, None), {})]
        previous = None
        for target, args, kwargs in ops:
            args = tuple(previous if a is None else a for a in args)
            previous = graph.call_function(target, args, kwargs)
            if fake_mode is not None:
                with fake_mode:
                    values = [a.meta["val"] if isinstance(a, torch.fx.Node)
                              else a for a in args]
                    _with_value(previous, target(*values, **kwargs))
    node.replace_all_uses_with(previous)
    graph.erase_node(node)


def rewrite_dropout(graph: torch.fx.Graph) -> int:
    """Rewrites ``graph``'s training dropouts in place; returns how many."""
    found = [(node, p) for node in graph.nodes
             if (p := _dropout_probability(node)) is not None]
    for node, p in found:
        _rewrite(graph, node, p)
    return len(found)


def has_dropout(graph: torch.fx.Graph) -> bool:
    """Whether :func:`rewrite_dropout` would change ``graph``."""
    return any(_dropout_probability(n) is not None for n in graph.nodes)
