"""Vectorised collation of real graphs plus their padding into one batch.

The result is bit-identical to ``Batch.from_data_list(real + padding
graphs)`` (the reference path), including ``_slice_dict``, ``_inc_dict`` and
``_num_graphs``, so ``get_example`` and ``to_data_list`` work on it. What
makes it fast: per-graph Python work is limited to gathering tensors and
sizes; then there is one ``torch.cat`` per attribute written straight into a
preallocated output (one ``index_select`` of the dataset's storage when the
graphs are slices of an ``InMemoryDataset``, see ``storage``), the padding
block is one ``fill_``, and index offsets come from one cumulative sum of
the node counts expanded by one repeat. PyG instead adds the offset graph by
graph and builds the batch vector from one ``torch.full`` per graph. Sizes
and offsets are computed with NumPy, whose calls on arrays of a few hundred
entries cost a fraction of PyTorch's.

Only homogeneous ``Data`` lists of dense CPU tensors and plain Python values
are handled; :func:`fast_collate` returns ``None`` for anything else
(``HeteroData``, ``Data`` subclasses with their own ``__inc__`` or
``__cat_dim__``, sparse, nested or ``Index`` tensors, nested dicts or lists
of tensors, attributes with ``"batch"`` in their name) and the caller takes
the reference path.
"""
from collections.abc import Mapping, Sequence
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data
from torch_geometric.typing import TensorFrame
from torch_geometric.utils import cumsum

from .._padding.columns import Columns
from .._padding.validate import check_local_indices, check_same_shapes
from .._padding.plan import AttrSpec, Level, PaddingPlan, share_sizes
from ..common import DataBatch as _DATA_BATCH


def listable_values(column: List[Any]) -> bool:
    """True when PyG lists the non-tensor values of ``column`` or makes
    them one tensor (no nested dicts or lists of tensors)."""
    v0 = column[0]
    if isinstance(v0, (Tensor, Mapping, TensorFrame)):
        return False
    return not (isinstance(v0, Sequence) and not isinstance(v0, str)
                and len(v0) > 0 and isinstance(v0[0], Tensor))


def _gather(columns: Columns, keys: List[str]) -> bool:
    """True when every kept attribute can take the fast path."""
    for key in keys:
        if "batch" in key:
            return False
        try:
            first = columns.first(key)
        except KeyError:
            return False  # PyG raises its own error on the reference path
        if isinstance(first, Tensor):
            # Gradients would make ``torch.cat(out=...)`` raise; mixed
            # dtypes would promote unlike PyG's per-graph additions.
            if not columns.plain_tensors(key):
                return False
        elif not listable_values(columns.column(key)):
            return False
    return True


def _long(values: Any) -> Tensor:
    """An int64 tensor of a list or array of ints. Bookkeeping of a batch
    works on about a hundred sizes, where a NumPy call costs a fraction of
    a PyTorch one (``torch.tensor(list)`` alone costs more than the
    conversion here)."""
    return torch.from_numpy(np.asarray(values, dtype=np.int64))


def sizes_ptr(sizes: np.ndarray) -> Tensor:
    """``torch_geometric.utils.cumsum`` of int64 ``sizes``: a leading 0,
    then the running sum."""
    ptr = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    return torch.from_numpy(ptr)


class _Offsets:
    """Node offsets of every graph (real and padding), computed once."""

    def __init__(self, node_counts: List[int]) -> None:
        self.counts = _long(node_counts)
        self.ptr = sizes_ptr(self.counts.numpy())
        self.num_graphs = len(node_counts)
        # PyG's increments are ``cumsum(repeats[:-1])``: the ptr without its
        # end; it adds them only when the last one is non-zero.
        self.active = int(self.ptr[-2]) != 0 if self.num_graphs else False

    def real_counts(self, num_real_graphs: int) -> np.ndarray:
        """The node counts of the real graphs."""
        return self.counts.numpy()[:num_real_graphs]

    def incs(self, incremented: bool) -> Tensor:
        if incremented:
            return self.ptr[:-1].clone()
        return torch.zeros(self.num_graphs, dtype=torch.long)


class _SizeTensors:
    """``torch.tensor(real + padding sizes)``, built once per distinct pair
    of size lists (node-level attributes share one, edge-level another)."""

    def __init__(self) -> None:
        self._cache: Dict[Tuple[int, int], Tensor] = {}

    def get(self, real: List[int], pad: List[int]) -> Tensor:
        key = (id(real), id(pad))
        tensor = self._cache.get(key)
        if tensor is None:
            tensor = _long(real + pad)
            self._cache[key] = tensor
        return tensor


def _concat_and_fill(spec: AttrSpec, columns: Columns, dim: int,
                     real_sizes: List[int], shape: List[int], pad: int,
                     offsets: _Offsets) -> Tensor:
    """The graphs' tensors ``spec.key`` concatenated along ``dim`` (their
    ``shape`` otherwise), then ``pad`` entries of the spec's fill."""
    num_real = sum(real_sizes)
    shape[dim] = num_real + pad
    out = torch.empty(shape, dtype=columns.first(spec.key).dtype)
    if spec.cat_dim is None:
        torch.stack(columns.column(spec.key),
                    out=out.narrow(0, 0, num_real))
    else:
        try:
            columns.concat(spec.key, dim, out.narrow(dim, 0, num_real))
        except RuntimeError:
            # torch names neither the attribute nor the graphs.
            check_same_shapes(columns.column(spec.key), spec.key, dim)
            raise
        if spec.key == "edge_index" and not columns.checked_at_source:
            # The graphs' own indices, before the batch offsets: each must
            # point to a node of its graph (a storage was checked once).
            check_local_indices(out.narrow(dim, 0, num_real), real_sizes,
                                offsets.real_counts(len(real_sizes)))
    out.narrow(dim, num_real, pad).fill_(spec.fill)
    return out


def _collate_tensor(spec: AttrSpec, columns: Columns, pad_sizes: List[int],
                    offsets: _Offsets, size_tensors: _SizeTensors,
                    bookkeeping: bool = True):
    v0 = columns.first(spec.key)
    if spec.cat_dim is None:  # 0-dim: one entry per graph, as PyG unsqueezes
        column = columns.column(spec.key)
        dim, real_sizes, shape = 0, [1] * len(column), [1]
    else:
        dim = spec.cat_dim % v0.dim()
        real_sizes, shape = columns.sizes(spec.key, dim), list(v0.shape)
    pad = sum(pad_sizes)
    out = None if spec.cat_dim is None else columns.padded_concat(
        spec.key, dim, pad, spec.fill)
    if out is None:
        out = _concat_and_fill(spec, columns, dim, real_sizes, shape, pad,
                               offsets)
    offset = spec.incremented and offsets.active
    if not (bookkeeping or offset):
        return out, None, None
    sizes = size_tensors.get(real_sizes, pad_sizes)
    incs = offsets.incs(spec.incremented)
    if offset:
        # One offset per element along ``dim``, broadcast over the others;
        # the dtype follows PyG's ``value + 0-dim int64 tensor``.
        per_element = torch.from_numpy(np.repeat(incs.numpy(),
                                                 sizes.numpy()))
        view = [1] * out.dim()
        view[dim] = -1
        dtype = torch.result_type(v0, incs[0])
        per_element = per_element.to(dtype).view(view)
        out = out.add_(per_element) if dtype == out.dtype \
            else out.to(dtype) + per_element
    return out, sizes_ptr(sizes.numpy()) if bookkeeping else None, incs


def _collate_values(spec: AttrSpec, column: List[Any], num_pad: int,
                    offsets: _Offsets):
    values = column + [spec.fill] * num_pad
    slices = torch.arange(len(values) + 1)
    if not isinstance(column[0], (int, float)):
        return values, slices, None
    value = torch.tensor(values)
    incs = offsets.incs(spec.incremented)
    if int(incs[-1]) != 0:
        value.add_(incs)
    return value, slices, incs


def _follow(out_store: Any, key: str, slices: Tensor) -> None:
    """PyG's ``follow_batch`` vector and pointer of ``key``."""
    repeats = slices[1:] - slices[:-1]
    out_store[f"{key}_batch"] = torch.repeat_interleave(
        torch.arange(len(repeats)), repeats)
    out_store[f"{key}_ptr"] = cumsum(repeats)


def fast_collate(data_list: List[Data], columns: Optional[Columns],
                 plan: PaddingPlan, node_counts: List[int],
                 follow_batch: List[str], exclude_keys: List[str],
                 bookkeeping: bool = True) -> Optional[Batch]:
    """``Batch.from_data_list(data_list + padding graphs of plan)`` built
    without the padding graphs, or None when unsupported (see the module
    docstring). ``columns`` are ``data_list``'s (None when not plain
    ``Data``) and ``node_counts`` the real graphs' node counts. Without
    ``bookkeeping``, no ``_slice_dict`` and ``_inc_dict`` (read by
    ``get_example``), for callers that keep only tensors and counts."""
    if plan.hetero or columns is None:
        return None
    specs = {spec.key: spec for spec in plan.specs[None]}
    first = data_list[0]._store
    keys = [k for k in first._mapping if k in specs or
            (k == "num_nodes" and k not in exclude_keys)]
    if not _gather(columns, keys):
        return None

    # ``follow_batch`` vectors are built from the slices.
    bookkeeping = bookkeeping or bool(follow_batch)
    shares = plan.node_shares[None]
    offsets = _Offsets(node_counts + shares)
    size_tensors = _SizeTensors()
    # What ``Batch(_base_cls=Data)`` builds, without the metaclass's
    # per-call signature inspection.
    out = type.__call__(_DATA_BATCH)
    out_store = out._store
    slice_dict: Dict[str, Any] = {}
    inc_dict: Dict[str, Any] = {}
    for key in keys:
        if key == "num_nodes":
            values = columns.column(key) + shares
            out_store._num_nodes = values
            out_store.num_nodes = sum(values)
            continue
        spec = specs[key]
        if spec.level is Level.OTHER:
            value, slices, incs = _collate_values(
                spec, columns.column(key), plan.num_pad_graphs, offsets)
        else:
            value, slices, incs = _collate_tensor(
                spec, columns, share_sizes(plan, None, spec), offsets,
                size_tensors, bookkeeping)
        out_store[key] = value
        slice_dict[key] = slices
        inc_dict[key] = incs
        if key in follow_batch:
            _follow(out_store, key, slices)

    if first.can_infer_num_nodes:
        out_store.batch = torch.from_numpy(np.repeat(
            np.arange(offsets.num_graphs, dtype=np.int64),
            offsets.counts.numpy()))
        out_store.ptr = offsets.ptr
    out._num_graphs = offsets.num_graphs
    if bookkeeping:
        out._slice_dict = slice_dict
        out._inc_dict = inc_dict
    return out
