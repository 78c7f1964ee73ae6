"""How the fixed-size loaders group graphs into batches and what they do
with graphs that do not fit (re-exported by
:mod:`poptorch_geometric.pyg_dataloader`, where the spec names them).

Example::

    >>> trims(OverSizeStrategy.TrimNodesAndEdges)
    (True, True)
    >>> trims(OverSizeStrategy.Skip)
    (False, False)
"""
import enum
from typing import Tuple


class FixedSizeStrategy(enum.Enum):
    """How real graphs are grouped into fixed-size batches.

    * ``PadToMax``: ``batch_size - 1`` real graphs per batch, padded.
    * ``StreamPack``: as many consecutive graphs as fit the budgets
      (:class:`~poptorch_geometric.stream_packing_sampler.StreamPackingSampler`).
    """
    PadToMax = 0
    StreamPack = 1


class OverSizeStrategy(enum.Enum):
    """What happens to graphs that do not fit the budgets.

    * ``Error``: raise.
    * ``Skip``: skip (StreamPack only; counted and logged); behaves like
      ``Error`` with PadToMax.
    * ``TrimNodes`` / ``TrimEdges`` / ``TrimNodesAndEdges``: randomly remove
      nodes and/or edges (counted and logged).
    """
    Error = 0
    Skip = 1
    TrimNodes = 2
    TrimEdges = 3
    TrimNodesAndEdges = 4


def trims(strategy: OverSizeStrategy) -> Tuple[bool, bool]:
    """Whether ``strategy`` trims nodes and whether it trims edges (the
    collater's ``trim_nodes`` and ``trim_edges``)."""
    return (strategy in (OverSizeStrategy.TrimNodes,
                         OverSizeStrategy.TrimNodesAndEdges),
            strategy in (OverSizeStrategy.TrimEdges,
                         OverSizeStrategy.TrimNodesAndEdges))
