"""The trap of a returned loss that is not the loss PopTorch trains on.

PopTorch starts the backward from the final *loss node* (a torch loss or
``poptorch.identity_loss``), not from the value forward returns. When the
returned value is computed from that node by further operations, for example
``(F.cross_entropy(out, y, reduction="none") * mask).sum() / mask.sum()``,
training follows the gradients of the inner loss (here: the unmasked one)
while the printed loss looks right. PopTorch's semantics are kept; this
module only detects the case at compile time and warns, naming the loss
node, the returned value, both source lines and the fix.

Example::

    >>> import torch.nn.functional as F
    >>> class Model(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = torch.nn.Linear(4, 3)
    ...     def forward(self, x, y, mask):
    ...         out = self.fc(x)
    ...         per = F.cross_entropy(out, y, reduction="none")
    ...         return out, (per * mask).sum() / mask.sum()
    >>> ipu_model = poptorch.trainingModel(Model())
    >>> x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    >>> out, loss = ipu_model(x, y, torch.ones(8))  # logs the warning
    >>> # The fix: return poptorch.identity_loss((per * mask).sum() /
    >>> # mask.sum(), reduction="none") instead.
"""
from typing import Sequence

import torch.fx

from .._logging import logger
from . import rules

#: ``node.meta["custom"]`` key naming the torch loss an identity loss marks.
LOSS_META_KEY = "poptorch_loss"


def describe_loss(node: torch.fx.Node) -> str:
    """``F.cross_entropy(reduction='none')`` for a marked torch loss, or
    ``poptorch.identity_loss(...)`` for the user's own."""
    custom = node.meta.get("custom") or {}
    if LOSS_META_KEY in custom:
        return custom[LOSS_META_KEY]
    reductions = {0: "sum", 1: "mean", 2: "none"}
    reduction = reductions.get(node.args[1] if len(node.args) > 1 else None,
                               "?")
    return f"poptorch.identity_loss(reduction={reduction!r})"


def warn_if_loss_not_returned(loss: torch.fx.Node,
                              outputs: Sequence[torch.fx.Node],
                              excludes: Sequence[str] = ()) -> bool:
    """Warns when ``loss`` (the final loss) is not itself one of the graph's
    ``outputs`` but some output is computed from it; returns whether it
    warned."""
    if loss in outputs:
        return False
    derived = [(i, out) for i, out in enumerate(outputs)
               if loss in rules.ancestors([out])]
    if not derived:
        return False
    index, value = derived[0]
    logger.warning(_message(loss, index, value, excludes))
    return True


def _message(loss: torch.fx.Node, index: int, value: torch.fx.Node,
             excludes: Sequence[str]) -> str:
    loss_at = rules.node_user_location(loss, excludes) or \
        "\n  at (no user source line recorded)"
    value_at = rules.node_user_location(value, excludes) or \
        "\n  at (no user source line recorded)"
    return (
        "The loss that training minimises is not the value the model "
        f"returns. The backward starts from the loss node {loss.name} "
        f"({describe_loss(loss)}){loss_at}\n"
        f"but output {index} of the model ({value.name}) is computed from "
        f"that loss by further operations{value_at}\n"
        "PopTorch backpropagates from the inner loss node, so the gradients "
        "are those of that loss (for example the unmasked loss), not of the "
        "value you return and print. Fix: wrap the final value in "
        "poptorch.identity_loss(value, reduction=\"none\") (for a masked "
        "mean, multiply by a float mask and divide by its sum inside it).")
