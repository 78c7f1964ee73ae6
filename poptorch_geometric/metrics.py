"""Metrics over fixed-size batches that count only real graphs and nodes.

A fixed-size batch has ``num_graphs`` graph slots, some of them padding
graphs (with padding nodes), and a model's outputs have a row for every
slot. ``data.num_graphs`` and ``(pred == data.y).sum()`` therefore count
padding too. These helpers read the batch's ``graphs_mask`` /
``nodes_mask`` (added by the fixed-size loaders) and count real entries
only; on a batch without masks (plain PyG) every entry is real, so the same
code runs on both.

Example::

    >>> import torch
    >>> from torch_geometric.data import Batch, Data
    >>> batch = Batch.from_data_list([Data(x=torch.ones(2, 1)),
    ...                               Data(x=torch.ones(1, 1))])
    >>> batch.graphs_mask = torch.tensor([True, False])
    >>> batch.nodes_mask = torch.tensor([True, True, False])
    >>> num_real_graphs(batch), num_real_nodes(batch)
    (1, 2)
    >>> count_real(torch.tensor([True, True]), batch)  # per graph
    1
"""
from typing import Any, Optional, Union

import torch

__all__ = ["count_real", "num_real_graphs", "num_real_nodes",
           "padding_mask"]


def padding_mask(data: Any, length: int) -> Optional[torch.Tensor]:
    """The mask of real entries for a per-graph or per-node tensor of
    ``length`` rows: ``graphs_mask`` or ``nodes_mask``, whichever has that
    length; None when the batch has neither (everything is real).

    Raises:
        ValueError: both masks have ``length`` entries (as many graph
            slots as node slots), so the level is ambiguous.
    """
    matches = [getattr(data, key, None) for key in ("graphs_mask",
                                                    "nodes_mask")]
    matches = [m for m in matches
               if isinstance(m, torch.Tensor) and m.shape[0] == length]
    if len(matches) == 2:
        raise ValueError(
            f"The batch has as many graph slots as node slots ({length}): "
            "cannot tell whether the values are per graph or per node. Use "
            "data.graphs_mask or data.nodes_mask explicitly, or change the "
            "fixed sizes.")
    return matches[0] if matches else None


def num_real_graphs(data: Any) -> int:
    """Real graphs of a batch (``data.num_graphs`` without padding)."""
    mask = getattr(data, "graphs_mask", None)
    return int(mask.sum()) if mask is not None else int(data.num_graphs)


def num_real_nodes(data: Any) -> int:
    """Real nodes of a batch (``data.num_nodes`` without padding)."""
    mask = getattr(data, "nodes_mask", None)
    return int(mask.sum()) if mask is not None else int(data.num_nodes)


def count_real(values: torch.Tensor, data: Any) -> Union[int, float]:
    """The sum of ``values`` (booleans or numbers, one per graph or per
    node) over the real entries of ``data``: for example the number of
    correct predictions, ``count_real(pred == data.y, data)``, or a summed
    absolute error, ``count_real((out - data.y).abs(), data)``."""
    mask = padding_mask(data, values.shape[0])
    if mask is not None:
        values = values * mask.view(-1, *[1] * (values.dim() - 1))
    return values.sum().item()
