"""``to_dense_batch`` for fixed shapes: ``batch_size`` and
``max_num_nodes`` are the dense output's shape, so both are required with a
batch vector. A missing one raises PyG's own text for a size that dynamic
shapes would read from the data (``disable_dynamic_shapes``, as upstream
PopTorch Geometric raises it), ``batch_size`` checked first. With both
given it is PyG's function, whose output has no data-dependent shape. A
module of its own, as upstream PopTorch Geometric lays out ``ops``.

Other PyG functions that read a size from tensor values when it is not
given (``scatter``'s ``dim_size``, ``softmax``'s and ``degree``'s
``num_nodes``, ...) need no substitute: inside a traced model that read is
an error of the core naming the line that made the call.

Example::

    >>> x, batch = torch.ones(3, 2), torch.tensor([0, 0, 1])
    >>> to_dense_batch(x, batch, batch_size=2, max_num_nodes=2)[1]
    tensor([[ True,  True],
            [ True, False]])
    >>> to_dense_batch(x, batch)
    Traceback (most recent call last):
    ...
    ValueError: Dynamic shapes disabled. Argument 'batch_size' needs to be set
"""
from typing import Optional, Tuple

from torch import Tensor
# Bound at import: while a model is traced, torch_geometric.utils'
# to_dense_batch is this module's function.
from torch_geometric.utils import to_dense_batch as _to_dense_batch

__all__ = ["to_dense_batch"]


def to_dense_batch(x: Tensor, batch: Optional[Tensor] = None,
                   fill_value: float = 0.0,
                   max_num_nodes: Optional[int] = None,
                   batch_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """``torch_geometric.utils.to_dense_batch`` with ``batch_size`` and
    ``max_num_nodes`` both required when ``batch`` is given (the number of
    graphs of the fixed-size batch, and at least its largest graph's node
    count), as Python ints."""
    if batch is not None:
        for name, value in (("batch_size", batch_size),
                            ("max_num_nodes", max_num_nodes)):
            if value is None:
                raise ValueError("Dynamic shapes disabled. Argument "
                                 f"'{name}' needs to be set")
    return _to_dense_batch(x, batch, fill_value, max_num_nodes, batch_size)
