"""How the data loaders see a batch: its tensors, and how to rebuild it.

The same walk as the model's argument parser (tensors, tuples, lists,
dicts, types registered with :func:`poptorch.registerCustomArgParser`),
plus plain Python objects that hold tensors in their attributes: the batch
classes a ``collate_fn`` returns (a dataclass, a small class with ``x`` and
``y``). An object's attributes are walked in definition order; a rebuilt
object is a shallow copy of the original with its tensors replaced, so
non-tensor attributes keep the original's values.

Example::

    >>> class Batch:
    ...     def __init__(self, x, y):
    ...         self.x, self.y, self.name = x, y, "first"
    >>> batch = Batch(torch.zeros(2), torch.ones(2))
    >>> [t.tolist() for t in flatten(batch)]
    [[0.0, 0.0], [1.0, 1.0]]
    >>> rebuilt = rebuild(batch, iter([torch.ones(3), torch.zeros(3)]))
    >>> rebuilt.x.tolist(), rebuilt.name
    ([1.0, 1.0, 1.0], 'first')
"""
import copy
from typing import Any, Dict, Iterator, List, Optional

import torch

from .._args_parser import getCustomParser

__all__ = ["flatten", "rebuild", "object_fields"]


def object_fields(struct: Any) -> Optional[Dict[str, Any]]:
    """The attributes of a plain object that holds tensors, else None."""
    if isinstance(struct, (type, torch.nn.Module)) or \
            not hasattr(struct, "__dict__") or \
            type(struct).__module__ == "builtins":
        return None
    fields = vars(struct)
    if not any(flatten(value) for value in fields.values()):
        return None
    return fields


def flatten(struct: Any) -> List[torch.Tensor]:
    """Every tensor of ``struct``, depth first."""
    out: List[torch.Tensor] = []
    _flatten_into(struct, out)
    return out


def _flatten_into(struct: Any, out: List[torch.Tensor]) -> None:
    if isinstance(struct, torch.Tensor):
        out.append(struct)
        return
    parser = getCustomParser(struct)
    if parser is not None:
        out.extend(parser.yieldTensors(struct))
    elif isinstance(struct, (tuple, list)):
        for item in struct:
            _flatten_into(item, out)
    elif isinstance(struct, dict):
        for item in struct.values():
            _flatten_into(item, out)
    else:
        fields = object_fields(struct)
        for item in (fields or {}).values():
            _flatten_into(item, out)


def rebuild(struct: Any, tensors: Iterator[torch.Tensor]) -> Any:
    """Inverse of :func:`flatten`: ``struct`` with each tensor replaced by
    the next one of ``tensors`` (container and object types are kept)."""
    if isinstance(struct, torch.Tensor):
        return next(tensors)
    parser = getCustomParser(struct)
    if parser is not None:
        return parser.reconstruct(struct, tensors)
    if isinstance(struct, tuple):
        items = [rebuild(item, tensors) for item in struct]
        if hasattr(struct, "_fields"):  # namedtuple
            return type(struct)(*items)
        return tuple(items) if type(struct) is tuple else type(struct)(items)
    if isinstance(struct, list):
        items = [rebuild(item, tensors) for item in struct]
        return items if type(struct) is list else type(struct)(items)
    if isinstance(struct, dict):
        rebuilt = {k: rebuild(v, tensors) for k, v in struct.items()}
        if type(struct) is dict:
            return rebuilt
        out = type(struct)()
        out.update(rebuilt)
        return out
    fields = object_fields(struct)
    if fields is None:
        return struct
    out = copy.copy(struct)
    for key, value in fields.items():
        out.__dict__[key] = rebuild(value, tensors)
    return out
