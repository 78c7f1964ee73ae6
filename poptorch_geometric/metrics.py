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

A PopTorch-side loader's batch combines the mini-batches of one call, and
the last call of an epoch may hold padding-only mini-batches;
:func:`num_real_graphs_per_mini_batch` says which (see its example).
"""
from typing import Any, Optional, Union

import torch

__all__ = ["count_real", "num_real_graphs", "num_real_graphs_per_mini_batch",
           "num_real_nodes", "padding_mask"]


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


def num_real_graphs_per_mini_batch(data: Any) -> torch.Tensor:
    """Real graphs of each mini-batch of a combined batch (one a
    PopTorch-side loader yields), in the order PopTorch splits it: device
    iteration, then accumulation step, then replica. That is the order of
    the losses a training model returns with ``OutputMode.All``, one per
    mini-batch, so weighting them by these counts gives the mean loss over
    the real graphs; a padding-only mini-batch (count 0, loss 0 with
    ``with_loss``) then counts for nothing. A batch without
    ``graphs_mask`` is one mini-batch of real graphs.

    Example (2 graphs in mini-batches of 3 graph slots, up to 2 real
    each, for 2 device iterations: the second mini-batch is padding
    only)::

        >>> import poptorch
        >>> from poptorch_geometric import FixedSizeDataLoader
        >>> from poptorch_geometric.datasets import SyntheticMolecules
        >>> loader = FixedSizeDataLoader(
        ...     SyntheticMolecules(2), batch_size=3, drop_last=False,
        ...     options=poptorch.Options().deviceIterations(2))
        >>> batch = next(iter(loader))
        >>> counts = num_real_graphs_per_mini_batch(batch)
        >>> counts
        tensor([2, 0])
        >>> losses = torch.tensor([0.75, 0.0])   # as OutputMode.All returns
        >>> float((losses * counts).sum() / counts.sum())  # per real graph
        0.75
        >>> float(losses[counts > 0].mean())   # per real mini-batch
        0.75
    """
    mask = getattr(data, "graphs_mask", None)
    if mask is None:
        return torch.tensor([int(data.num_graphs)])
    # A combined batch reports one mini-batch's graph slots.
    return mask.view(-1, int(data.num_graphs)).sum(dim=1)


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
