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
from typing import Any, Dict, Iterator, List, Optional

import torch

from .._args_parser import flattenTensors, rebuildStructure

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
    return flattenTensors(struct, object_fields)


def rebuild(struct: Any, tensors: Iterator[torch.Tensor]) -> Any:
    """Inverse of :func:`flatten`: ``struct`` with each tensor replaced by
    the next one of ``tensors`` (container and object types are kept)."""
    return rebuildStructure(struct, tensors, object_fields)
