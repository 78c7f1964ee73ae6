"""IPU rule checks on a captured graph, and the errors they raise.

An IPU runs graphs whose tensor shapes are all known at compile time and
whose values never travel back to the host in the middle of a step. Every
check here raises :class:`poptorch_core.Error` whose message names the op,
says why an IPU cannot run it, suggests the fix and points at the user's
source line (taken from the FX node's recorded stack trace, or from the live
Python stack for checks made while tracing).
"""
import os
import re
import traceback
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import torch
import torch.fx

from .._impl import cpp_error
from ..errors import Error
from . import library_code

aten = torch.ops.aten

# Frames from these directories are never "the user's line".
_INTERNAL_DIRS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
)
_FRAME_RE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)'
                       r'(?:\n\s+(?P<code>[^\n]*))?')

MOVE_TO_CPU_MSG = (
    "Illegal move to CPU (via `.to(\"cpu\")`) when using the dispatcher. "
    "Instead, return this output as an IPU tensor.")


def _is_internal(filename: str, excludes: Sequence[str]) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_INTERNAL_DIRS) or any(e in path for e in excludes)


def _pick_frame(frames: List[traceback.FrameSummary],
                excludes: Sequence[str]) -> Optional[traceback.FrameSummary]:
    """The innermost frame of user code: outside torch and poptorch_core,
    preferring code outside libraries (the user's own model over the
    library it calls)."""
    candidates = [f for f in frames if not _is_internal(f.filename, excludes)]
    own = [f for f in candidates if not library_code.is_library(f.filename)]
    chosen = own or candidates
    return chosen[-1] if chosen else None


def _format_frame(frame: Optional[traceback.FrameSummary]) -> str:
    if frame is None:
        return ""
    code = f"\n    {frame.line.strip()}" if frame.line else ""
    return f"\n  at {frame.filename}:{frame.lineno} in {frame.name}{code}"


def _describe_frames(frames: List[traceback.FrameSummary],
                     excludes: Sequence[str]) -> str:
    """The user's line, then the library frames it called (and a known
    fix), for an error message."""
    user = _pick_frame(frames, excludes)
    if user is None:
        return ""
    below = frames[next(i for i, f in enumerate(frames) if f is user) + 1:]
    # The excludes (PopTorch's default holds "site-packages/torch", which
    # also matches torch_geometric) keep library frames from being "the
    # user's line", not from being shown as the library code it called.
    library = [f for f in below if not _is_internal(f.filename, ())
               and library_code.is_library(f.filename)]
    return _format_frame(user) + library_code.describe(library)


def current_user_location(excludes: Sequence[str] = ()) -> str:
    """The user's source line of the live Python stack (and the library
    code below it), formatted for an error message (empty when every frame
    is internal)."""
    return _describe_frames(traceback.extract_stack(), excludes)


def node_user_location(node: torch.fx.Node,
                       excludes: Sequence[str] = ()) -> str:
    """The user's source line that created ``node`` (and the library code
    below it), from its stack trace."""
    stack = node.meta.get("stack_trace") or ""
    frames = [traceback.FrameSummary(m["file"], int(m["line"]), m["func"],
                                     line=m["code"] or None)
              for m in _FRAME_RE.finditer(stack)]
    return _describe_frames(frames, excludes)


def rule_error(message: str, location: str = "") -> Error:
    """An Error for a broken IPU rule; ``location`` is appended."""
    return cpp_error(message + location)


# --- Data-dependent output shapes --------------------------------------------

_DYNAMIC_FIX = {
    "nonzero": ("returns one row per non-zero element",
                "Use torch.nonzero_static(x, size=N, fill_value=-1), or keep a "
                "mask and use torch.where / multiplication by the mask"),
    "unique": ("returns one entry per distinct value",
               "Sort the values and keep a fixed-size result with a mask, or "
               "compute the distinct values on the host before the model"),
    "masked_select": ("returns one element per True entry of the mask",
                      "Use torch.where(mask, x, fill) or x * mask to keep the "
                      "shape fixed"),
    "boolean_index": ("x[mask] returns one row per True entry of the mask",
                      "Use torch.where(mask, x, fill) or x * mask to keep the "
                      "shape fixed, or index with a fixed-size integer tensor"),
    "repeat_interleave": ("without output_size, its length is the sum of the "
                          "repeat counts",
                          "Pass output_size=<total length> to "
                          "torch.repeat_interleave"),
    "bincount": ("its length is the largest input value plus one",
                 "Use torch.zeros(n).index_add_(0, x, ones) with a fixed n"),
    "one_hot": ("without num_classes (or with num_classes=-1) its width is "
                "the largest class value plus one",
                "Pass num_classes=<number of classes> to "
                "torch.nn.functional.one_hot"),
    "item": ("it reads a tensor's value back to the host, and IPU tensors have "
             "no values while the model is compiled",
             "Keep the value as a tensor; for data-dependent choices use "
             "torch.where or poptorch.cond; pass sizes (for example "
             "global_add_pool(x, batch, size=num_graphs)) as Python ints"),
}


def dynamic_shape_error(kind: str, op_name: str, location: str,
                        prefix: str = "") -> Error:
    """The error for an op whose output shape depends on the data;
    ``prefix`` is PopTorch's own text where it has one."""
    why, fix = _DYNAMIC_FIX[kind]
    return rule_error(
        f"{prefix}{op_name} cannot run on an IPU: {why}, so its output shape "
        f"depends on the data, and an IPU only runs graphs whose shapes are "
        f"fixed at compile time. {fix}.", location)


def _has_bool_index(node: torch.fx.Node) -> bool:
    indices = node.args[1] if len(node.args) > 1 else []
    for index in indices or []:
        if isinstance(index, torch.fx.Node):
            val = index.meta.get("val")
            if isinstance(val, torch.Tensor) and val.dtype in (torch.bool,
                                                               torch.uint8):
                return True
    return False


def _repeat_interleave_is_dynamic(node: torch.fx.Node) -> bool:
    return node.kwargs.get("output_size") is None and (
        len(node.args) < 3 or node.args[2] is None)


_DYNAMIC_OPS: Dict[object, tuple] = {
    aten.nonzero.default: ("nonzero", None),
    aten.argwhere.default: ("nonzero", None),
    aten._unique2.default: ("unique", None),
    aten.unique_dim.default: ("unique", None),
    aten.unique_consecutive.default: ("unique", None),
    aten.masked_select.default: ("masked_select", None),
    aten.index.Tensor: ("boolean_index", _has_bool_index),
    aten.repeat_interleave.Tensor: ("repeat_interleave",
                                    _repeat_interleave_is_dynamic),
    aten.repeat_interleave.self_Tensor: ("repeat_interleave",
                                         _repeat_interleave_is_dynamic),
    aten.bincount.default: ("bincount", None),
    aten._local_scalar_dense.default: ("item", None),
}
for _name in ("unique", "_unique"):
    if hasattr(aten, _name):
        _DYNAMIC_OPS[getattr(aten, _name).default] = ("unique", None)


def _op_name(target: object) -> str:
    name = getattr(target, "_schema", None)
    if name is not None:
        return f"aten::{target._schema.name.split('::')[-1]}"
    return getattr(target, "__name__", str(target))


def check_graph(graph_module: torch.fx.GraphModule,
                excludes: Sequence[str] = ()) -> None:
    """Raises an :class:`Error` for the first node that breaks an IPU rule."""
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        rule = _DYNAMIC_OPS.get(node.target)
        if rule is None:
            continue
        kind, predicate = rule
        if predicate is None or predicate(node):
            raise dynamic_shape_error(kind, _op_name(node.target),
                                      node_user_location(node, excludes))


#: PopTorch's error for ``F.one_hot`` without a class count.
ONE_HOT_UNSPECIFIED = ("OneHot num classes must be specified and must be "
                       "constant.")
#: Eager PyTorch's error for a class value the class count does not cover.
ONE_HOT_TOO_SMALL = "Class values must be smaller than num_classes."


def check_one_hot(args: Sequence[object], kwargs: Dict[str, object],
                  location: str) -> None:
    """``F.one_hot`` needs a fixed, positive number of classes: without
    one PopTorch's error, with one that no class value fits (0, a negative
    count) eager PyTorch's, each followed by the fix."""
    num_classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
    if num_classes == -1:
        raise dynamic_shape_error("one_hot", "one_hot", location,
                                  prefix=ONE_HOT_UNSPECIFIED + " ")
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or \
            num_classes < 1:
        raise rule_error(
            f"{ONE_HOT_TOO_SMALL} one_hot: num_classes must be a positive "
            f"int, got {num_classes!r}. Pass the number of classes.",
            location)


def zero_sized_error(shape: Iterable[int]) -> Error:
    return cpp_error(
        f"Zero-sized tensors are unsupported (Got shape {list(shape)})")


def ancestors(nodes: Iterable[torch.fx.Node]) -> set:
    """Every node reachable backwards from ``nodes`` (inclusive)."""
    seen, stack = set(), list(nodes)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
    return seen


def is_op(node: torch.fx.Node, predicate: Callable[[object], bool]) -> bool:
    return node.op == "call_function" and predicate(node.target)
