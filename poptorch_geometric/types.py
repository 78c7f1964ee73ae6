"""How PopTorch flattens PyG objects into tensors and rebuilds them.

Registering :class:`PyGArgsParser` makes ``Data``, ``HeteroData`` and
``Batch`` objects valid inputs of PopTorch models, and lets the PopTorch-side
loaders concatenate mini-batches tensor by tensor. It also tells a training
model which micro-batches hold padding only
(:meth:`PyGArgsParser.paddingMask`).

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> parser = PyGArgsParser()
    >>> data = Data(x=torch.ones(3, 2), edge_index=torch.zeros(2, 4).long())
    >>> [t.shape for t in parser.yieldTensors(data)]   # sorted keys
    [torch.Size([2, 4]), torch.Size([3, 2])]
    >>> parser.reconstruct(data, iter(parser.yieldTensors(data))).x.shape
    torch.Size([3, 2])
"""
import functools
from typing import Any, Dict, Iterator, List, Optional

import torch
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.data.data import BaseData

import poptorch_core as poptorch

from ._padding_masks import record_batch
from .common import DataBatch, HeteroDataBatch, call_once

__all__ = ["PyGArgsParser", "registerCustomArgParsers"]


class PyGArgsParser(poptorch.ICustomArgParser):
    """Flattens PyG data objects to tensors and rebuilds them.

    ``Data`` (and ``DataBatch``) tensors are yielded in sorted key order;
    ``HeteroData`` tensors in store order (global store, node stores, edge
    stores). Rebuilding a ``Data`` keeps only its tensor attributes; rebuilding
    a ``HeteroData`` keeps non-tensor attributes too.
    """

    #: The masks of real entries, in the order :meth:`paddingMask` looks.
    _MASK_KEYS = ("graphs_mask", "nodes_mask")

    def paddingMask(self, struct: Any) -> Optional[torch.Tensor]:
        """The ``graphs_mask`` of a fixed-size batch (its ``nodes_mask``
        when it has none), None for data without masks.

        A training model splits it with the other inputs and leaves each
        mini-batch whose part has no True entry (a padding-only
        mini-batch, as the loaders add to complete a last step) out of the
        optimizer step: no gradient, and ``Mean`` divides by the number of
        real mini-batches.

        Example::

            >>> from torch_geometric.data import Data
            >>> mask = torch.tensor([True, False])
            >>> PyGArgsParser().paddingMask(Data(x=torch.ones(2, 1),
            ...                                  graphs_mask=mask))
            tensor([ True, False])
        """
        for key in self._MASK_KEYS:
            mask = getattr(struct, key, None)
            if isinstance(mask, torch.Tensor):
                return mask
        return None

    @staticmethod
    def _sortedTensorKeys(struct: BaseData) -> List[str]:
        """The keys of ``struct`` holding tensors, in alphabetical order."""
        if isinstance(struct, Data):
            return sorted(k for k, v in struct._store._mapping.items()
                          if isinstance(v, torch.Tensor))
        return sorted(k for k in struct.keys()
                      if isinstance(struct[k], torch.Tensor))

    @functools.singledispatchmethod
    def yieldTensors(self, struct: Any) -> Iterator[torch.Tensor]:
        """Yields the tensors of a ``Data`` or ``HeteroData`` (or a batch of
        them) in the order above.

        Raises:
            ValueError: ``struct`` is of another type.
        """
        raise ValueError(f"Unsupported data type: {type(struct)}")

    @yieldTensors.register
    def _(self, struct: Data) -> Iterator[torch.Tensor]:
        # A Data object has one store: its mapping is what ``struct[key]``
        # reads, without the per-key lookups.
        mapping = struct._store._mapping
        for key in self._sortedTensorKeys(struct):
            yield mapping[key]

    @yieldTensors.register
    def _(self, struct: HeteroData) -> Iterator[torch.Tensor]:
        for store in _hetero_stores(struct):
            for value in store.values():
                if isinstance(value, torch.Tensor):
                    yield value

    def tensorNames(self, struct: Any) -> Optional[List[str]]:
        """The attribute name of each tensor :meth:`yieldTensors` yields
        (``"x"``; ``"paper.x"`` or ``"('paper', 'cites', 'paper').
        edge_index"`` in a ``HeteroData``), so that a model called with a
        batch of other attributes than at compilation names them.

        Example::

            >>> from torch_geometric.data import Data
            >>> PyGArgsParser().tensorNames(Data(x=torch.ones(2, 1),
            ...                                  y=torch.ones(1), name="g"))
            ['x', 'y']
        """
        if isinstance(struct, Data):
            return self._sortedTensorKeys(struct)
        if isinstance(struct, HeteroData):
            return [key if store._key is None else f"{store._key}.{key}"
                    for store in _hetero_stores(struct)
                    for key, value in store.items()
                    if isinstance(value, torch.Tensor)]
        return None

    def reconstruct(self, original_structure: Any,
                    tensor_iterator: Iterator[torch.Tensor]) -> Any:
        """An object like ``original_structure`` (``Data``, ``HeteroData``
        or a batch of them) holding the next tensors of ``tensor_iterator``,
        taken in :meth:`yieldTensors` order.

        Raises:
            ValueError: ``original_structure`` is of another type.
        """
        rebuilt = self._rebuild(original_structure, tensor_iterator)
        # Inside a trace the norms learn the batch's masks from it.
        record_batch(rebuilt)
        return rebuilt

    def _rebuild(self, original_structure: Any,
                 tensor_iterator: Iterator[torch.Tensor]) -> BaseData:
        if isinstance(original_structure, Data):
            kwargs = {key: next(tensor_iterator)
                      for key in self._sortedTensorKeys(original_structure)}
            if type(original_structure) is DataBatch:
                batch = _data_batch(kwargs)
                _setup_num_fields(batch, original_structure)
                return batch
            return Data(**kwargs)
        if isinstance(original_structure, HeteroData):
            mapping = _rebuild_hetero_mapping(original_structure,
                                              tensor_iterator)
            if type(original_structure) is HeteroDataBatch:
                batch = Batch(mapping, _base_cls=HeteroData)
                _setup_num_fields(batch, original_structure)
                return batch
            return HeteroData(mapping)
        raise ValueError(
            f"Unsupported data type: {type(original_structure)}")


#: ``Data.__init__``'s named arguments, stored before its ``**kwargs``.
_DATA_INIT_KEYS = ("x", "edge_index", "edge_attr", "y", "pos", "time")


def _data_batch(tensors: Dict[str, torch.Tensor]) -> DataBatch:
    """What ``Batch(**tensors, _base_cls=Data)`` builds: a ``DataBatch``
    whose store maps the keys to the tensors in ``Data.__init__``'s order.
    Built without the metaclass (which defines a class and inspects a
    signature on every call) and without ``Data.__setattr__``: for a
    fresh store and tensor values its property and storage setters only
    end in that mapping, and they cost more than the rest of a combined
    batch's bookkeeping."""
    batch = type.__call__(DataBatch)
    mapping = batch._store._mapping
    for key in _DATA_INIT_KEYS:
        if key in tensors:
            mapping[key] = tensors[key]
    for key, value in tensors.items():
        if key not in mapping:
            mapping[key] = value
    return batch


def _hetero_stores(data: HeteroData) -> list:
    return [data._global_store, *data.node_stores, *data.edge_stores]


def _rebuild_hetero_mapping(original: HeteroData,
                            tensors: Iterator[torch.Tensor]) -> Dict:
    def rebuild(store) -> Dict[str, Any]:
        return {k: next(tensors) if isinstance(v, torch.Tensor) else v
                for k, v in store.items()}

    mapping: Dict[Any, Any] = rebuild(original._global_store)
    for store in [*original.node_stores, *original.edge_stores]:
        mapping[store._key] = rebuild(store)
    return mapping


def _setup_num_fields(batch: Batch, original: Batch) -> None:
    """Makes a rebuilt (or combined) batch report the counts of ``original``
    (one mini-batch), not those of its possibly concatenated tensors."""
    if hasattr(original, "_num_graphs"):
        batch._num_graphs = original._num_graphs
    num_nodes, num_edges = original.num_nodes, original.num_edges
    batch["num_nodes"] = num_nodes
    batch["num_edges"] = num_edges
    if isinstance(batch, HeteroData):
        _patch_hetero_batch_counts()


@call_once
def _patch_hetero_batch_counts() -> None:
    # ``HeteroData.num_nodes`` sums over node stores; a combined batch must
    # report the counts stored on its global store instead. Batches without
    # them (every batch PyG builds) keep the normal computation.
    cls = HeteroDataBatch
    for name in ("num_nodes", "num_edges"):
        base = getattr(HeteroData, name)

        def getter(self, _name=name, _base=base):
            store = self._global_store
            if _name in store:
                return store[_name]
            return _base.fget(self)

        setattr(cls, name, property(getter, base.fset))


@call_once
def registerCustomArgParsers() -> None:
    """Registers :class:`PyGArgsParser` with PopTorch for every PyG data type
    (runs once; later calls do nothing)."""
    parser = PyGArgsParser()
    for data_type in (BaseData, DataBatch, HeteroDataBatch):
        poptorch.registerCustomArgParser(data_type, parser)


registerCustomArgParsers()
