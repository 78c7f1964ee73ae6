"""Custom argument parsers: how user types are flattened into tensors.

PopTorch accepts nested tuples, lists and dicts of tensors as model inputs
and outputs. Any other type can take part once a parser for it is registered:

Example::

    >>> class Pair:
    ...     def __init__(self, a, b):
    ...         self.a, self.b = a, b
    >>> class PairParser(poptorch.ICustomArgParser):
    ...     def yieldTensors(self, pair):
    ...         yield pair.a
    ...         yield pair.b
    ...     def reconstruct(self, original, tensor_iterator):
    ...         return Pair(next(tensor_iterator), next(tensor_iterator))
    >>> poptorch.registerCustomArgParser(Pair, PairParser())
    >>> class AddPair(torch.nn.Module):
    ...     def forward(self, pair):
    ...         return pair.a + pair.b
    >>> model = poptorch.inferenceModel(AddPair())
    >>> model(Pair(torch.ones(2), torch.ones(2)))
    tensor([2., 2.])
"""
import abc
import copy
import functools
import importlib.metadata
import sys
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional,
                    Tuple, Type)

import torch

from .errors import createPoptorchError

__all__ = ["ICustomArgParser", "registerCustomArgParser"]


class ICustomArgParser(abc.ABC):
    """Interface of a parser for a user type passed to or returned by a
    model."""

    @abc.abstractmethod
    def yieldTensors(self, struct: Any) -> Iterable[torch.Tensor]:
        """Yields the tensors of ``struct`` in a fixed order."""

    @abc.abstractmethod
    def reconstruct(self, original_structure: Any,
                    tensor_iterator: Iterator[torch.Tensor]) -> Any:
        """Builds an object like ``original_structure`` whose tensors are
        taken, in ``yieldTensors`` order, from ``tensor_iterator``."""

    def paddingMask(self, struct: Any) -> Optional[torch.Tensor]:
        """Which rows of ``struct`` are real data: a tensor laid out along
        dim 0 as the model's inputs are (so that it splits into the same
        micro-batches), non-zero where an entry is real; None (the default)
        when ``struct`` does not say.

        A training model leaves out of its optimizer step every
        micro-batch whose part of this mask has no non-zero entry: it holds
        padding only (for example a mini-batch that completes a loader's
        last step), so it adds no gradient and does not count in the
        ``Mean`` reduction. An extension of PopTorch's interface."""
        return None

    def tensorNames(self, struct: Any) -> Optional[List[str]]:
        """The name of each tensor of ``struct``, in ``yieldTensors``
        order, or None (the default) when the type has none. A model
        called with an input whose names differ from the compiled one's is
        then told which are missing and which are new, rather than that
        the counts differ."""
        del struct
        return None


_parsers: Dict[Type, ICustomArgParser] = {}


def registerCustomArgParser(data_type: Type,
                            arg_parser: Optional[ICustomArgParser]) -> None:
    """Registers ``arg_parser`` for ``data_type``; ``None`` unregisters it."""
    if arg_parser is None:
        _parsers.pop(data_type, None)
        return
    if not isinstance(arg_parser, ICustomArgParser):
        raise createPoptorchError(
            "arg_parser must inherit from ICustomArgParser")
    _parsers[data_type] = arg_parser


def _lookup(value: Any) -> Optional[ICustomArgParser]:
    parser = _parsers.get(type(value))
    if parser is not None:
        return parser
    for data_type, candidate in _parsers.items():
        if isinstance(value, data_type):
            return candidate
    return None


#: Entry-point group through which packages register parsers for their
#: types. Each entry point is named after the top-level package whose types
#: it handles and points to a function that registers the parsers.
ENTRY_POINT_GROUP = "poptorch.custom_arg_parsers"
_loaded_plugins: Dict[str, bool] = {}


def _load_plugin(package: str) -> bool:
    """Runs the registration entry point named ``package``, once."""
    if package not in _loaded_plugins:
        _loaded_plugins[package] = False
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP,
                                                     name=package):
            try:
                entry.load()()
            except ImportError:
                continue
            _loaded_plugins[package] = True
    return _loaded_plugins[package]


def loadImportedPlugins() -> None:
    """Runs the registration entry point of every package that has one and
    is imported. A model is traced after this: PopTorch imports PopTorch
    Geometric at ``import poptorch`` when it is installed, so a PyG model is
    always traced with its fixed-shape substitutions, even when the script
    passes only tensors and never imports ``poptorch_geometric``."""
    for package in _plugin_packages():
        if package in sys.modules:
            _load_plugin(package)


@functools.lru_cache(maxsize=None)
def _plugin_packages() -> Tuple[str, ...]:
    return tuple(entry.name for entry in importlib.metadata.entry_points(
        group=ENTRY_POINT_GROUP))


def getCustomParser(value: Any) -> Optional[ICustomArgParser]:
    """The parser for ``value``: exact type first, then ``isinstance``.

    PyG data objects get PopTorch Geometric's parser even when the script
    never imported ``poptorch_geometric``, as PopTorch does when PopTorch
    Geometric is installed. The core does not import its plugin: the
    plugin registers itself through the ``poptorch.custom_arg_parsers``
    entry point, which is loaded on the first value of a type from the
    package it names (not at ``import poptorch``, to keep that fast).
    """
    parser = _lookup(value)
    if parser is None and _load_plugin(type(value).__module__.split(".")[0]):
        parser = _lookup(value)
    return parser


#: Returns the attributes of an object that is not a container or a
#: registered type and should be walked anyway (data loaders walk plain
#: batch classes), else None.
FieldsOf = Optional[Callable[[Any], Optional[Dict[str, Any]]]]


def flattenTensors(struct: Any, fields_of: FieldsOf = None,
                   padding_masks: Optional[List[torch.Tensor]] = None
                   ) -> List[torch.Tensor]:
    """Every tensor leaf of ``struct`` in depth-first order.

    Tuples, lists, dicts (in key order) and types with a registered parser are
    walked, and objects ``fields_of`` returns attributes for; other leaves are
    skipped. ``padding_masks``, when given, receives the padding masks of
    the objects of registered types (:meth:`ICustomArgParser.paddingMask`),
    in the same walk.
    """
    out: List[torch.Tensor] = []
    _flatten_into(struct, out, fields_of, padding_masks)
    return out


def paddingMasks(struct: Any) -> List[torch.Tensor]:
    """The padding masks (:meth:`ICustomArgParser.paddingMask`) of the
    objects of ``struct`` that registered parsers handle, in
    :func:`flattenTensors` order; empty when none says.

    Example (no registered type, so nothing says)::

        >>> paddingMasks(([torch.ones(2)], {"x": torch.zeros(2)}))
        []
    """
    masks: List[torch.Tensor] = []
    flattenTensors(struct, padding_masks=masks)
    return masks


def _flatten_into(struct: Any, out: List[torch.Tensor], fields_of: FieldsOf,
                  masks: Optional[List[torch.Tensor]]) -> None:
    if isinstance(struct, torch.Tensor):
        out.append(struct)
        return
    parser = getCustomParser(struct)
    if parser is not None:
        out.extend(parser.yieldTensors(struct))
        if masks is not None:
            mask = parser.paddingMask(struct)
            if mask is not None:
                masks.append(mask)
    elif isinstance(struct, (tuple, list)):
        for item in struct:
            _flatten_into(item, out, fields_of, masks)
    elif isinstance(struct, dict):
        for item in struct.values():
            _flatten_into(item, out, fields_of, masks)
    elif fields_of is not None:
        for item in (fields_of(struct) or {}).values():
            _flatten_into(item, out, fields_of, masks)


def rebuildStructure(struct: Any, tensors: Iterator[torch.Tensor],
                     fields_of: FieldsOf = None) -> Any:
    """Inverse of :func:`flattenTensors`: ``struct`` with each tensor leaf
    replaced by the next tensor of ``tensors``. Non-tensor leaves are kept,
    container types (namedtuple, OrderedDict subclasses) are preserved, and
    an object walked through ``fields_of`` is a shallow copy with its
    attributes rebuilt."""
    if isinstance(struct, torch.Tensor):
        return next(tensors)
    parser = getCustomParser(struct)
    if parser is not None:
        return parser.reconstruct(struct, tensors)
    if isinstance(struct, tuple):
        items = [rebuildStructure(item, tensors, fields_of) for item in struct]
        if hasattr(struct, "_fields"):  # namedtuple
            return type(struct)(*items)
        return type(struct)(items) if type(struct) is not tuple else tuple(items)
    if isinstance(struct, list):
        items = [rebuildStructure(item, tensors, fields_of) for item in struct]
        return items if type(struct) is list else type(struct)(items)
    if isinstance(struct, dict):
        rebuilt = {k: rebuildStructure(v, tensors, fields_of)
                   for k, v in struct.items()}
        if type(struct) is dict:
            return rebuilt
        out = type(struct)()
        out.update(rebuilt)
        return out
    fields = fields_of(struct) if fields_of is not None else None
    if fields is None:
        return struct
    out = copy.copy(struct)
    for key, value in fields.items():
        out.__dict__[key] = rebuildStructure(value, tensors, fields_of)
    return out
