"""What padding graphs a fixed-size batch gets, and how to build them.

A :class:`PaddingPlan` is decided once per batch from the real graphs and the
fixed sizes: how the padding nodes and edges are shared among the padding
graphs, and, for every attribute, whether it is node-, edge- or graph-level
and which value pads it. Both collation paths follow the same plan: the
reference path materialises padding graphs (:func:`make_padding_graphs`) and
hands everything to ``Batch.from_data_list``; the fast path writes the same
values straight into the batch tensors.

Padding is inert:

* padding graphs come after the real graphs, so real elements come first;
* padding nodes belong to padding graphs only;
* padding edges are self-loops on the first node of their padding graph (of
  the source and destination types when hetero); they are only given to
  padding graphs that have a node to host them, never an index past the last
  node;
* attributes that PyG increments by node offsets (``"index"`` in the name)
  are padded with 0, i.e. they point at their padding graph's first node;
  a graph-level one of a padding graph without nodes points at the batch's
  last node (:func:`keep_padding_indices_in_range`), never past it.

Example::

    >>> split_evenly(5, 3)
    [2, 2, 1]
    >>> split_hosted(5, num_parts=3, num_hosts=2)
    [3, 2, 0]
"""
import dataclasses
import enum
from typing import Any, Dict, Hashable, List, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.data import BaseData
from torch_geometric.transforms.pad import Padding

from .values import check_finite

# Node attributes PyG's ``Pad`` fills with ``mask_pad_value`` (False).
_MASK_KEYS = ("train_mask", "val_mask", "test_mask")


class Level(enum.Enum):
    """How an attribute is padded."""
    NODE = "node"    # one entry per node: node-share entries per pad graph
    EDGE = "edge"    # one entry per edge: edge-share entries per pad graph
    GRAPH = "graph"  # a tensor per graph: a copy of the first graph's shape
    OTHER = "other"  # a non-tensor per graph: a default or the first's value


@dataclasses.dataclass
class AttrSpec:
    """How one attribute of one store is padded."""
    key: str
    level: Level
    #: The first real graph's value: dtype and trailing shape of padding.
    template: Any
    #: Scalar fill for tensors, the value itself for ``Level.OTHER``.
    fill: Any
    #: The concatenation dim (None for 0-dim tensors and non-tensors).
    cat_dim: Optional[int] = None
    #: True when PyG adds node offsets to it while batching.
    incremented: bool = False


@dataclasses.dataclass
class PaddingPlan:
    """Padding of one batch. Store keys are ``None`` for ``Data`` (its single
    store), node/edge types for hetero stores and ``"_global"`` for the
    hetero global store; share lists have one entry per padding graph."""
    num_pad_graphs: int
    hetero: bool
    specs: Dict[Hashable, List[AttrSpec]]
    node_shares: Dict[Hashable, List[int]]
    edge_shares: Dict[Hashable, List[int]]


GLOBAL = "_global"


def split_evenly(amount: int, parts: int) -> List[int]:
    """``amount`` split into ``parts`` near-equal shares, larger ones
    first."""
    if parts == 0:
        return []
    q, r = divmod(amount, parts)
    return [q + 1] * r + [q] * (parts - r)


def split_hosted(amount: int, num_parts: int, num_hosts: int) -> List[int]:
    """``amount`` split evenly over the first ``num_hosts`` of ``num_parts``
    shares; the others get 0."""
    return split_evenly(amount, num_hosts) + [0] * (num_parts - num_hosts)


def is_incremented(key: str) -> bool:
    """True for attributes PyG offsets by node counts (``Data.__inc__``)."""
    return "index" in key or key == "face"


def resolve_fill(pad: Union[float, Padding], key: str,
                 store_type: Optional[Hashable] = None) -> Any:
    """The scalar padding value of ``key`` (PyG ``Padding`` objects are
    resolved by attribute name and store type); a NaN or an infinity that
    a ``Padding`` object computes is refused (``_padding.values``)."""
    if isinstance(pad, Padding):
        value = pad.get_value(store_type, key)
        check_finite(f"the padding value of {key!r} ({pad!r})", value)
        return value
    return pad


def node_fill(opts: Any, key: str, store_type: Optional[Hashable]) -> Any:
    if is_incremented(key):
        return 0
    if key in _MASK_KEYS:
        return False
    return resolve_fill(opts.node_pad_value, key, store_type)


def edge_fill(opts: Any, key: str, store_type: Optional[Hashable]) -> Any:
    if is_incremented(key):
        return 0
    return resolve_fill(opts.edge_pad_value, key, store_type)


def graph_spec(opts: Any, key: str, value: Any, cat_dim: Optional[int],
               use_defaults: bool) -> AttrSpec:
    """Spec of a graph-level attribute (tensor or not)."""
    if isinstance(value, Tensor):
        fill = 0 if is_incremented(key) else opts.graph_pad_value
        return AttrSpec(key, Level.GRAPH, value, fill,
                        None if value.dim() == 0 else cat_dim,
                        is_incremented(key))
    fill = value
    if use_defaults and key in opts.pad_graph_defaults:
        fill = opts.pad_graph_defaults[key]
        check_finite(f"pad_graph_defaults[{key!r}]", fill)
    return AttrSpec(key, Level.OTHER, value, fill)


def share_sizes(plan: PaddingPlan, store_key: Hashable,
                spec: AttrSpec) -> List[int]:
    """Size of ``spec`` along its concatenation dim in each padding graph."""
    k = plan.num_pad_graphs
    if spec.level is Level.NODE:
        return plan.node_shares[store_key]
    if spec.level is Level.EDGE:
        return plan.edge_shares[store_key]
    if spec.cat_dim is None:
        return [1] * k
    return [spec.template.shape[spec.cat_dim]] * k


def _padding_value(spec: AttrSpec, size: int) -> Any:
    if spec.level is Level.OTHER:
        return spec.fill
    if spec.level is Level.GRAPH:
        return spec.template.new_full(spec.template.shape, spec.fill)
    shape = list(spec.template.shape)
    shape[spec.cat_dim] = size
    return torch.full(shape, spec.fill, dtype=spec.template.dtype,
                      device=spec.template.device)


def _store_values(plan: PaddingPlan, store_key: Hashable,
                  j: int) -> Dict[str, Any]:
    values = {}
    for spec in plan.specs[store_key]:
        sizes = share_sizes(plan, store_key, spec)
        values[spec.key] = _padding_value(spec, sizes[j])
    return values


def make_padding_graphs(plan: PaddingPlan) -> List[BaseData]:
    """The padding graphs of ``plan`` as PyG data objects."""
    graphs: List[BaseData] = []
    for j in range(plan.num_pad_graphs):
        if not plan.hetero:
            data = Data(**_store_values(plan, None, j))
            data.num_nodes = plan.node_shares[None][j]
        else:
            data = HeteroData()
            for key, value in _store_values(plan, GLOBAL, j).items():
                data[key] = value
            for store_key in plan.specs:
                if store_key == GLOBAL:
                    continue
                store = data[store_key]
                store.update(_store_values(plan, store_key, j))
                if store_key in plan.node_shares:
                    store.num_nodes = plan.node_shares[store_key][j]
        graphs.append(data)
    return graphs


def keep_padding_indices_in_range(batch: Any, plan: PaddingPlan,
                                  num_nodes: int) -> None:
    """Points the graph-level index attributes (``root_index``...) of
    ``batch``'s padding graphs at its last node where PyG's offsets took
    them past it: a padding graph without nodes has no first node, and its
    offset is the node count of the whole batch. (``HeteroData`` offsets
    only edge indices, which padding edges already keep in range.)"""
    if plan.hetero or plan.num_pad_graphs == 0 or num_nodes == 0:
        return
    for spec in plan.specs[None]:
        if spec.level is not Level.GRAPH or not spec.incremented \
                or spec.key not in batch:
            continue
        value = batch[spec.key]
        if spec.cat_dim is None:
            dim, rows = 0, plan.num_pad_graphs
        else:
            dim = spec.cat_dim
            rows = spec.template.shape[dim] * plan.num_pad_graphs
        value.narrow(dim, value.shape[dim] - rows, rows).clamp_(
            max=num_nodes - 1)
