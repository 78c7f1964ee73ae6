"""Graphviz DOT text for captured ``torch.fx`` graphs (no graphviz needed).

One DOT node per fx node, labelled with its name, its op (``aten.mm.default``,
``placeholder``, ...) and the dtype and shape of its value when known; one
edge per data dependency.

Example::

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x, w: x @ w)(torch.ones(2, 4), torch.ones(4, 3))
    >>> print(graph_module_to_dot(gm, "main"), end="")
    digraph "main" {
      ...
      "mm" [label="mm\\naten.mm.default\\nfloat32[2, 3]"];
      ...
      "x_1" -> "mm";
      ...
    }
"""
import os
from typing import Dict, Iterable, List, Optional, Tuple

import torch
import torch.fx

from .fx_meta import node_shape_dtype

__all__ = ["graph_module_to_dot", "enabled_dot_checks", "dot_check_enabled",
           "DOT_CHECKS_ENV", "DOT_DIR_ENV"]

#: Environment variable listing the enabled checks (as PopART's).
DOT_CHECKS_ENV = "POPART_DOT_CHECKS"
#: Environment variable giving the default output folder.
DOT_DIR_ENV = "POPTORCH_SIM_DOT_DIR"


def enabled_dot_checks() -> List[str]:
    """The check names listed in ``POPART_DOT_CHECKS`` (``:`` or ``,``
    separated, as PopART accepts ``FWD0:FINAL``)."""
    raw = os.environ.get(DOT_CHECKS_ENV, "")
    return [c.strip() for c in raw.replace(",", ":").split(":") if c.strip()]


def dot_check_enabled(check: str) -> bool:
    """True when ``check`` (case-sensitive) or ``ALL`` is enabled."""
    enabled = enabled_dot_checks()
    return "ALL" in enabled or check in enabled


def _quote(text: str) -> str:
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"')
               .replace("\n", "\\n"))
    return f'"{escaped}"'


def _describe(shape_dtype: Tuple[Tuple[int, ...], torch.dtype]) -> str:
    shape, dtype = shape_dtype
    return f"{str(dtype).replace('torch.', '')}{list(shape)}"


def _value_of(node: torch.fx.Node) -> Optional[str]:
    known = node_shape_dtype(node)
    if known is not None:
        return _describe(known)
    val = node.meta.get("val")
    if isinstance(val, (list, tuple)):  # multi-output ops
        parts = [_describe((tuple(v.shape), v.dtype)) for v in val
                 if isinstance(v, torch.Tensor)]
        return ", ".join(parts) or None
    return None


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    if node.op == "call_function":
        if isinstance(target, torch._ops.OperatorBase):
            return str(target)  # e.g. "aten.mm.default"
        return getattr(target, "__qualname__", str(target))
    if node.op in ("call_method", "call_module", "get_attr"):
        return f"{node.op} {target}"
    return node.op


def _node_label(node: torch.fx.Node,
                input_names: Dict[str, str]) -> List[str]:
    lines = [input_names.get(node.name, node.name), _op_name(node)]
    kind = node.meta.get("poptorch_kind")
    if kind:
        lines.append(kind)
    value = _value_of(node)
    if value:
        lines.append(value)
    return lines


def graph_module_to_dot(graph_module: torch.fx.GraphModule, name: str,
                        title: Optional[str] = None,
                        input_names: Optional[Iterable[str]] = None) -> str:
    """DOT text of ``graph_module``.

    Args:
        graph_module: the graph to draw.
        name: the DOT graph's name.
        title: a label drawn above the graph (defaults to ``name``).
        input_names: display names of the placeholders, in order (defaults to
            the fx names).
    """
    placeholders = [n for n in graph_module.graph.nodes
                    if n.op == "placeholder"]
    shown = dict(zip((n.name for n in placeholders), input_names or ()))
    lines = [f"digraph {_quote(name)} {{",
             f"  label={_quote(title or name)};", "  labelloc=t;",
             "  node [shape=box, fontname=monospace];"]
    for node in graph_module.graph.nodes:
        shape = {"placeholder": "ellipse", "output": "doubleoctagon",
                 "get_attr": "note"}.get(node.op)
        attrs = f"label={_quote(chr(10).join(_node_label(node, shown)))}"
        if shape:
            attrs += f", shape={shape}"
        lines.append(f"  {_quote(node.name)} [{attrs}];")
    for node in graph_module.graph.nodes:
        for source in node.all_input_nodes:
            lines.append(f"  {_quote(source.name)} -> {_quote(node.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"
