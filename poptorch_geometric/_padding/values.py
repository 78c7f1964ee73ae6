"""Padding values must be numbers, and finite.

A masked loss multiplies the per-entry loss by a 0/1 mask; a NaN or an
infinity on padding survives that (NaN x 0 is NaN), and one optimizer step
then turns every weight into NaN. Padding values are therefore checked
where they are given (``FixedSizeOptions``) and where a PyG ``Padding``
object is resolved for an attribute (its values may be computed).

Example::

    >>> check_pad_value("node_pad_value", -1.0)
    >>> check_pad_value("node_pad_value", float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: node_pad_value must be a finite number, got nan: ...
"""
import cmath
import numbers
from typing import Any, Iterator

import torch
from torch_geometric.transforms.pad import MappingPadding, Padding, \
    UniformPadding


def check_finite(name: str, value: Any) -> None:
    """Raises ``ValueError`` when ``value`` (a number or a tensor) holds a
    NaN or an infinity; anything else passes."""
    if isinstance(value, torch.Tensor):
        finite = not value.is_floating_point() and not value.is_complex() \
            or bool(torch.isfinite(value).all())
    elif isinstance(value, numbers.Number):
        finite = cmath.isfinite(value)
    else:
        return
    if not finite:
        raise ValueError(
            f"{name} must be a finite number, got {value!r}: a NaN or "
            "infinite padding value survives the mask of a masked loss (NaN "
            "x 0 is NaN), and one optimizer step then turns every weight "
            "into NaN. Use a finite value: 0.0 (the default), or a large "
            "finite one such as -1e6 if padding must stand out.")


def _numbers(padding: Padding) -> Iterator[Any]:
    """The values a PyG ``Padding`` object holds, where its class is known
    (others are checked when they are resolved)."""
    if isinstance(padding, UniformPadding):
        yield padding.value
    elif isinstance(padding, MappingPadding):
        yield from _numbers(padding.default)
        for value in padding.values.values():
            yield from _numbers(value)


def check_pad_value(name: str, value: Any) -> None:
    """Checks one of ``FixedSizeOptions``' ``*_pad_value`` arguments: None,
    a number or a PyG ``Padding`` object, finite.

    Raises:
        TypeError: ``value`` is of another type.
        ValueError: it is (or holds) a NaN or an infinity.
    """
    if value is None:
        return
    if isinstance(value, Padding):
        for number in _numbers(value):
            check_finite(f"{name} ({value!r})", number)
        return
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        check_finite(name, value)
        return
    raise TypeError(
        f"{name} must be a number or a torch_geometric.transforms.pad "
        f"Padding object, got {value!r} ({type(value).__name__}).")


def check_pad_graph_defaults(defaults: Any) -> None:
    """Checks the values of ``pad_graph_defaults`` (a dict by attribute
    name): the numbers and tensors among them must be finite."""
    for key, value in getattr(defaults, "items", dict)():
        check_finite(f"pad_graph_defaults[{key!r}]", value)
