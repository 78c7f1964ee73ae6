"""Slices whose start is an IPU value: ``t[s:s + K]`` and ``t.narrow(d, s, K)``.

PopTorch runs a slice whose start is only known at run time as a dynamic
slice when its end is the start plus a compile-time constant ``K``: it takes
``K`` elements from the start and, unlike PyTorch, an end past the dimension
**wraps** to its beginning. Slices of several dimensions may be dynamic, and
gradients flow to the sliced tensor. Assigning to such a slice
(``t[s:s + K] = v``, ``t[s:s + K] += v``) writes at the wrapped positions.

Forms that cannot be expressed this way (an end that is not the start plus
a constant, a dynamic start with an open end, a dynamic step) raise
:class:`poptorch_core.Error` naming the op and the fix.

Example::

    >>> class Window(torch.nn.Module):
    ...     def forward(self, x, s):
    ...         return x[s:s + 4]
    >>> poptorch.inferenceModel(Window())(torch.arange(8.), torch.tensor([6]))
    tensor([6., 7., 0., 1.])
"""
import dataclasses
from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.fx

from .._impl import cpp_error
from ..errors import Error
from ..ops.slicing import wrapped_positions
from .strided_inplace import STEP_ERROR
from .host_values import graph_node, is_ipu_value, run_on_host

aten = torch.ops.aten

_FIX = ("Write the end as the start plus a constant (x[s:s + K]), use "
        "x.narrow(dim, s, K), or poptorch.dynamic_slice(x, dim, s, K, 1)")


@dataclasses.dataclass
class _DynamicSlice:
    dim: int
    start: torch.Tensor
    size: int
    step: int


def _entries(index: Any) -> Tuple[Any, ...]:
    return index if isinstance(index, tuple) else (index,)


def _consumes(entry: Any) -> int:
    """How many dimensions of the indexed tensor ``entry`` consumes."""
    if entry is None or entry is Ellipsis:
        return 0
    if isinstance(entry, torch.Tensor) and entry.dtype == torch.bool:
        return max(entry.dim(), 1)
    return 1


def _with_dims(entries: Sequence[Any], ndim: int
               ) -> List[Tuple[Any, Optional[int]]]:
    """Each index entry with the input dimension it applies to."""
    result, dim = [], 0
    used = sum(_consumes(e) for e in entries)
    for entry in entries:
        if entry is Ellipsis:
            result.append((entry, None))
            dim += ndim - used
        elif entry is None:
            result.append((entry, None))
        else:
            result.append((entry, dim))
            dim += _consumes(entry)
    return result


def _is_dynamic_bound(value: Any, tracer: Any) -> bool:
    return isinstance(value, torch.Tensor) and is_ipu_value(value, tracer)


def has_dynamic_slice(index: Any, tracer: Any) -> bool:
    """Whether ``index`` holds a slice with a bound that is an IPU value."""
    return any(isinstance(e, slice) and any(
        _is_dynamic_bound(b, tracer) for b in (e.start, e.stop, e.step))
        for e in _entries(index))


def _scalar(node: Any, tracer: Any) -> Optional[int]:
    """The compile-time integer ``node`` stands for, if it is one."""
    if isinstance(node, bool):
        return None
    if isinstance(node, int):
        return node
    if isinstance(node, torch.fx.Node) and node.op == "get_attr":
        value = getattr(tracer.root, node.target, None)
        if isinstance(value, torch.Tensor) and value.numel() == 1 and \
                not value.is_floating_point():
            return int(run_on_host(lambda v: v.reshape(()), (value,), {}))
    return None


def _offset(end: torch.fx.Node, start: torch.fx.Node,
            tracer: Any) -> Optional[int]:
    """K when ``end`` is computed as ``start + K`` in the graph."""
    if end is start:
        return 0
    if end.op != "call_function" or end.target not in (
            aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor,
            aten.sub.Scalar):
        return None
    sign = -1 if end.target in (aten.sub.Tensor, aten.sub.Scalar) else 1
    alpha = end.kwargs.get("alpha", 1)
    lhs, rhs = end.args[0], end.args[1]
    rhs_value = _scalar(rhs, tracer)
    if isinstance(lhs, torch.fx.Node) and rhs_value is not None:
        base = _offset(lhs, start, tracer)
        return None if base is None else base + sign * alpha * rhs_value
    lhs_value = _scalar(lhs, tracer)
    if sign == 1 and alpha == 1 and lhs_value is not None and \
            isinstance(rhs, torch.fx.Node):
        base = _offset(rhs, start, tracer)
        return None if base is None else base + lhs_value
    return None


def _error(message: str, location: str) -> Error:
    return cpp_error(message + location)


def _host_int(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return int(run_on_host(torch.Tensor.item, (value,), {}))
    return value


def _dynamic_slice(entry: slice, dim: int, op: str, tracer: Any,
                   location: str) -> _DynamicSlice:
    start, stop = entry.start, entry.stop
    if not (_is_dynamic_bound(start, tracer) and
            _is_dynamic_bound(stop, tracer)):
        raise _error(
            f"{op}: a slice whose start or end is only known at run time "
            "needs both of them as tensors, the end being the start plus a "
            "constant, so that its length is fixed at compile time. "
            f"{_FIX}.", location)
    if _is_dynamic_bound(entry.step, tracer):
        raise _error(f"{op}: the step of a slice must be known at compile "
                     f"time. {_FIX}.", location)
    start_node, stop_node = graph_node(start, tracer), graph_node(stop, tracer)
    size = _offset(stop_node, start_node, tracer)
    if size is None:  # the start may be the end plus a constant
        back = _offset(start_node, stop_node, tracer)
        size = None if back is None else -back
    if size is None:
        raise _error(
            f"{op}: the end of a slice with a start only known at run time "
            "must be the start plus a constant, so that its length is fixed "
            f"at compile time. {_FIX}.", location)
    return _DynamicSlice(dim, start, size, _host_int(entry.step) or 1)


def _check_size(piece: _DynamicSlice, length: int, location: str) -> None:
    if piece.size == 0:
        raise _error("The start and end of a slice must be different.",
                     location)
    if piece.size < 0:
        raise _error("Taking a slice of a tensor with the end less than the "
                     "start is not supported.", location)
    if piece.size > length:
        raise _error(f"A dynamic slice of {piece.size} elements is longer "
                     f"than the dimension it slices ({length}).", location)
    if piece.step < 1:
        raise _error("Slicing step must be at least 1", location)


def _split(tensor: torch.Tensor, index: Any, op: str, tracer: Any,
           location: str) -> Tuple[List[_DynamicSlice], List[Any]]:
    """The dynamic slices of ``index`` and the rest of it, with a full
    slice in place of each dynamic one."""
    pieces, rest = [], []
    for entry, dim in _with_dims(_entries(index), tensor.dim()):
        if isinstance(entry, slice) and (
                _is_dynamic_bound(entry.start, tracer) or
                _is_dynamic_bound(entry.stop, tracer) or
                _is_dynamic_bound(entry.step, tracer)):
            piece = _dynamic_slice(entry, dim, op, tracer, location)
            _check_size(piece, tensor.shape[dim], location)
            pieces.append(piece)
            rest.append(slice(None))
        elif isinstance(entry, slice):
            rest.append(slice(_host_int(entry.start), _host_int(entry.stop),
                              _host_int(entry.step)))
        else:
            rest.append(entry)
    return pieces, rest


def _positions(tensor: torch.Tensor, piece: _DynamicSlice) -> torch.Tensor:
    return wrapped_positions(piece.start, tensor.shape[piece.dim],
                              piece.size, piece.step)


def dynamic_getitem(tensor: torch.Tensor, index: Any, tracer: Any,
                    location: str) -> torch.Tensor:
    """``tensor[index]`` with its dynamic slices wrapping around."""
    pieces, rest = _split(tensor, index, "x[s:s + K]", tracer, location)
    out = tensor
    for piece in pieces:
        out = out.index_select(piece.dim, _positions(tensor, piece))
    return out[tuple(rest)]


def dynamic_narrow(tensor: torch.Tensor, dim: int, start: torch.Tensor,
                   length: int, location: str) -> torch.Tensor:
    """``tensor.narrow(dim, start, length)`` for a run-time ``start``."""
    dim = dim % max(tensor.dim(), 1)
    piece = _DynamicSlice(dim, start, int(length), 1)
    _check_size(piece, tensor.shape[dim], location)
    return tensor.index_select(dim, _positions(tensor, piece))


def _per_dim(rest: Sequence[Any], ndim: int) -> List[Any]:
    """``rest`` with one entry per dimension of the indexed tensor (the
    ellipsis and the missing trailing entries become full slices); new axes
    (None) stay where they are."""
    used = sum(_consumes(e) for e in rest)
    out: List[Any] = []
    for entry in rest:
        if entry is Ellipsis:
            out.extend([slice(None)] * (ndim - used))
        else:
            out.append(entry)
    consumed = sum(_consumes(e) for e in out)
    return out + [slice(None)] * (ndim - consumed)


def dynamic_setitem(tensor: torch.Tensor, index: Any, value: Any,
                    tracer: Any, location: str) -> None:
    """``tensor[index] = value`` in place, at the wrapped positions of the
    dynamic slices of ``index``."""
    pieces, rest = _split(tensor, index, "x[s:s + K] = v", tracer, location)
    by_dim = {piece.dim: piece for piece in pieces}
    if any(piece.step != 1 for piece in pieces):
        raise _error(STEP_ERROR, location)
    indices: List[torch.Tensor] = []
    kept_shape: List[int] = []
    eager_shape: List[int] = []
    for entry in _per_dim(rest, tensor.dim()):
        if entry is None:
            eager_shape.append(1)
            continue
        dim = len(indices)
        if isinstance(entry, slice):
            if entry.step not in (None, 1):
                raise _error(STEP_ERROR, location)
            positions = _positions(tensor, by_dim[dim]).long() \
                if dim in by_dim else torch.arange(
                    *entry.indices(tensor.shape[dim]), device=tensor.device)
            kept_shape.append(positions.numel())
            eager_shape.append(positions.numel())
        elif isinstance(entry, int):
            positions = torch.tensor(entry % tensor.shape[dim],
                                     device=tensor.device)
        else:
            raise _error(
                "x[s:s + K] = v: a dynamic slice cannot be combined with "
                "tensor (advanced) indices in one assignment. Assign through "
                "one dynamic slice at a time, or use poptorch.dynamic_update.",
                location)
        indices.append(positions)
    value = torch.as_tensor(value, dtype=tensor.dtype, device=tensor.device)
    value = value.expand(eager_shape).reshape(kept_shape)
    tensor.index_put_(tuple(_as_grid(indices, len(kept_shape))), value)


def _as_grid(indices: List[torch.Tensor], num_kept: int
             ) -> List[torch.Tensor]:
    """Index tensors that broadcast to the kept dimensions, in order."""
    grid, kept = [], 0
    for index in indices:
        if index.dim() == 0:
            grid.append(index)
            continue
        shape = [1] * num_kept
        shape[kept] = -1
        grid.append(index.reshape(shape))
        kept += 1
    return grid
