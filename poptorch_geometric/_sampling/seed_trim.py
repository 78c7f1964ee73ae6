"""Trimming a sampled subgraph to a node budget without losing seeds.

The collater's generic trimming removes random nodes, seeds included,
which would break ``n_id[:batch_size]`` being the seed batch. Here the
seeds always stay, whole hops stay while they fit, and a random subset of
the first hop that does not fit fills the rest.

Example::

    >>> from torch_geometric.data import Data
    >>> data = Data(x=torch.arange(6.), edge_index=torch.tensor(
    ...     [[2, 3, 4, 5], [0, 1, 2, 3]]), num_sampled_nodes=[2, 2, 2])
    >>> out = keep_nodes_near_seeds(data, {None: 2}, {None: 5})
    >>> out.x.tolist()[:4], out.num_nodes
    ([0.0, 1.0, 2.0, 3.0], 5)
"""
import copy
from typing import Dict, Hashable, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

__all__ = ["keep_nodes_near_seeds"]

_PER_HOP = ("num_sampled_nodes", "num_sampled_edges")


def keep_nodes_near_seeds(data: Union[Data, HeteroData],
                          num_seeds: Dict[Hashable, int],
                          limits: Dict[Hashable, int]
                          ) -> Union[Data, HeteroData]:
    """``data`` cut down to at most ``limits[t]`` nodes of each node type
    ``t`` (``None`` for a ``Data``), keeping the first ``num_seeds[t]``
    nodes, then whole hops (``num_sampled_nodes``) in order, then a random
    part of the next hop; node order is kept, so the seeds stay first.
    Returns ``data`` itself when it fits; drops the per-hop counts of a cut
    subgraph (they no longer hold).

    Raises:
        ValueError: the seeds alone exceed a limit.
    """
    hetero = isinstance(data, HeteroData)
    stores = {t: data[t] for t in data.node_types} if hetero \
        else {None: data}
    masks = {}
    for node_type, store in stores.items():
        count, limit = store.num_nodes, limits[node_type]
        seeds = num_seeds.get(node_type, 0)
        if seeds > limit:
            raise ValueError(
                f"The {seeds} seed nodes of a batch do not fit the fixed "
                f"size of {limit} sampled nodes (num_nodes minus one for "
                "padding); increase num_nodes in FixedSizeOptions or "
                "reduce batch_size.")
        if count > limit:
            hops = _hop_sizes(store.get("num_sampled_nodes"), count, seeds)
            masks[node_type] = _near_seeds_mask(hops, limit)
    if not masks:
        return data
    data = copy.copy(data)
    for store in data.stores:
        for key in _PER_HOP:
            if key in store:
                del store[key]
    if not hetero:
        return data.subgraph(masks[None])
    return data.subgraph({t: masks.get(t, torch.ones(s.num_nodes,
                                                     dtype=torch.bool))
                          for t, s in stores.items()})


def _hop_sizes(per_hop: Optional[List[int]], count: int,
               seeds: int) -> List[int]:
    if per_hop is not None and sum(per_hop) == count and \
            per_hop[0] >= seeds:
        return list(per_hop)
    return [seeds, count - seeds]  # unknown hops: one hop after the seeds


def _near_seeds_mask(hops: List[int], limit: int) -> Tensor:
    """Keeps whole hops while they fit, then a random part of the next."""
    count = sum(hops)
    keep = torch.zeros(count, dtype=torch.bool)
    start = 0
    for size in hops:
        room = limit - start
        if size <= room:
            keep[start:start + size] = True
            start += size
            continue
        chosen = torch.randperm(size)[:room] + start
        keep[chosen] = True
        break
    return keep
