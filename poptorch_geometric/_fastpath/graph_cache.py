"""A read-through cache of an in-memory dataset's graphs for the loaders.

``InMemoryDataset.__getitem__`` rebuilds a ``Data`` object (a shallow copy
of its cached one, after length and index bookkeeping) on every access:
about as much host time per graph as collating it. The fixed-size loaders
only read the graphs they get, so they keep the first object of each index
and hand the same one out in later epochs. Datasets with a ``transform``
are not cached: a transform may return something different every time.

A batch of indices is fetched at once (``__getitems__``, which PyTorch's
``DataLoader`` calls with each batch): the result is the list of graphs,
tagged with the dataset's :class:`~._storage.GraphStorage` and the graphs'
rows in it, so that the fixed-size collater can read whole columns from the
storage instead of graph by graph.

Example::

    >>> from torch_geometric.datasets import FakeDataset
    >>> ds = cached_graphs(FakeDataset(num_graphs=8))
    >>> ds[3] is ds[3], len(ds), ds.dataset.__class__.__name__
    (True, 8, 'FakeDataset')
    >>> batch = ds.__getitems__([5, 2])
    >>> batch[0] is ds[5], batch.positions.tolist()
    (True, [5, 2])
"""
from typing import Any, List, Optional, Sequence

import numpy as np
from torch.utils.data import Dataset
from torch_geometric.data import InMemoryDataset

from .storage import GraphStorage, unwrap_subsets
from .storage_columns import StorageColumns


class GraphList(list):
    """A list of graphs that knows where they sit in a dataset's storage.

    ``storage`` and ``positions`` (the storage rows of the graphs, in list
    order) let a collater read columns in bulk; any other code sees a plain
    list. A contiguous slice keeps the tags; anything else makes a plain
    list.
    """

    def __init__(self, graphs: Sequence[Any], storage: GraphStorage,
                 positions: np.ndarray) -> None:
        super().__init__(graphs)
        self.storage = storage
        self.positions = positions

    def __getitem__(self, item):
        if isinstance(item, slice) and item.step in (None, 1):
            return GraphList(super().__getitem__(item), self.storage,
                             self.positions[item])
        return super().__getitem__(item)

    def padding_columns(self) -> StorageColumns:
        """The collater's view of these graphs, read from the storage
        where it can (graphs read from a plain ``Data`` storage are plain
        ``Data``)."""
        return StorageColumns(self, self.storage, self.positions)


class CachedGraphs(Dataset):
    """``dataset`` with each graph built once. Other attributes are read
    from ``dataset`` (``num_features``, ``num_classes``, ...)."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self._graphs: List[Optional[Any]] = [None] * len(dataset)
        #: Indices not built yet (once 0, a batch is plain list lookups).
        self._missing = len(self._graphs)
        self._storage = GraphStorage.of(dataset)

    def __len__(self) -> int:
        return len(self._graphs)

    def __getitem__(self, idx: int) -> Any:
        graph = self._graphs[idx]
        if graph is None:
            graph = self._graphs[idx] = self.dataset[idx]
            self._missing -= 1
        return graph

    def __getitems__(self, indices: List[int]) -> List[Any]:
        if self._missing:
            graphs = [self[i] for i in indices]
        else:
            cached = self._graphs
            graphs = [cached[i] for i in indices]
        if self._storage is None:
            return graphs
        return GraphList(graphs, self._storage,
                         self._storage.positions(indices))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this wrapper lacks; "dataset" itself may be
        # missing while unpickling.
        if name == "dataset" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


def cached_graphs(dataset: Any) -> Any:
    """``dataset`` behind a :class:`CachedGraphs` when that is safe (an
    ``InMemoryDataset`` without a transform, possibly under ``Subset``
    wrappers such as ``random_split`` makes), else ``dataset`` itself."""
    base, _ = unwrap_subsets(dataset)
    if isinstance(base, InMemoryDataset) and base.transform is None:
        return CachedGraphs(dataset)
    return dataset
