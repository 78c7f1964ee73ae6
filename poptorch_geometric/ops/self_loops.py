"""Fixed-shape self-loop handling: no edge is ever dropped, so the number
of edges stays what the fixed-size batch gives.

- :func:`remove_self_loops` keeps every edge and zeroes the attributes
  (weights) of self-loops. A weighted sum (GCN-style normalisation,
  Laplacians) then ignores the loops exactly as if they were removed.
- :func:`add_remaining_self_loops` appends one loop per node after all
  edges, as PyG; an existing loop hands its attribute to the new loop (PyG's
  rule) and keeps a zero attribute in its own slot.

Without attributes an existing loop stays a loop. Nodes without self-loops
(every node of a graph without loops; padding edges are loops on padding
nodes only) get exactly PyG's results either way.

Example::

    >>> edge_index = torch.tensor([[0, 1, 1], [1, 0, 1]])
    >>> weight = torch.tensor([0.5, 0.5, 3.0])
    >>> remove_self_loops(edge_index, weight)[1]
    tensor([0.5000, 0.5000, 0.0000])
    >>> ei, w = add_remaining_self_loops(edge_index, weight, 1.0, num_nodes=2)
    >>> ei
    tensor([[0, 1, 1, 0, 1],
            [1, 0, 1, 0, 1]])
    >>> w
    tensor([0.5000, 0.5000, 0.0000, 1.0000, 3.0000])
"""
from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.utils.loop import compute_loop_attr
from torch_geometric.utils.num_nodes import maybe_num_nodes

__all__ = ["remove_self_loops", "add_remaining_self_loops"]

_Fill = Optional[Union[float, Tensor, str]]


def _zero_where(mask: Tensor, values: Tensor) -> Tensor:
    mask = mask.view((-1, ) + (1, ) * (values.dim() - 1))
    return torch.where(mask, torch.zeros_like(values), values)


def remove_self_loops(edge_index: Tensor, edge_attr: Optional[Tensor] = None
                      ) -> Tuple[Tensor, Optional[Tensor]]:
    """``edge_index`` unchanged and ``edge_attr`` with the rows of
    self-loops zeroed (PyG drops those edges: a data-dependent shape)."""
    if edge_attr is None:
        return edge_index, None
    return edge_index, _zero_where(edge_index[0] == edge_index[1], edge_attr)


def add_remaining_self_loops(edge_index: Tensor,
                             edge_attr: Optional[Tensor] = None,
                             fill_value: _Fill = None,
                             num_nodes: Optional[int] = None
                             ) -> Tuple[Tensor, Optional[Tensor]]:
    """``[2, E + N]``: every edge, then one loop per node. The loops'
    attributes are ``fill_value`` (as in PyG), or the attribute of the
    node's existing loop, whose own slot then holds zeros. Without
    ``num_nodes`` the node count is read from ``edge_index``'s values, as
    PyG does (an error inside a traced model: pass it)."""
    num_nodes = maybe_num_nodes(edge_index, num_nodes)
    loops = torch.arange(num_nodes, device=edge_index.device)
    full = torch.cat([edge_index, loops.to(edge_index.dtype).expand(2, -1)],
                     dim=1)
    if edge_attr is None:
        return full, None
    is_loop = edge_index[0] == edge_index[1]
    loop_attr = compute_loop_attr(edge_index, edge_attr, num_nodes, False,
                                  fill_value)
    # Non-loop edges write into a spare last row, dropped afterwards: no
    # boolean indexing.
    spare = torch.cat([loop_attr, loop_attr[:1]], dim=0)
    target = torch.where(is_loop, edge_index[0].long(), num_nodes)
    spare = spare.index_put((target, ), edge_attr)
    attr = torch.cat([_zero_where(is_loop, edge_attr), spare[:num_nodes]])
    return full, attr
