"""Attributes of a list of plain ``Data`` graphs, gathered once per batch.

Label detection, attribute classification and the fast collation path all
read the same per-graph values; reading them through ``Data.__getattr__``
for every graph and every step would cost more than the collation itself.

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> cols = Columns.of([Data(x=torch.ones(2, 3)), Data(x=torch.ones(4, 3))])
    >>> cols.sizes("x", 0)
    [2, 4]
"""
from typing import Any, Dict, List, Optional, Tuple

from torch_geometric.data import Data
from torch_geometric.data.data import BaseData

__all__: List[str] = []


class Columns:
    """Per-key lists of the graphs' values (``column``) and of their sizes
    along a dim (``sizes``), both cached."""

    def __init__(self, data_list: List[Data]) -> None:
        self.mappings = [d._store._mapping for d in data_list]
        self._columns: Dict[str, List[Any]] = {}
        self._sizes: Dict[Tuple[str, int], List[int]] = {}

    @staticmethod
    def of(data_list: List[BaseData]) -> Optional["Columns"]:
        """Columns of ``data_list``, or None unless every graph is a plain
        ``Data`` (subclasses may batch differently)."""
        if all(type(d) is Data for d in data_list):
            return Columns(data_list)
        return None

    def column(self, key: str) -> List[Any]:
        """Every graph's value of ``key`` (``KeyError`` if one lacks it)."""
        column = self._columns.get(key)
        if column is None:
            column = [m[key] for m in self.mappings]
            self._columns[key] = column
        return column

    def sizes(self, key: str, dim: int) -> List[int]:
        """Every graph's size of tensor ``key`` along ``dim``."""
        column = self.column(key)
        dim = dim % column[0].dim()
        sizes = self._sizes.get((key, dim))
        if sizes is None:
            sizes = [v.shape[dim] for v in column]
            self._sizes[(key, dim)] = sizes
        return sizes
