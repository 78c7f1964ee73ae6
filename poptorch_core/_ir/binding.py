"""Binding ``Ir.create_graph`` arguments to a callable's signature.

Tensors and :class:`TensorSpec` values become graph inputs wherever they sit:
as plain arguments, inside lists and tuples, inside dicts, in ``*args`` and in
``**kwargs``. Anything else is a Python constant frozen into the graph. Input
names follow PopXL: the parameter name, ``<name>_<i>`` for the i-th element of
a sequence (and of ``*args``), ``<name>_<key>`` for a dict entry and the bare
key for ``**kwargs`` entries. A parameter annotated with :class:`TensorByRef`
(or ``List[TensorByRef]``, ``Dict[str, TensorByRef]``, ...) is passed by
reference: in-place changes made by the graph reach the caller's tensor.

Example::

    >>> def fn(x: TensorByRef, ys, scale=2.0): ...
    >>> bound = bind_arguments(fn, "fn", torch.ones(2),
    ...                        [TensorSpec((3,)), TensorSpec((3,))])
    >>> [(i.name, i.by_ref) for i in bound.inputs]
    [('x', True), ('ys_0', False), ('ys_1', False)]
"""
import dataclasses
import inspect
import typing
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch

__all__ = ["TensorSpec", "TensorByRef", "GraphTensor", "BoundCall",
           "bind_arguments"]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of a graph input that has no data yet.

    Example::

        >>> spec = TensorSpec((2, 3), torch.float16)
        >>> TensorSpec.from_tensor(torch.zeros(2, 3, dtype=torch.half)) == spec
        True
    """
    shape: Tuple[int, ...]
    dtype: torch.dtype = torch.float32
    meta_shape: Tuple[int, ...] = ()

    def __post_init__(self):
        shape = tuple(self.shape)
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0
               for d in shape):
            raise ValueError(
                f"TensorSpec shape must be non-negative ints, got {shape}.")
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(
                f"TensorSpec dtype must be a torch.dtype, got {self.dtype!r}.")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "meta_shape", tuple(self.meta_shape))

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor) -> "TensorSpec":
        """The spec of an existing tensor."""
        return cls(tuple(tensor.shape), tensor.dtype)


class TensorByRef(torch.Tensor):
    """Type hint marking a ``create_graph`` argument as passed by reference.

    Only used in annotations; never instantiated.

    Example::

        >>> def accumulate(acc: TensorByRef, x):
        ...     acc += x
    """


@dataclasses.dataclass(frozen=True)
class GraphTensor:
    """A graph input or output: name, shape, dtype, passing convention.

    ``kind`` is ``"input"``, ``"parameter"``, ``"buffer"`` (inputs) or
    ``"output"``.
    """
    name: str
    shape: Tuple[int, ...]
    dtype: torch.dtype
    by_ref: bool = False
    kind: str = "input"

    @property
    def spec(self) -> TensorSpec:
        """Shape and dtype as a :class:`TensorSpec`."""
        return TensorSpec(self.shape, self.dtype)


_TENSOR_TYPES = (torch.Tensor, TensorSpec)


@dataclasses.dataclass
class BoundCall:
    """A call of ``fn`` with every tensor leaf replaced by a slot.

    ``inputs`` describes the slots in order and ``values`` holds what the
    caller passed in each (a tensor or a :class:`TensorSpec`);
    :meth:`call` runs ``fn`` with the slots filled by new tensors.
    """
    fn: Callable
    bound: inspect.BoundArguments
    inputs: List[GraphTensor]
    values: List[Any]

    def call(self, tensors: Sequence[torch.Tensor]) -> Any:
        """Calls ``fn`` with ``tensors`` in place of the input slots."""
        if len(tensors) != len(self.inputs):
            raise ValueError(f"Expected {len(self.inputs)} tensors, "
                             f"got {len(tensors)}.")
        filled = self.bound.signature.bind_partial()
        for name, value in self.bound.arguments.items():
            filled.arguments[name] = _fill(value, tensors)
        return self.fn(*filled.args, **filled.kwargs)


@dataclasses.dataclass(frozen=True)
class _Slot:
    index: int


def _fill(value: Any, tensors: Sequence[torch.Tensor]) -> Any:
    if isinstance(value, _Slot):
        return tensors[value.index]
    if isinstance(value, dict):
        return {k: _fill(v, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return _rebuild_sequence(value, [_fill(v, tensors) for v in value])
    return value


def _rebuild_sequence(original: Sequence, items: List[Any]) -> Sequence:
    if hasattr(original, "_fields"):  # namedtuples take fields positionally
        return type(original)(*items)
    return type(original)(items)


def _mentions_by_ref(hint: Any) -> bool:
    if hint is TensorByRef:
        return True
    return any(_mentions_by_ref(arg) for arg in typing.get_args(hint))


def _type_hints(fn: Callable) -> Dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: use raw hints
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return {}
        return {name: p.annotation for name, p in params.items()}


def _contains_tensor(value: Any) -> bool:
    if isinstance(value, _TENSOR_TYPES):
        return True
    if isinstance(value, dict):
        return any(_contains_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_contains_tensor(v) for v in value)
    return False


class _Collector:
    """Replaces tensor leaves by slots, recording one input per leaf."""

    def __init__(self):
        self.inputs: List[GraphTensor] = []
        self.values: List[Any] = []

    def visit(self, value: Any, name: str, by_ref: bool) -> Any:
        if isinstance(value, _TENSOR_TYPES):
            spec = (value if isinstance(value, TensorSpec) else
                    TensorSpec.from_tensor(value))
            self.inputs.append(
                GraphTensor(name, spec.shape, spec.dtype, by_ref))
            self.values.append(value)
            return _Slot(len(self.inputs) - 1)
        if isinstance(value, dict) and _contains_tensor(value):
            return {k: self.visit(v, f"{name}_{k}", by_ref)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)) and _contains_tensor(value):
            if not all(isinstance(v, _TENSOR_TYPES) or (
                    isinstance(v, (list, tuple, dict)) and _contains_tensor(v))
                       for v in value):
                raise TypeError(
                    "If passing a list or tuple of tensors or tensor specs, "
                    "all elements must be tensors or tensor specs. Argument "
                    f"'{name}' mixes them with other values: {value!r}")
            return _rebuild_sequence(value, [
                self.visit(v, f"{name}_{i}", by_ref)
                for i, v in enumerate(value)])
        return value


def bind_arguments(fn: Callable, qualname: str, *args: Any,
                   **kwargs: Any) -> BoundCall:
    """Binds ``args``/``kwargs`` to ``fn``'s signature and collects inputs.

    Raises:
        ValueError: the arguments do not match the signature.
        TypeError: a list or tuple mixes tensors with other values.
    """
    # A module is called (so its hooks run) but binds like its forward.
    declared = fn.forward if isinstance(fn, torch.nn.Module) else fn
    signature = inspect.signature(declared)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise ValueError(
            "The arguments, `args` and `kwargs`, do not match the signature "
            f"of the function `{qualname}`{signature}: {e}") from e
    bound.apply_defaults()
    hints = _type_hints(declared)
    collector = _Collector()
    for name, value in list(bound.arguments.items()):
        by_ref = _mentions_by_ref(hints.get(name))
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            bound.arguments[name] = {
                key: collector.visit(v, key, by_ref)
                for key, v in value.items()}
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            bound.arguments[name] = tuple(
                collector.visit(v, f"{name}_{i}", by_ref)
                for i, v in enumerate(value))
        else:
            bound.arguments[name] = collector.visit(value, name, by_ref)
    return BoundCall(fn, bound, collector.inputs, collector.values)
