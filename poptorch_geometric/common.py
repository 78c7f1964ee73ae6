"""Batch types and small helpers shared by the PopTorch Geometric modules.

Example::

    >>> from torch_geometric.data import Batch, Data
    >>> import torch
    >>> batch = Batch.from_data_list([Data(x=torch.ones(2, 1))])
    >>> type(batch) is DataBatch
    True
"""
import functools
from typing import Any, Callable, TypeVar

from torch_geometric.data import Batch, Data, HeteroData

__all__ = ["DataBatch", "HeteroDataBatch", "call_once"]

#: PyG's dynamically created batch class for :class:`~torch_geometric.data.Data`
#: (a subclass of both ``Batch`` and ``Data``).
DataBatch = type(Batch(_base_cls=Data))
#: PyG's dynamically created batch class for
#: :class:`~torch_geometric.data.HeteroData`.
HeteroDataBatch = type(Batch(_base_cls=HeteroData))

_F = TypeVar("_F", bound=Callable[..., Any])


def call_once(f: _F) -> _F:
    """Decorator: the first call runs ``f`` and returns its result, later
    calls return ``None`` without running it.

    Example::

        >>> @call_once
        ... def register():
        ...     return "done"
        >>> register(), register()
        ('done', None)
    """

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        if wrapper.has_run:
            return None
        wrapper.has_run = True
        return f(*args, **kwargs)

    wrapper.has_run = False
    return wrapper  # type: ignore[return-value]
