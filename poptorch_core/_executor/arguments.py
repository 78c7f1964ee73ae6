"""Binding call arguments to ``forward``'s signature and validating them
against the inputs the model was compiled with.

There is no automatic recompilation: any change of structure, dtype, shape
or non-tensor value after compilation is an error that says what changed and
how to recompile.
"""
import copy
import dataclasses
import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from .._args_parser import flattenTensors, getCustomParser
from ..errors import createPoptorchError

_MISMATCH_TAIL = (
    "\nThis error occurred because the inputs passed at runtime don't match "
    "the inputs used to compile the model.\nTo recompile the model for the "
    "new inputs create a new inferenceModel / trainingModel wrapper or call "
    "destroy() on the curent one and try again.")

_P = inspect.Parameter


@dataclasses.dataclass
class BoundArgs:
    """Arguments bound to ``forward``: called as ``forward(*positional,
    **named)``. ``names`` names each positional entry for messages."""
    positional: List[Any]
    names: List[str]
    named: Dict[str, Any]

    def as_structure(self) -> Tuple[List[Any], Dict[str, Any]]:
        return self.positional, self.named


class ArgsBinder:
    """Binds ``(args, kwargs)`` to the signature of ``model.forward``."""

    def __init__(self, model: Callable):
        fn = model.forward if isinstance(model, torch.nn.Module) else model
        self._params = list(inspect.signature(fn).parameters.values())
        self._has_var_kw = any(p.kind == _P.VAR_KEYWORD for p in self._params)

    def bind(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> BoundArgs:
        kwargs = dict(kwargs)
        positional, names, named = [], [], {}
        used = 0
        for p in self._params:
            if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD):
                if used < len(args):
                    if p.name in kwargs:
                        raise AssertionError(
                            f"Parameter {p.name} was passed more than once")
                    value, used = args[used], used + 1
                elif p.name in kwargs:
                    value = kwargs.pop(p.name)
                elif p.default is not _P.empty:
                    value = p.default
                else:
                    raise createPoptorchError(
                        f"Mandatory parameter {p.name} missing")
                positional.append(value)
                names.append(p.name)
            elif p.kind == _P.VAR_POSITIONAL:
                for i, value in enumerate(args[used:]):
                    positional.append(value)
                    names.append(f"*args[{i}]")
                used = len(args)
            elif p.kind == _P.KEYWORD_ONLY:
                if p.name in kwargs:
                    named[p.name] = kwargs.pop(p.name)
                elif p.default is not _P.empty:
                    named[p.name] = p.default
                else:
                    raise createPoptorchError(
                        f"Mandatory parameter {p.name} missing")
        if used != len(args):
            raise AssertionError(
                f"Too many arguments provided: expected at most {used} but got "
                f"{len(args)}")
        if kwargs:
            if not self._has_var_kw:
                allowed = [p.name for p in self._params]
                name = next(iter(kwargs))
                raise AssertionError(f"{name} is not a valid parameter."
                                     f"Allowed values are {allowed}")
            named.update(kwargs)
        return BoundArgs(positional, names, named)


def flat_input_names(bound: BoundArgs) -> List[str]:
    """A name for each tensor leaf of the bound arguments, in
    ``flattenTensors`` order: the argument's name, and which of its
    tensors for a container ("batch, tensor 1")."""
    names: List[str] = []
    for name, value in list(zip(bound.names, bound.positional)) + \
            list(bound.named.items()):
        if isinstance(value, torch.Tensor):
            names.append(name)
        else:
            names += [f"{name}, tensor {j}"
                      for j in range(len(flattenTensors(value)))]
    return names


# --- Input descriptions ------------------------------------------------------

def describe(value: Any) -> Any:
    """A hashable-enough description of an input used to detect changes:
    structure, tensor dtypes and shapes, and non-tensor values."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, value.shape)
    parser = getCustomParser(value)
    if parser is not None:
        names = parser.tensorNames(value)
        return ("custom", type(value),
                tuple(describe(t) for t in parser.yieldTensors(value)),
                None if names is None else tuple(names))
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(describe(v) for v in value))
    if isinstance(value, dict):
        return (type(value), {k: describe(v) for k, v in value.items()})
    return ("value", type(value), value)


def _mismatch(msg: str) -> Exception:
    return createPoptorchError(msg + _MISMATCH_TAIL)


def _type_name(desc: Any) -> str:
    if desc[0] == "tensor":
        return str(torch.Tensor)
    if desc[0] in ("custom", "value"):
        return str(desc[1])
    return str(desc[0])


def _batch_size_hint(expected: torch.Size, got: torch.Size) -> str:
    """A hint for inputs whose leading dimension alone changed: what a
    loader of variable-size graph batches gives."""
    if len(expected) != len(got) or not expected or \
            expected[1:] != got[1:]:
        return ""
    return ("\nOnly the first dimension changed: batches from a loader that "
            "batches graphs of different sizes (PyG's DataLoader) change "
            "shape at every step. Use poptorch_geometric.FixedSizeDataLoader, "
            "which pads every batch to the same shape, or give every call "
            "the same batch size.")


def _compare(name: str, expected: Any, got: Any) -> None:
    if expected == got:
        return
    if expected[0] != got[0] or (expected[0] in ("custom", "value")
                                 and expected[1] is not got[1]):
        raise _mismatch(f"Type mismatch for {name}: expected "
                        f"{_type_name(expected)} but got {_type_name(got)}.")
    kind = expected[0]
    if kind == "tensor":
        if expected[1] != got[1]:
            raise _mismatch(f"Data type mismatch for {name}: expected "
                            f"{expected[1]} but got {got[1]}.")
        raise _mismatch(f"Shape mismatch for {name}: expected {expected[2]} "
                        f"but got {got[2]}." + _batch_size_hint(expected[2],
                                                               got[2]))
    if kind == "value":
        raise _mismatch(f"Value mismatch for {name}: expected {expected[2]} "
                        f"but got {got[2]}.")
    if isinstance(expected[1], dict):
        _compare_dicts(name, expected[1], got[1])
        return
    labels = None
    if kind == "custom":
        labels = _compare_names(name, expected, got)
        expected, got = expected[:-1], got[:-1]
    labels = labels or [f"[{i}]" for i in range(len(expected[-1]))]
    if len(expected[-1]) != len(got[-1]):
        raise _mismatch(f"Length mismatch for {name}: expected "
                        f"{len(expected[-1])} elements but got {len(got[-1])}.")
    for label, e, g in zip(labels, expected[-1], got[-1]):
        _compare(f"{name}{label}", e, g)


def _compare_names(name: str, expected: Any,
                   got: Any) -> Optional[List[str]]:
    """For inputs whose parser names their tensors (a PyG ``Data``'s
    attributes): raises when the names differ, naming the missing and the
    unexpected ones; returns the labels of the tensors (``.x``), or None
    for unnamed ones."""
    names, got_names = expected[-1], got[-1]
    if names is None or got_names is None:
        return None
    if names != got_names:
        missing = [n for n in names if n not in got_names]
        unexpected = [n for n in got_names if n not in names]
        found = [f"lacks {_listed(missing)}"] if missing else []
        if unexpected:
            found.append(f"has {_listed(unexpected)} in addition")
        raise _mismatch(
            f"Attribute mismatch for {name} ({expected[1].__name__}): the "
            f"model was compiled with the tensors {_listed(names)}; this "
            f"one {' and '.join(found) or 'has them in another order'}. Pass "
            "batches with the attributes the model was compiled with (the "
            "same dataset and loader settings, such as exclude_keys), or "
            "delete the extra ones (del batch.name).")
    return [f".{n}" for n in names]


def _listed(names: List[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _compare_dicts(name: str, expected: Dict, got: Dict) -> None:
    if set(expected) != set(got):
        unexpected = ", ".join(str(k) for k in got if k not in expected)
        missing = ", ".join(str(k) for k in expected if k not in got)
        raise _mismatch(f"Keys mismatch for {name}: Unexpected arguments: "
                        f"{unexpected}. Missing arguments: {missing}.")
    for key in expected:
        _compare(f"{name}[{key!r}]" if name != "named arguments" else key,
                 expected[key], got[key])


@dataclasses.dataclass
class InputSignature:
    """The compile-time inputs, to validate later calls against."""
    positional: Tuple[Any, ...]
    names: List[str]
    named: Dict[str, Any]

    @classmethod
    def of(cls, bound: BoundArgs) -> "InputSignature":
        return cls(tuple(describe(v) for v in bound.positional),
                   list(bound.names),
                   {k: describe(v) for k, v in bound.named.items()})

    def validate(self, bound: BoundArgs) -> BoundArgs:
        """Raises PopTorch's mismatch error for the first difference.

        Returns ``bound`` with its dicts in the compiled key order: key
        order does not matter to PopTorch, and the compiled graph takes a
        dict's tensors in the order it was compiled with."""
        positional = tuple(describe(v) for v in bound.positional)
        named = {k: describe(v) for k, v in bound.named.items()}
        if positional != self.positional or named != self.named:
            if len(positional) != len(self.positional):
                raise _mismatch(
                    "Number of positional arguments mismatch: expected "
                    f"{len(self.positional)} arguments but got "
                    f"{len(positional)}.")
            for name, expected, got in zip(self.names, self.positional,
                                           positional):
                _compare(name, expected, got)
            _compare_dicts("named arguments", self.named, named)
        return BoundArgs(
            [_in_order(v, d) for v, d in zip(bound.positional,
                                             self.positional)],
            bound.names,
            {k: _in_order(bound.named[k], d) for k, d in self.named.items()})


def _in_order(value: Any, desc: Any) -> Any:
    """``value`` (which matches the description ``desc``) with every dict
    in ``desc``'s key order; ``value`` itself when nothing moves. The
    containers are rebuilt, the tensors are the caller's (in-place changes
    are written back to them).

    Example::

        >>> _in_order({"b": 1, "a": 2}, (dict, {"a": None, "b": None}))
        {'a': 2, 'b': 1}
    """
    if isinstance(value, dict) and isinstance(desc[1], dict):
        items = [(k, _in_order(value[k], d)) for k, d in desc[1].items()]
        if list(value) == [k for k, _ in items] and \
                all(v is value[k] for k, v in items):
            return value
        ordered = copy.copy(value)   # keeps an OrderedDict subclass's type
        ordered.clear()
        ordered.update(items)
        return ordered
    if isinstance(value, (tuple, list)) and desc[0] is type(value):
        items = [_in_order(v, d) for v, d in zip(value, desc[1])]
        if all(a is b for a, b in zip(items, value)):
            return value
        # A namedtuple takes its fields as arguments.
        return type(value)(*items) if hasattr(value, "_fields") else \
            type(value)(items)
    return value
