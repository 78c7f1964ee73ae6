"""Fixed-shape ``knn_graph``: ``k`` edge slots per node whatever the data,
so a model that builds its graph in ``forward`` traces once. A module of
its own, as upstream PopTorch Geometric lays out ``ops``.

A node whose graph has fewer than ``k`` other nodes gets its nearest ones
first, then slots whose both entries are -1. Nodes of other graphs
(padding graphs included) are never neighbours. Among nodes at the same
distance, the lower index comes first.

Example::

    >>> x = torch.tensor([[0.], [1.], [3.], [10.], [11.]])
    >>> batch = torch.tensor([0, 0, 0, 1, 1])
    >>> knn_graph(x, 2, batch, flow="target_to_source")
    tensor([[ 0,  0,  1,  1,  2,  2,  3, -1,  4, -1],
            [ 1,  2,  0,  2,  1,  0,  4, -1,  3, -1]])
"""
from typing import Optional

from torch import Tensor

from .knn import check_flow, knn_pairs

__all__ = ["knn_graph"]


def knn_graph(x: Tensor, k: int, batch: Optional[Tensor] = None,
              loop: bool = False, flow: str = "source_to_target",
              cosine: bool = False, num_workers: int = 1,
              batch_size: Optional[int] = None) -> Tensor:
    """Edges from each node to its ``k`` nearest nodes of the same graph:
    ``[2, N * k]``, as ``torch_geometric.nn.knn_graph``.

    With ``source_to_target`` (default) each edge points from the neighbour
    to the centre node. Without ``loop`` a node is never its own neighbour
    and it still gets ``k`` slots (PyG drops the self-pair instead, which
    gives a data-dependent number of edges). Empty slots are ``(-1, -1)``.
    """
    check_flow(flow)
    pairs = knn_pairs(x, x, k, batch, batch, cosine, exclude_self=not loop)
    return pairs.flip([0]) if flow == "source_to_target" else pairs
