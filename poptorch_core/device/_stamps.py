"""Where each traced op came from: its block and its module.

While a model is traced, :class:`OpStamper` is called before every torch
call the model makes (the tracer's ``on_op`` hook). It writes the active
block id and the innermost module's qualified name into
``torch.fx.traceback``'s current node metadata, which the tracer copies into
``node.meta["custom"]`` of every node the call creates (name scopes are
recorded the same way). The device model reads them back with
:func:`node_block` and :func:`node_module` to place ops on IPUs and to name
the largest memory consumers.

Example::

    >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    >>> with OpStamper(model, tracker=None) as stamp:
    ...     stamp.blocks
    []
"""
import contextlib
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.fx.traceback as fx_traceback

_BLOCK_KEY = "poptorch_block"
_MODULE_KEY = "poptorch_module"


class OpStamper(contextlib.AbstractContextManager):
    """The ``on_op`` callback of one trace (use it as a context manager).

    Args:
        model: the traced model; its ``named_modules`` name the ops.
        tracker: the trace's block tracker (``annotations._BlockTracker``)
            or None; its ``op_block()`` is recorded for each op.

    Attributes:
        blocks: ``tracker.op_block()`` of each op, in call order (the input
            of the pipelining rules).
    """

    def __init__(self, model: torch.nn.Module, tracker: Any):
        self._tracker = tracker
        self._names: Dict[int, str] = {
            id(m): name for name, m in model.named_modules()}
        self._stack: List[Optional[str]] = []
        self._handles: List[Any] = []
        self.blocks: List[Optional[Tuple[str, Optional[int]]]] = []

    def __enter__(self) -> "OpStamper":
        hooks = torch.nn.modules.module
        self._handles = [
            hooks.register_module_forward_pre_hook(self._enter_module),
            hooks.register_module_forward_hook(self._leave_module)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _enter_module(self, module: torch.nn.Module, args: Any) -> None:
        self._stack.append(self._names.get(id(module)))

    def _leave_module(self, module: torch.nn.Module, args: Any,
                      out: Any) -> None:
        if self._stack:
            self._stack.pop()

    def _module(self) -> Optional[str]:
        # Modules created inside forward have no name: use their parent's.
        return next((name for name in reversed(self._stack)
                     if name is not None), None)

    def __call__(self) -> None:
        block = self._tracker.op_block() if self._tracker else None
        self.blocks.append(block)
        meta = fx_traceback.current_meta
        # A fresh dict: nodes already created keep their own copy, and a
        # NameScope restoring its saved copy on exit is re-stamped by the
        # next op.
        custom = dict(meta.get("custom") or {})
        custom[_BLOCK_KEY] = None if block is None else block[0]
        custom[_MODULE_KEY] = self._module()
        meta["custom"] = custom


def _custom(node: torch.fx.Node) -> Dict[str, Any]:
    return node.meta.get("custom") or {}


def node_block(node: torch.fx.Node) -> Optional[str]:
    """The block id ``node`` was traced in (None: before any block)."""
    return _custom(node).get(_BLOCK_KEY)


def node_module(node: torch.fx.Node) -> Optional[str]:
    """The qualified name of the module whose forward traced ``node``
    (``""`` for the root model, None when unknown)."""
    return _custom(node).get(_MODULE_KEY)

