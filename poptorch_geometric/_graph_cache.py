"""A read-through cache of an in-memory dataset's graphs for the loaders.

``InMemoryDataset.__getitem__`` rebuilds a ``Data`` object (a shallow copy
of its cached one, after length and index bookkeeping) on every access:
about as much host time per graph as collating it. The fixed-size loaders
only read the graphs they get, so they keep the first object of each index
and hand the same one out in later epochs. Datasets with a ``transform``
are not cached: a transform may return something different every time.

Example::

    >>> from poptorch_geometric.datasets import SyntheticMolecules
    >>> ds = cached_graphs(SyntheticMolecules(8))
    >>> ds[3] is ds[3], len(ds), ds.dataset.__class__.__name__
    (True, 8, 'SyntheticMolecules')
"""
from typing import Any, List, Optional

from torch.utils.data import Dataset
from torch_geometric.data import InMemoryDataset

__all__: List[str] = []


class CachedGraphs(Dataset):
    """``dataset`` with each graph built once. Other attributes are read
    from ``dataset`` (``num_features``, ``num_classes``, ...)."""

    def __init__(self, dataset: InMemoryDataset):
        self.dataset = dataset
        self._graphs: List[Optional[Any]] = [None] * len(dataset)

    def __len__(self) -> int:
        return len(self._graphs)

    def __getitem__(self, idx: int) -> Any:
        graph = self._graphs[idx]
        if graph is None:
            graph = self._graphs[idx] = self.dataset[idx]
        return graph

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this wrapper lacks; "dataset" itself may be
        # missing while unpickling.
        if name == "dataset" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


def cached_graphs(dataset: Any) -> Any:
    """``dataset`` behind a :class:`CachedGraphs` when that is safe (an
    ``InMemoryDataset`` without a transform), else ``dataset`` itself."""
    if isinstance(dataset, InMemoryDataset) and dataset.transform is None:
        return CachedGraphs(dataset)
    return dataset
