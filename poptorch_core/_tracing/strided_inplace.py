"""The IPU rule for in-place changes of strided slices.

PopTorch turns an in-place change of a view (``x[1:3] = v``,
``x[:, 0] += 1``, ``x[0].fill_(2)``) into a functional update of the
viewed tensor, and cannot do so for a slice whose step is not 1
(``x[::2] = 0``): that raises PopTorch's error, with the user's line.

Example::

    >>> class Model(torch.nn.Module):
    ...     def forward(self, x):
    ...         x[::2] = 0
    ...         return x
    >>> poptorch.inferenceModel(Model())(torch.ones(4))
    Traceback (most recent call last):
    ...
    poptorch_core.errors.Error: ...In-place modification of slices with step size other than 1 is not supported...
"""
from typing import Optional, Sequence

import torch
import torch.fx

from . import rules

aten = torch.ops.aten

STEP_ERROR = ("In-place modification of slices with step size other than 1 "
              "is not supported.")


def _writes_first_argument(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.arguments:
        return False
    alias = schema.arguments[0].alias_info
    return alias is not None and alias.is_write and \
        not schema.arguments[0].kwarg_only


def _is_view(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def _strided_slice(node: object) -> Optional[torch.fx.Node]:
    """The slice with a step other than 1 that ``node`` is a view of."""
    while isinstance(node, torch.fx.Node) and _is_view(node):
        if node.target is aten.slice.Tensor and len(node.args) > 4 and \
                node.args[4] != 1:
            return node
        node = node.args[0]
    return None


def check_strided_inplace(graph_module: torch.fx.GraphModule,
                          excludes: Sequence[str] = ()) -> None:
    """Raises PopTorch's error for an in-place change of a strided slice."""
    for node in graph_module.graph.nodes:
        if _writes_first_argument(node) and node.args and \
                _strided_slice(node.args[0]) is not None:
            raise rules.rule_error(
                STEP_ERROR, rules.node_user_location(node, excludes))
