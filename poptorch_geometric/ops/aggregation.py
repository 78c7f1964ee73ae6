"""``Aggregation`` whose sorted-index check is skipped: it reads tensor
values on the host, and the fixed-size batches' batch vectors are sorted
(padding graphs come last).

Example::

    >>> from torch_geometric.nn.aggr import SortAggregation
    >>> Aggregation.assert_sorted_index(SortAggregation(k=2),
    ...                                 torch.tensor([1, 0])) is None
    True
"""
from typing import Optional

import torch_geometric.nn.aggr
from torch import Tensor

__all__ = ["Aggregation"]


class Aggregation(torch_geometric.nn.aggr.Aggregation):
    """``torch_geometric.nn.aggr.Aggregation`` with a no-op
    :meth:`assert_sorted_index`."""

    def assert_sorted_index(self, index: Optional[Tensor]) -> None:
        """Accepts any index: no value is read while tracing."""
