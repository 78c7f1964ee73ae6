"""Fixed-shape self-loop handling: no edge slot is ever dropped, so the
number of edges stays what the fixed-size batch gives.

- :func:`remove_self_loops` turns every self-loop into an empty slot: both
  ends -1 (and a zero attribute). Empty slots are inert in message passing,
  scatters, softmax and degrees (:mod:`~poptorch_geometric.ops.empty_slots`),
  so the result is PyG's on the graph without the loops.
- :func:`add_remaining_self_loops` does the same to the existing loops and
  appends one loop per node after all edge slots, as PyG appends them after
  the kept edges. A node's new loop takes the attribute of its last
  existing loop (PyG's rule), otherwise ``fill_value``.

Padding edges are loops on padding nodes, so they become empty slots too.

Example::

    >>> edge_index = torch.tensor([[0, 1, 1], [1, 0, 1]])
    >>> weight = torch.tensor([0.5, 0.5, 3.0])
    >>> remove_self_loops(edge_index, weight)
    (tensor([[ 0,  1, -1],
            [ 1,  0, -1]]), tensor([0.5000, 0.5000, 0.0000]))
    >>> ei, w = add_remaining_self_loops(edge_index, weight, 1.0, num_nodes=2)
    >>> ei
    tensor([[ 0,  1, -1,  0,  1],
            [ 1,  0, -1,  0,  1]])
    >>> w
    tensor([0.5000, 0.5000, 0.0000, 1.0000, 3.0000])
"""
from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.utils.loop import compute_loop_attr
from torch_geometric.utils.num_nodes import maybe_num_nodes

from .empty_slots import mark_empty_slots, scatter, to_sink

__all__ = ["remove_self_loops", "add_remaining_self_loops"]

_Fill = Optional[Union[float, Tensor, str]]


def _zero_where(mask: Tensor, values: Tensor) -> Tensor:
    mask = mask.view((-1, ) + (1, ) * (values.dim() - 1))
    return torch.where(mask, torch.zeros_like(values), values)


def _emptied(edge_index: Tensor) -> Tuple[Tensor, Tensor]:
    """``edge_index`` with its loops made empty slots, and the mask of the
    slots that are empty now (empty slots before included)."""
    is_loop = edge_index[0] == edge_index[1]
    return mark_empty_slots(edge_index.masked_fill(is_loop, -1)), is_loop


def remove_self_loops(edge_index: Tensor, edge_attr: Optional[Tensor] = None
                      ) -> Tuple[Tensor, Optional[Tensor]]:
    """``edge_index`` with self-loops as empty slots (-1, -1), and
    ``edge_attr`` with their rows zeroed (PyG drops those edges: a
    data-dependent shape)."""
    edge_index, is_loop = _emptied(edge_index)
    if edge_attr is None:
        return edge_index, None
    return edge_index, _zero_where(is_loop, edge_attr)


def _last_loop_attr(edge_index: Tensor, edge_attr: Tensor, num_nodes: int,
                    loop_attr: Tensor) -> Tensor:
    """``loop_attr`` with each node that has self-loops taking the
    attribute of its last one, chosen by position (deterministic on every
    backend, unlike a write with repeated indices)."""
    is_loop = (edge_index[0] == edge_index[1]) & (edge_index[0] >= 0)
    position = torch.arange(1, edge_index.size(1) + 1,
                            device=edge_index.device)
    node = to_sink(torch.where(is_loop, edge_index[0], -1), num_nodes)
    last = torch.zeros(num_nodes + 1, dtype=position.dtype,
                       device=position.device).scatter_reduce(
        0, node.long(), torch.where(is_loop, position, 0), reduce="amax")
    last = last[:num_nodes]
    picked = edge_attr.index_select(0, (last - 1).clamp(min=0))
    # PyG writes the loops with one indexed assignment, whose gradient
    # reaches every loop of a node, not only the last one that wins: the
    # same value, with that gradient.
    summed = scatter(_zero_where(~is_loop, edge_attr), node, 0, num_nodes,
                     "sum")
    picked = picked.detach() + (summed - summed.detach())
    return torch.where((last > 0).view((-1, ) + (1, ) * (
        edge_attr.dim() - 1)), picked, loop_attr)


def add_remaining_self_loops(edge_index: Tensor,
                             edge_attr: Optional[Tensor] = None,
                             fill_value: _Fill = None,
                             num_nodes: Optional[int] = None
                             ) -> Tuple[Tensor, Optional[Tensor]]:
    """``[2, E + N]``: the edge slots with existing loops emptied, then one
    loop per node. The loops' attributes are the node's last existing
    loop's, or ``fill_value`` (a number, a tensor, or a reduction of the
    node's incoming edges such as ``"mean"``, as in PyG). Without
    ``num_nodes`` the node count is read from ``edge_index``'s values, as
    PyG does (an error inside a traced model: pass it)."""
    num_nodes = maybe_num_nodes(edge_index, num_nodes)
    emptied, is_loop = _emptied(edge_index)
    loops = torch.arange(num_nodes, device=edge_index.device)
    full = mark_empty_slots(torch.cat(
        [emptied, loops.to(edge_index.dtype).expand(2, -1)], dim=1))
    if edge_attr is None:
        return full, None
    if isinstance(fill_value, str):
        # PyG reduces over every incoming edge, loops included.
        loop_attr = scatter(edge_attr, edge_index[1], 0, num_nodes,
                            fill_value)
    else:
        loop_attr = compute_loop_attr(edge_index, edge_attr, num_nodes,
                                      False, fill_value)
    loop_attr = _last_loop_attr(edge_index, edge_attr, num_nodes, loop_attr)
    return full, torch.cat([_zero_where(is_loop, edge_attr), loop_attr])
