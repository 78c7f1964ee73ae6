"""Empty edge slots (index -1) are inert in every op that consumes edges.

A fixed-shape graph op cannot drop an edge, so it marks the edges PyG would
drop as empty slots whose both ends are -1: the neighbour searches
(``knn``, ``radius``, ...) for queries with fewer neighbours than slots, and
:func:`~poptorch_geometric.ops.remove_self_loops` for the loops it removes.
The functions here are PyG's, with one rule added for those slots:

- a **scatter** (``scatter``, ``degree``, the aggregations of message
  passing) sends them to one extra output row, a sink, that is dropped: they
  add nothing to any node, whatever the reduction (sum, mean, max, ...);
- a **softmax** over groups puts them in the sink's group, so the real
  groups are normalised over their real entries only;
- a **gather** (:func:`index_select`, MessagePassing's ``_index_select``)
  reads row 0 for them: a finite value, whose message then goes to the
  sink and whose gradient is zero.

So a layer fed a graph with empty slots gives PyG's result on the graph
without those edges, on every node and for the gradients, with both
simulator backends. The fixed-shape layers of :mod:`poptorch_geometric.ops`
call these functions directly.

While a model is traced, the ``traced_*`` forms replace PyG's functions
(:mod:`poptorch_geometric.override`). The sink costs a little in every
scatter and gather, so they take it only for an index that may hold empty
slots: the ops that make empty slots mark their edge index
(:func:`mark_empty_slots`), and :class:`EmptySlotTracking`, active while
the model is traced, marks every tensor computed from a marked one
(``edge_index[1]``, a ``torch.cat`` of it, ...). Other indices (the edges
a model receives, which PyG reads as node indices) take PyG's functions as
they are.

Indices other than -1 keep PyG's meaning: a scatter still needs
``dim_size`` inside a traced model, and an index past the last row is an
error as in PyG.

Example::

    >>> src = torch.tensor([1., 2., 4.])
    >>> index = torch.tensor([0, -1, 1])
    >>> scatter(src, index, dim_size=2, reduce="max")
    tensor([1., 4.])
    >>> softmax(torch.tensor([0., 5., 0.]), torch.tensor([0, -1, 0]),
    ...         num_nodes=1)
    tensor([0.5000, 1.0000, 0.5000])
    >>> degree(torch.tensor([1, -1, 1]), num_nodes=2)
    tensor([0., 2.])
"""
from typing import Any, Callable, Optional

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves
from torch_geometric.utils import degree as _pyg_degree
from torch_geometric.utils import scatter as _pyg_scatter
from torch_geometric.utils import softmax as _pyg_softmax
from torch_geometric.utils.num_nodes import maybe_num_nodes

__all__ = ["scatter", "softmax", "degree", "index_select", "to_sink",
           "mark_empty_slots", "may_hold_empty_slots", "EmptySlotTracking",
           "traced_scatter", "traced_softmax", "traced_degree",
           "message_passing_index_select"]

_MARK = "_poptorch_empty_slots"


def mark_empty_slots(edge_index: Tensor) -> Tensor:
    """Marks ``edge_index`` (returned) as one that may hold empty slots."""
    setattr(edge_index, _MARK, True)
    return edge_index


def may_hold_empty_slots(index: Any) -> bool:
    """Whether ``index`` is marked, or computed from a marked tensor while
    :class:`EmptySlotTracking` was active."""
    return bool(getattr(index, _MARK, False))


class EmptySlotTracking(TorchFunctionMode):
    """Marks every tensor that a torch function computes from a tensor
    that may hold empty slots: the mark follows an edge index through
    indexing, views, casts and concatenation to the scatters and gathers
    that read it. Marks over-approximate (a weight computed from a marked
    index is marked too), which only costs the sink where it is not
    needed.

    Edges the model receives are taken as PyG takes them: -1 is an empty
    slot only where an op of this package made it, so a model's own
    inputs and scatters keep PyTorch's and PyG's meaning of an index.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SUM_SCATTERS and len(args) > 3 and \
                may_hold_empty_slots(args[2]):
            args = _inert_sum_scatter(func, args)
        out = func(*args, **kwargs)
        if any(may_hold_empty_slots(leaf)
               for leaf in tree_leaves((args, kwargs))):
            for leaf in tree_leaves(out):
                if isinstance(leaf, Tensor):
                    mark_empty_slots(leaf)
        return out


#: Summing scatters a layer may call on a tensor directly (PyG's
#: FusedAggregation counts a mean's entries with ``scatter_add_``):
#: ``(self, dim, index, src)``.
_SUM_SCATTERS = frozenset((
    Tensor.scatter_add_, Tensor.scatter_add, torch.scatter_add,
    Tensor.index_add_, Tensor.index_add, torch.index_add))


def _inert_sum_scatter(func: Callable, args: tuple) -> tuple:
    """The arguments of a summing scatter with its empty slots adding zero
    to row 0 (in place, the result has no row to spare for a sink)."""
    target, dim, index, src = args[:4]
    valid = index >= 0
    if func in (Tensor.index_add_, Tensor.index_add, torch.index_add):
        dim = dim % src.dim()
        valid = valid.view([-1 if d == dim else 1 for d in range(src.dim())])
    # A select, not a product: an empty slot's source may be inf or NaN.
    return (target, dim, index.clamp(min=0),
            torch.where(valid, src, torch.zeros_like(src))) + tuple(args[4:])


def to_sink(index: Tensor, dim_size: int) -> Tensor:
    """``index`` with every negative entry replaced by ``dim_size``, the
    row one past the last: where a scatter of ``dim_size + 1`` rows
    collects the empty slots."""
    return torch.where(index < 0, dim_size, index)


def scatter(src: Tensor, index: Tensor, dim: int = 0,
            dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    """``torch_geometric.utils.scatter`` whose empty slots (index -1) add
    nothing to any output row. Without ``dim_size`` it is PyG's (which
    reads the size from ``index``: an error inside a traced model)."""
    if dim_size is None or not isinstance(index, Tensor):
        return _pyg_scatter(src, index, dim, dim_size, reduce)
    dim = src.dim() + dim if dim < 0 else dim
    out = _pyg_scatter(src, to_sink(index, dim_size), dim, dim_size + 1,
                       reduce)
    return out.narrow(dim, 0, dim_size)


def softmax(src: Tensor, index: Optional[Tensor] = None,
            ptr: Optional[Tensor] = None, num_nodes: Optional[int] = None,
            dim: int = 0) -> Tensor:
    """``torch_geometric.utils.softmax`` over the groups of ``index``;
    entries of empty slots form a group of their own, so they take no
    share of a real group. With ``ptr`` it is PyG's."""
    if index is None or ptr is not None:
        return _pyg_softmax(src, index, ptr, num_nodes, dim)
    num_nodes = maybe_num_nodes(index, num_nodes)
    return _pyg_softmax(src, to_sink(index, num_nodes), None, num_nodes + 1,
                        dim)


def degree(index: Tensor, num_nodes: Optional[int] = None,
           dtype: Optional[torch.dtype] = None) -> Tensor:
    """``torch_geometric.utils.degree``, not counting empty slots."""
    num_nodes = maybe_num_nodes(index, num_nodes)
    return _pyg_degree(to_sink(index, num_nodes), num_nodes + 1,
                       dtype).narrow(0, 0, num_nodes)


def index_select(src: Tensor, dim: int, index: Tensor) -> Tensor:
    """``src.index_select(dim, index)`` reading row 0 for empty slots."""
    return _gather(src, dim, index.clamp(min=0))


def _gather(src: Tensor, dim: int, index: Tensor) -> Tensor:
    try:
        return src.index_select(dim, index)
    except IndexError:  # torch's "index out of range in self"
        # PyG's own message reads the index values, which a traced model
        # cannot; torch's names neither the edges nor the fix.
        raise IndexError(
            f"Found indices in 'edge_index' past the last of the "
            f"{src.size(dim)} node(s) of the features they select from "
            f"(valid: 0 to {src.size(dim) - 1}, or -1 for an empty slot). "
            "Please ensure that all indices in 'edge_index' point to nodes "
            "of the node feature matrix passed with it (edge_index and x "
            "of the same batch) and try again.") from None


def traced_scatter(src: Tensor, index: Tensor, dim: int = 0,
                   dim_size: Optional[int] = None,
                   reduce: str = "sum") -> Tensor:
    """:func:`scatter` for an index that may hold empty slots, else PyG's
    ``scatter``."""
    if may_hold_empty_slots(index):
        return scatter(src, index, dim, dim_size, reduce)
    return _pyg_scatter(src, index, dim, dim_size, reduce)


def traced_softmax(src: Tensor, index: Optional[Tensor] = None,
                   ptr: Optional[Tensor] = None,
                   num_nodes: Optional[int] = None, dim: int = 0) -> Tensor:
    """:func:`softmax` for an index that may hold empty slots, else PyG's
    ``softmax``."""
    if may_hold_empty_slots(index):
        return softmax(src, index, ptr, num_nodes, dim)
    return _pyg_softmax(src, index, ptr, num_nodes, dim)


def traced_degree(index: Tensor, num_nodes: Optional[int] = None,
                  dtype: Optional[torch.dtype] = None) -> Tensor:
    """:func:`degree` for an index that may hold empty slots, else PyG's
    ``degree``."""
    if may_hold_empty_slots(index):
        return degree(index, num_nodes, dtype)
    return _pyg_degree(index, num_nodes, dtype)


def message_passing_index_select(self, src: Tensor, index: Tensor
                                 ) -> Tensor:
    """``MessagePassing._index_select``: the gather of message passing,
    reading row 0 for empty slots (their messages go to the sink)."""
    if may_hold_empty_slots(index):
        return index_select(src, self.node_dim, index)
    return _gather(src, self.node_dim, index)
