"""The padding's view of graphs read from one dataset storage: the
:class:`~poptorch_geometric._padding.columns.Columns` of a batch of them,
served from the storage where it can.

The fixed-size collater reads every batch through ``Columns.of``; a
:class:`~.graph_cache.GraphList` (the graphs of a cached dataset, tagged
with their storage rows) answers with a :class:`StorageColumns`, so the
padding code needs to know nothing of storages.

Example::

    >>> from torch_geometric.datasets import FakeDataset
    >>> from poptorch_geometric._fastpath.graph_cache import cached_graphs
    >>> graphs = cached_graphs(FakeDataset(num_graphs=4)).__getitems__([2, 0])
    >>> cols = graphs.padding_columns()
    >>> cols.checked_at_source, cols.sizes("x", 0) == [g.num_nodes for g in graphs]
    (True, True)
"""
from typing import Any, Dict, List, Optional, Tuple

from torch import Tensor
from torch_geometric.data import Data

from .._padding.columns import Columns


class StorageColumns(Columns):
    """:class:`Columns` of graphs that are slices of one dataset storage
    (:class:`~.storage.GraphStorage`): the sizes and the concatenation of
    the keys the storage serves come from it in a few vectorised ops; other
    keys are read from the graphs."""

    #: The storage's edges and attributes were checked once, with it.
    checked_at_source = True

    def __init__(self, data_list: List[Data], storage: Any,
                 positions: Any) -> None:
        super().__init__(data_list)
        # Slices of one storage have the same keys (``separate`` gives each
        # every key the storage has slices for).
        self._same_keys = True
        self.storage = storage
        self.positions = positions
        self._size_arrays: Dict[str, Any] = {}
        self._size_lists: Dict[str, List[int]] = {}
        self._indices: Dict[Tuple[str, int], Tensor] = {}

    def _sizes_of(self, key: str) -> Any:
        group = self.storage.group(key)
        sizes = self._size_arrays.get(group)
        if sizes is None:
            sizes = self.storage.sizes(key, self.positions)
            self._size_arrays[group] = sizes
        return sizes

    def sizes(self, key: str, dim: int) -> List[int]:
        if not self.storage.serves(key, dim):
            return super().sizes(key, dim)
        # One list per group of keys with equal slices: the collater builds
        # one size tensor per distinct list.
        group = self.storage.group(key)
        sizes = self._size_lists.get(group)
        if sizes is None:
            sizes = self._sizes_of(key).tolist()
            self._size_lists[group] = sizes
        return sizes

    def first(self, key: str) -> Any:
        # Every graph of a storage has every key of the storage.
        if self.storage.serves(key):
            return self.first_mapping[key]
        return super().first(key)

    def leading_sizes(self, key: str) -> Optional[List[int]]:
        # A storage slice has the storage's dims, at least one.
        if self.storage.serves(key, 0):
            return self.sizes(key, 0)
        return super().leading_sizes(key)

    def plain_tensors(self, key: str) -> bool:
        # One storage tensor: one dtype, dense, on the CPU, no gradients.
        return self.storage.serves(key) or super().plain_tensors(key)

    def _gather_index(self, key: str, pad: int) -> Tensor:
        # Keys with equal slices share one index per padding length.
        group = (self.storage.group(key), pad)
        index = self._indices.get(group)
        if index is None:
            index = self.storage.gather_index(key, self.positions,
                                              self._sizes_of(key), pad)
            self._indices[group] = index
        return index

    def concat(self, key: str, dim: int, out: Tensor) -> None:
        if not self.storage.serves(key, dim):
            super().concat(key, dim, out)
            return
        self.storage.gather(key, self._gather_index(key, 0), out=out)

    def padded_concat(self, key: str, dim: int, pad: int,
                      fill: Any) -> Optional[Tensor]:
        if not self.storage.serves(key, dim):
            return None
        padded = self.storage.padded(key, fill)
        if padded is None:
            return None
        return self.storage.gather_padded(key, padded,
                                          self._gather_index(key, pad))
