"""Context managers that annotate the ops traced inside them:
``NameScope``, ``Attribute`` and ``MultiConv``.

Numerically they change nothing. While a model is traced they record their
settings in the FX node metadata of every op created inside them (under
``node.meta["custom"]``, keys ``"poptorch_name_scope"``,
``"poptorch_attributes"`` and ``"poptorch_multi_conv"``), which ``torch.fx``
keeps when the tracer runs under ``torch.fx.traceback.preserve_node_meta()``.
The current values are also readable with :func:`_current_name_scope`,
:func:`_current_attributes` and :func:`_current_multi_conv`.

Example::

    >>> class Encoder(torch.nn.Module):
    ...     def forward(self, x, w):
    ...         with poptorch.NameScope("encoder"), \\
    ...                 poptorch.Attribute(__outline={"layer": "embedding"}):
    ...             return x @ w
    >>> ir = poptorch.traceModel(Encoder(), torch.ones(2, 3), torch.ones(3, 4))
    >>> matmul = next(n for n in ir.main_graph.graph_module.graph.nodes
    ...               if n.op == "call_function")
    >>> matmul.meta["custom"]["poptorch_name_scope"]
    'encoder'
    >>> conv_a, conv_b = torch.nn.Conv1d(1, 2, 3), torch.nn.Conv1d(1, 2, 3)
    >>> x = torch.randn(1, 1, 8)
    >>> with poptorch.MultiConv().availableMemoryProportions(0.3):
    ...     a, b = conv_a(x), conv_b(x)
    >>> torch.equal(a, conv_a(x))      # the values are plain convolutions
    True
"""
import contextlib
import copy
import itertools
from typing import Any, Dict, List, Optional, Tuple, Type, Union

import torch
import torch.fx.traceback as fx_traceback

from .. import _impl
from ..enums import MultiConvPlanType
from .custom import validate_attributes

__all__ = ["NameScope", "Attribute", "MultiConv"]

_name_scopes: List[str] = []
_attributes: Dict[str, Dict[str, Any]] = {}
_multi_convs: List["MultiConv"] = []


def _current_name_scope() -> str:
    """The active name scope, ``"outer/inner"``, or ``""``."""
    return "/".join(_name_scopes)


def _current_attributes() -> Dict[str, Dict[str, Any]]:
    """A copy of the active ``Attribute`` settings."""
    return copy.deepcopy(_attributes)


def _current_multi_conv() -> Optional["MultiConv"]:
    """The active ``MultiConv``, if any."""
    return _multi_convs[-1] if _multi_convs else None


class NameScope:
    """Prefixes the names of the ops created inside it with ``name``
    (nested scopes join with ``/``)."""

    def __init__(self, name: str):
        if not isinstance(name, str):
            raise AssertionError('Parameter to NameScope must be a string')
        self.name = name
        self._annotation: List[contextlib.AbstractContextManager] = []

    def __enter__(self) -> "NameScope":
        _name_scopes.append(self.name)
        annotation = fx_traceback.annotate(
            {"poptorch_name_scope": _current_name_scope()})
        annotation.__enter__()
        self._annotation.append(annotation)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._annotation.pop().__exit__(*exc)
        _name_scopes.pop()


class Attribute:
    """Sets PopART op attributes for the ops created inside it and restores
    the previous values on exit.

    Example: ``Attribute(__outline={"layer": "embedding"})``.
    """

    def __init__(self, **attributes: Dict[str, Any]):
        for attribute, values in attributes.items():
            if not isinstance(values, dict):
                raise TypeError(
                    f"poptorch.Attribute({attribute}=...) expects a dict of "
                    "attribute values, e.g. Attribute(__outline={'layer': "
                    f"'embedding'}}), got {type(values).__name__}.")
            validate_attributes(values)
        self._attributes = copy.deepcopy(attributes)
        self._saved: List[Tuple[Dict[str, Dict[str, Any]], Any]] = []

    def __enter__(self) -> "Attribute":
        previous = copy.deepcopy(_attributes)
        for attribute, values in self._attributes.items():
            _attributes.setdefault(attribute, {}).update(values)
        annotation = fx_traceback.annotate(
            {"poptorch_attributes": _current_attributes()})
        annotation.__enter__()
        self._saved.append((previous, annotation))
        return self

    def __exit__(self, *exc: Any) -> None:
        previous, annotation = self._saved.pop()
        annotation.__exit__(*exc)
        _attributes.clear()
        _attributes.update(previous)


def _per_conv(name: str, value: Any,
              scalar_type: Union[Type, Tuple[Type, ...]]) -> Optional[tuple]:
    """``value`` as one setting per convolution, or AssertionError."""
    if value is None:
        return None
    if isinstance(value, scalar_type):
        return (value, )
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, scalar_type) for v in value):
        return tuple(value)
    raise AssertionError(f"Invalid {name}!")


def _encode_partials_type(dtype: Any) -> torch.dtype:
    if dtype in (torch.float, torch.half):
        return dtype
    raise ValueError("Invalid partials types. Expecting torch.float or "
                     f"torch.half, got {dtype!r}.")


class MultiConv:
    """Plans the convolutions created inside it together.

    The chainable setters take one value for all convolutions or a list with
    one value per convolution.
    """
    _ids = itertools.count()

    def __init__(self):
        self._available_memory_proportions: Optional[tuple] = None
        self._partials_types: Optional[tuple] = None
        self._enable_conv_dithering: Optional[tuple] = None
        self._plan_type: Optional[MultiConvPlanType] = None
        self._per_conv_reserved_tiles: Optional[int] = None
        self._cycle_back_off: Optional[float] = None
        self._annotation: Optional[contextlib.AbstractContextManager] = None

    def availableMemoryProportions(
            self, value: Union[float, List[float]]) -> "MultiConv":
        """Proportion of tile memory each convolution may use."""
        self._available_memory_proportions = _per_conv(
            "available memory proportion", value, float)
        return self

    def partialsTypes(self, value: Any) -> "MultiConv":
        """Partials type (``torch.float`` or ``torch.half``) per
        convolution."""
        values = value if isinstance(value, (list, tuple)) else [value]
        self._partials_types = tuple(_encode_partials_type(v) for v in values)
        return self

    def enableConvDithering(self, value: Union[bool,
                                               List[bool]]) -> "MultiConv":
        """Whether each convolution uses dithering."""
        try:
            self._enable_conv_dithering = _per_conv("conv dithering", value,
                                                    bool)
        except AssertionError:
            raise ValueError("value must be bool or list of bools") from None
        return self

    def planType(self, value: Optional[MultiConvPlanType]) -> "MultiConv":
        """Parallel or serial planning (None for the default)."""
        if value is not None and not isinstance(value, MultiConvPlanType):
            raise AssertionError("Invalid plan type!")
        self._plan_type = value
        return self

    def perConvReservedTiles(self, value: int) -> "MultiConv":
        """Tiles reserved per convolution."""
        if not isinstance(value, int):
            raise AssertionError(f"perConvReservedTiles expects an int (got "
                                 f"{type(value).__name__})")
        self._per_conv_reserved_tiles = value
        return self

    def cycleBackOff(self, value: float) -> "MultiConv":
        """Cycle back-off proportion of the planner."""
        if not isinstance(value, float):
            raise AssertionError(
                f"cycleBackOff expects a float (got {type(value).__name__})")
        self._cycle_back_off = value
        return self

    def _settings(self) -> Dict[str, Any]:
        return {
            "available_memory_proportions": self._available_memory_proportions,
            "partials_types": self._partials_types,
            "enable_conv_dithering": self._enable_conv_dithering,
            "plan_type": self._plan_type,
            "per_conv_reserved_tiles": self._per_conv_reserved_tiles,
            "cycle_back_off": self._cycle_back_off,
        }

    def __enter__(self) -> "MultiConv":
        if _multi_convs:
            raise _impl.cpp_error(
                "Nested poptorch.MultiConv is not supported: close the outer "
                "MultiConv first.")
        _multi_convs.append(self)
        settings = dict(self._settings(), id=next(MultiConv._ids))
        self._annotation = fx_traceback.annotate(
            {"poptorch_multi_conv": settings})
        self._annotation.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._annotation.__exit__(*exc)
        self._annotation = None
        _multi_convs.pop()
