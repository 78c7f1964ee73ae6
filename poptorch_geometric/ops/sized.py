"""PyG functions that read a size from tensor values unless it is given,
as versions that require the size: while a model is traced for the IPU a
missing size is a clear error instead of a shape frozen from the first
batch. With the sizes given they call PyG's functions unchanged.

Example::

    >>> x, batch = torch.ones(3, 2), torch.tensor([0, 0, 1])
    >>> to_dense_batch(x, batch, batch_size=2, max_num_nodes=2)[1]
    tensor([[ True,  True],
            [ True, False]])
    >>> to_dense_batch(x, batch)
    Traceback (most recent call last):
    ...
    ValueError: to_dense_batch() needs batch_size and max_num_nodes ...
"""
from typing import Any, Optional, Tuple, Union

from torch import Tensor
# Bound at import: while a model is traced, the names in
# torch_geometric.utils are this module's functions.
from torch_geometric.utils import add_self_loops as _add_self_loops
from torch_geometric.utils import degree as _degree
from torch_geometric.utils import is_torch_sparse_tensor
from torch_geometric.utils import scatter as _scatter
from torch_geometric.utils import softmax as _softmax
from torch_geometric.utils import to_dense_batch as _to_dense_batch

__all__ = ["require_size", "scatter", "softmax", "degree", "add_self_loops",
           "to_dense_batch"]


def require_size(function: str, names: str, value: Any, why: str) -> None:
    """Raises ``ValueError`` naming ``names`` when ``value`` is None."""
    if value is None:
        raise ValueError(
            f"{function}() needs {names} while a model is traced for the "
            f"IPU: {why}, and without it that size is read from tensor "
            "values, which have no fixed value at compile time. Pass "
            f"{names} (the sizes of your fixed-size batch).")


def scatter(src: Tensor, index: Tensor, dim: int = 0,
            dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    """``torch_geometric.utils.scatter`` with ``dim_size`` required."""
    require_size("scatter", "dim_size", dim_size,
                 "it is the size of the output along dim")
    return _scatter(src, index, dim, dim_size, reduce)


def softmax(src: Tensor, index: Optional[Tensor] = None,
            ptr: Optional[Tensor] = None, num_nodes: Optional[int] = None,
            dim: int = 0) -> Tensor:
    """``torch_geometric.utils.softmax`` with ``num_nodes`` required unless
    ``ptr`` is given."""
    if ptr is None:
        require_size("softmax", "num_nodes", num_nodes,
                     "it is the number of groups of the index")
    return _softmax(src, index, ptr, num_nodes, dim)


def degree(index: Tensor, num_nodes: Optional[int] = None,
           dtype: Any = None) -> Tensor:
    """``torch_geometric.utils.degree`` with ``num_nodes`` required."""
    require_size("degree", "num_nodes", num_nodes,
                 "it is the length of the result")
    return _degree(index, num_nodes, dtype)


def add_self_loops(edge_index: Tensor, edge_attr: Optional[Tensor] = None,
                   fill_value: Optional[Union[float, Tensor, str]] = None,
                   num_nodes: Optional[Union[int, Tuple[int, int]]] = None
                   ) -> Tuple[Tensor, Optional[Tensor]]:
    """``torch_geometric.utils.add_self_loops`` with ``num_nodes``
    required for edge-index tensors."""
    if not is_torch_sparse_tensor(edge_index):
        require_size("add_self_loops", "num_nodes", num_nodes,
                     "the number of loops to add is the number of nodes")
    return _add_self_loops(edge_index, edge_attr, fill_value, num_nodes)


def to_dense_batch(x: Tensor, batch: Optional[Tensor] = None,
                   fill_value: float = 0.0,
                   max_num_nodes: Optional[int] = None,
                   batch_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """``torch_geometric.utils.to_dense_batch`` with ``batch_size`` and
    ``max_num_nodes`` both required when ``batch`` is given."""
    if batch is not None and (batch_size is None or max_num_nodes is None):
        raise ValueError(
            "to_dense_batch() needs batch_size and max_num_nodes while a "
            "model is traced for the IPU: they are the dense output's shape "
            "[batch_size, max_num_nodes, ...], which must not depend on the "
            "batch vector's values. Pass batch_size (the number of graphs of "
            "your fixed-size batch) and max_num_nodes (at least the largest "
            f"graph's node count); got batch_size={batch_size}, "
            f"max_num_nodes={max_num_nodes}.")
    return _to_dense_batch(x, batch, fill_value, max_num_nodes, batch_size)
