"""Batch-wise reads of an ``InMemoryDataset``'s collated storage.

An ``InMemoryDataset`` keeps all its graphs in one ``Data`` object (its
*storage*) plus ``slices``: graph ``i``'s value of ``key`` is
``storage[key].narrow(cat_dim, slices[key][i], size)``. That is exactly
what ``InMemoryDataset.get`` hands out. So a batch's concatenation of
``key`` is one ``index_select`` of the storage tensor, and every graph's
size along ``cat_dim`` is one lookup in ``slices[key].diff()``: no Python
work per graph and no ``torch.cat`` over hundreds of small views.

Only keys that are read exactly that way are served: dense, strided CPU
tensors without gradients, with an integer ``__cat_dim__`` and a 1-D
``slices`` entry. Everything else (strings, 0-dim values, nested
attributes, ``Index`` tensors, ...) is read from the graph objects as
usual. ``torch.utils.data.Subset`` wrappers (``random_split``) are seen
through. Datasets that override ``get`` or ``__getitem__`` are not served at
all: their graphs need not be storage slices.

Example::

    >>> import torch
    >>> from torch_geometric.datasets import FakeDataset
    >>> ds = FakeDataset(num_graphs=8)
    >>> storage = GraphStorage.of(ds)
    >>> rows = storage.positions([5, 2])
    >>> index = storage.gather_index("x", rows, storage.sizes("x", rows))
    >>> torch.equal(storage.gather("x", index), torch.cat([ds[5].x, ds[2].x]))
    True
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Subset
from torch_geometric.data import Data, Dataset, InMemoryDataset

from .._padding.validate import first_out_of_range, out_of_range_error


def unwrap_subsets(dataset: Any) -> Tuple[Any, List[np.ndarray]]:
    """The dataset under any ``torch.utils.data.Subset`` wrappers (what
    ``random_split`` makes), and their indices, outermost first."""
    chain = []
    while isinstance(dataset, Subset):
        chain.append(np.asarray(dataset.indices, dtype=np.int64))
        dataset = dataset.dataset
    return dataset, chain


def _reads_storage_slices(dataset: Any) -> bool:
    """True when ``dataset[i]`` is ``separate(storage, slices, i)``: PyG's
    own ``get``/``__getitem__``, no transform, a plain ``Data`` storage."""
    cls = type(dataset)
    return (isinstance(dataset, InMemoryDataset)
            and cls.get is InMemoryDataset.get
            and cls.__getitem__ is Dataset.__getitem__
            and cls.indices is Dataset.indices
            and dataset.transform is None
            and getattr(dataset, "slices", None) is not None
            and type(getattr(dataset, "_data", None)) is Data)


#: Largest storage tensor, in bytes, that gets a padded copy
#: (:meth:`GraphStorage.padded`): one gather then makes a whole padded batch
#: tensor, where filling the padding takes three more tensor operations per
#: key (a tenth of an NCI batch's collation); a second copy of a larger
#: tensor would cost more memory than that is worth.
PADDED_COPY_BYTES = 64 * 2**20

#: Dtypes whose tensors NumPy can view (``Tensor.numpy``).
_NUMPY_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
    torch.int64, torch.float16, torch.float32, torch.float64,
    torch.complex64, torch.complex128})


class GraphStorage:
    """The storage of an ``InMemoryDataset`` for the keys it can serve.

    Build it with :meth:`of`, which returns None for datasets whose graphs
    are not plain storage slices. Row bookkeeping is in NumPy: a batch needs
    a handful of operations on arrays of about a hundred entries, where
    NumPy's per-call cost is a fraction of PyTorch's.
    """

    def __init__(self, dataset: InMemoryDataset,
                 subsets: Sequence[np.ndarray] = ()) -> None:
        data, slices = dataset._data, dataset.slices
        store = data._store
        #: Position in the storage of each index (a subset made by
        #: ``dataset[a:b]`` or ``index_select`` keeps the full storage; so
        #: do the ``Subset`` wrappers of ``subsets``, outermost first).
        self._rows = np.asarray(dataset.indices(), dtype=np.int64)
        for indices in reversed(subsets):
            self._rows = self._rows[indices]
        self._values: Dict[str, Tensor] = {}
        self._cat_dims: Dict[str, int] = {}
        #: Keys with equal slices share one entry (e.g. ``edge_index`` and
        #: ``edge_attr``), and so one gather index per batch.
        self._group: Dict[str, str] = {}
        self._starts: Dict[str, np.ndarray] = {}
        self._counts: Dict[str, np.ndarray] = {}
        self._padded: Dict[Tuple[str, type, str], Tensor] = {}
        num_stored = None
        for key, value in store.items():
            ptr = slices.get(key)
            if not (type(value) is Tensor and type(ptr) is Tensor
                    and value.layout == torch.strided
                    and value.device.type == "cpu" and value.dim() > 0
                    and not value.requires_grad and not value.is_nested
                    and ptr.dim() == 1 and not ptr.is_floating_point()):
                continue
            cat_dim = data.__cat_dim__(key, value, store)
            if not isinstance(cat_dim, int):
                continue
            num_stored = num_stored or len(ptr) - 1
            if len(ptr) - 1 != num_stored:
                continue
            self._values[key] = value
            self._cat_dims[key] = cat_dim % value.dim()
            ptr = ptr.numpy().astype(np.int64)
            self._group[key] = next(
                (k for k, starts in self._starts.items()
                 if np.array_equal(starts, ptr[:-1]) and
                 np.array_equal(self._counts[k], np.diff(ptr))), key)
            if self._group[key] == key:
                self._starts[key] = ptr[:-1]
                self._counts[key] = np.diff(ptr)

    @staticmethod
    def of(dataset: Any) -> Optional["GraphStorage"]:
        """The storage of ``dataset`` (possibly under ``Subset`` wrappers),
        or None when its graphs are not plain slices of one (see the module
        docstring). Its graphs' ``edge_index`` is checked once, here, so
        that batches read from it need no check of their own."""
        dataset, subsets = unwrap_subsets(dataset)
        if not _reads_storage_slices(dataset):
            return None
        storage = GraphStorage(dataset, subsets)
        if not storage._values:
            return None
        storage.check_edge_index()
        return storage

    def check_edge_index(self) -> None:
        """Raises unless every graph of this view has its ``edge_index``
        entries in ``[0, num_nodes)`` (node counts from ``x``'s slices)."""
        if not (self.serves("edge_index") and self.serves("x", 0)
                and self._cat_dims["edge_index"] == 1):
            return
        rows = np.unique(self._rows)
        sizes = self.sizes("edge_index", rows)
        counts = self.sizes("x", rows)
        found = first_out_of_range(
            self.gather("edge_index",
                        self.gather_index("edge_index", rows, sizes)),
            sizes, counts)
        if found is not None:
            graph, value = found
            index = int(np.flatnonzero(self._rows == rows[graph])[0])
            raise out_of_range_error(f"Graph {index} of the dataset", value,
                                     int(counts[graph]))

    def positions(self, indices: Sequence[int]) -> np.ndarray:
        """Storage rows of the dataset indices ``indices``."""
        return self._rows[np.asarray(indices, dtype=np.int64)]

    def serves(self, key: str, dim: Optional[int] = None) -> bool:
        """True when ``key`` (concatenated along ``dim``, default: its own
        dim) is read from the storage."""
        cat_dim = self._cat_dims.get(key)
        if cat_dim is None:
            return False
        return dim is None or dim % self._values[key].dim() == cat_dim

    def cat_dim(self, key: str) -> int:
        """The (non-negative) concatenation dim of a served ``key``."""
        return self._cat_dims[key]

    def group(self, key: str) -> str:
        """The served key whose slices ``key`` shares (maybe itself)."""
        return self._group[key]

    def sizes(self, key: str, positions: np.ndarray) -> np.ndarray:
        """Each graph's size of served ``key`` along its cat dim."""
        return self._counts[self._group[key]][positions]

    def gather_index(self, key: str, positions: np.ndarray,
                     sizes: np.ndarray, pad: int = 0) -> Tensor:
        """Where the concatenation of served ``key`` over ``positions``
        sits in the storage, along the cat dim (``sizes`` are
        :meth:`sizes` of the same positions), then ``pad`` times the
        position of :meth:`padded`'s fill entry."""
        # Element j of graph g sits at starts[g] + j in the storage and at
        # ends_before[g] + j in the batch.
        shift = self._starts[self._group[key]][positions] - \
            (np.cumsum(sizes) - sizes)
        real = int(sizes.sum())
        index = np.empty(real + pad, dtype=np.int64)
        np.add(np.repeat(shift, sizes), np.arange(real), out=index[:real])
        index[real:] = self._values[key].shape[self._cat_dims[key]]
        return torch.from_numpy(index)

    def gather_padded(self, key: str, padded: Tensor,
                      index: Tensor) -> Tensor:
        """The entries ``index`` (from :meth:`gather_index` with a
        ``pad``) of served ``key`` along its cat dim, read from its
        :meth:`padded` copy ``padded``."""
        dim = self._cat_dims[key]
        if padded.dtype in _NUMPY_DTYPES:
            # NumPy's take costs about half of index_select's time here
            # (fewer layers between the call and the copy).
            return torch.from_numpy(np.take(padded.numpy(), index.numpy(),
                                            axis=dim))
        return padded.index_select(dim, index)

    def padded(self, key: str, fill: Any) -> Optional[Tensor]:
        """Served ``key``'s storage tensor with one entry of ``fill``
        appended along its cat dim, made once per key and fill, so that a
        padded batch tensor is one gather (:meth:`gather_index` with
        ``pad``); None for a tensor over :data:`PADDED_COPY_BYTES`."""
        value, dim = self._values[key], self._cat_dims[key]
        if value.numel() * value.element_size() > PADDED_COPY_BYTES:
            return None
        # The type too: 0, 0.0 and False fill alike but are separate keys.
        cache_key = (key, type(fill), str(fill))
        padded = self._padded.get(cache_key)
        if padded is None:
            shape = list(value.shape)
            shape[dim] = 1
            # ``fill_`` casts the fill as the collation's padding does.
            entry = torch.empty(shape, dtype=value.dtype).fill_(fill)
            padded = torch.cat([value, entry], dim)
            self._padded[cache_key] = padded
        return padded

    def gather(self, key: str, index: Tensor,
               out: Optional[Tensor] = None) -> Tensor:
        """The rows ``index`` (from :meth:`gather_index`) of served ``key``
        along its cat dim (written to ``out`` when given)."""
        value, dim = self._values[key], self._cat_dims[key]
        if out is None:
            return value.index_select(dim, index)
        if out.is_contiguous():
            return torch.index_select(value, dim, index, out=out)
        return out.copy_(value.index_select(dim, index))
