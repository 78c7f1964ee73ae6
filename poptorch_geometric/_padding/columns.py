"""Attributes of a list of plain ``Data`` graphs, gathered once per batch.

Label detection, attribute classification, node/edge counting and the fast
collation path all read the same per-graph values; reading them through
``Data.__getattr__`` for every graph and every step would cost more than the
collation itself.

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> cols = Columns.of([Data(x=torch.ones(2, 3)), Data(x=torch.ones(4, 3))])
    >>> cols.sizes("x", 0), cols.node_counts()
    ([2, 4], [2, 4])
"""
import operator
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.data.data import BaseData
from torch_geometric.data.storage import E_KEYS, N_KEYS

_DTYPE = operator.attrgetter("dtype")
_REQUIRES_GRAD = operator.attrgetter("requires_grad")


class Columns:
    """Per-key lists of the graphs' values (``column``) and of their sizes
    along a dim (``sizes``), both cached."""

    #: Whether the graphs were checked once where they come from (their
    #: edges point inside their graph, their attributes agree), so that a
    #: batch of them needs no such check. A subclass that reads graphs
    #: from a checked source says so.
    checked_at_source = False

    def __init__(self, data_list: List[Data]) -> None:
        self._data_list = data_list
        self._mappings: Optional[List[Dict[str, Any]]] = None
        self._columns: Dict[str, List[Any]] = {}
        self._sizes: Dict[Tuple[str, int], List[int]] = {}
        self._plain: Dict[str, bool] = {}
        self._same_keys: Optional[bool] = None

    @property
    def first_mapping(self) -> Dict[str, Any]:
        """The first graph's attribute mapping."""
        return self._data_list[0]._store._mapping

    @property
    def mappings(self) -> List[Dict[str, Any]]:
        """Every graph's attribute mapping (its store's ``_mapping``)."""
        if self._mappings is None:
            self._mappings = [d._store._mapping for d in self._data_list]
        return self._mappings

    @staticmethod
    def of(data_list: List[BaseData]) -> Optional["Columns"]:
        """Columns of ``data_list``, or None unless every graph is a plain
        ``Data`` (subclasses may batch differently). A list that brings its
        own view (a ``padding_columns()`` method, as the fast path's lists
        of a dataset's graphs have) gives that view."""
        own_view = getattr(data_list, "padding_columns", None)
        if own_view is not None:
            return own_view()
        if set(map(type, data_list)) != {Data}:
            return None
        return Columns(data_list)

    def column(self, key: str) -> List[Any]:
        """Every graph's value of ``key`` (``KeyError`` if one lacks it)."""
        column = self._columns.get(key)
        if column is None:
            column = [m[key] for m in self.mappings]
            self._columns[key] = column
        return column

    def first(self, key: str) -> Any:
        """The first graph's value of ``key`` (``KeyError`` if any graph
        lacks it)."""
        return self.column(key)[0]

    def sizes(self, key: str, dim: int) -> List[int]:
        """Every graph's size of tensor ``key`` along ``dim``."""
        column = self.column(key)
        dim = dim % column[0].dim()
        sizes = self._sizes.get((key, dim))
        if sizes is None:
            sizes = [v.shape[dim] for v in column]
            self._sizes[(key, dim)] = sizes
        return sizes

    def leading_sizes(self, key: str) -> Optional[List[int]]:
        """Every graph's ``shape[0]`` of tensor ``key``, or None when one
        of them is 0-dim."""
        if any(v.dim() == 0 for v in self.column(key)):
            return None
        return self.sizes(key, 0)

    def concat(self, key: str, dim: int, out: Tensor) -> None:
        """Writes the graphs' tensors ``key`` concatenated along ``dim``
        into ``out`` (plain tensors only)."""
        torch.cat(self.column(key), dim=dim, out=out)

    def padded_concat(self, key: str, dim: int, pad: int,
                      fill: Any) -> Optional[Tensor]:
        """The graphs' tensors ``key`` concatenated along ``dim`` and
        followed by ``pad`` entries of ``fill`` in one operation, or None
        where that takes more than :meth:`concat` and a fill (here:
        always)."""
        return None

    def node_counts(self) -> Optional[List[int]]:
        """Every graph's ``num_nodes`` as PyG infers it, or None when that
        needs PyG's own walk through the store."""
        return self._counts("num_nodes", N_KEYS)

    def edge_counts(self) -> Optional[List[int]]:
        """Every graph's ``num_edges`` as PyG infers it, or None."""
        return self._counts("num_edges", E_KEYS)

    def _counts(self, explicit: str,
                known_keys: FrozenSet[str]) -> Optional[List[int]]:
        # PyG takes an explicit count, else the size of the first tensor
        # in store order whose key is well known (``x``, ``edge_index``...).
        # When every graph has the same keys and all candidate tensors
        # agree on their sizes, the order no longer matters.
        first = self.first_mapping
        keys = first.keys()
        if self._same_keys is None:
            self._same_keys = all(m.keys() == keys for m in self.mappings)
        if not self._same_keys:
            return None
        if explicit in first:
            counts = self.column(explicit)
            return counts if all(type(c) is int for c in counts) else None
        candidates = [k for k in keys if k in known_keys]
        if not candidates or not all(
                self.plain_tensors(k) and self.first(k).dim() > 0
                for k in candidates):
            return None
        try:
            counts = self.sizes(candidates[0], cat_dim(candidates[0]))
            if any(self.sizes(k, cat_dim(k)) != counts
                   for k in candidates[1:]):
                return None
        except IndexError:  # a 0-dim value among them: let PyG decide
            return None
        return counts

    def plain_tensors(self, key: str) -> bool:
        """True when ``key`` holds dense CPU tensors of one dtype without
        gradients in every graph (what the fast collation path handles)."""
        plain = self._plain.get(key)
        if plain is None:
            column = self.column(key)
            v0 = column[0]
            # map() with C-level getters: this runs for every attribute of
            # every batch.
            plain = (type(v0) is Tensor and v0.layout == torch.strided
                     and v0.device.type == "cpu" and not v0.is_nested
                     and set(map(type, column)) == {Tensor}
                     and len(set(map(_DTYPE, column))) == 1
                     and not any(map(_REQUIRES_GRAD, column)))
            self._plain[key] = plain
        return plain


def cat_dim(key: str) -> int:
    """``Data.__cat_dim__`` of a dense tensor attribute ``key``."""
    return -1 if "index" in key or key == "face" else 0
