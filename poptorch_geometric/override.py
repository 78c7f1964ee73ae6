"""While PopTorch traces a model, PyG's data-dependent functions and
layers are replaced by the fixed-shape versions of
:mod:`poptorch_geometric.ops`, and restored afterwards (also when tracing
fails). Eager calls of the same model outside tracing use PyG unchanged.

Importing :mod:`poptorch_geometric` registers
:class:`_TorchGeometricOpsSubstitutionManager` with the core, which enters
it around every capture. While it is active:

- PyG's ``disable_dynamic_shapes`` experimental mode is on, so for example
  ``Aggregation.__call__`` requires ``dim_size``;
- the layers of :attr:`_TorchGeometricOpsSubstitutionManager.subsitutions`
  run their fixed-shape ``forward``; norms (torch's BatchNorm, PyG's
  InstanceNorm, LayerNorm, GraphNorm, ...) take their statistics over the
  real rows of a fixed-size batch (:mod:`poptorch_geometric._padding_masks`);
  the node-selection poolings (TopK, SAG, ASA, Edge) keep a fixed number
  of node slots, unused ones marked ``-1`` (``ops/topk_pool.py``);
- every module binding one of the functions of
  :func:`function_substitutions` (``knn_graph``, ``radius_graph``,
  ``remove_self_loops``, ``add_remaining_self_loops``,
  ``to_dense_batch``, ``filter_adj``, ``scatter``, ``softmax``,
  ``degree``, ..., and the
  ``torch_scatter`` / ``torch_cluster`` functions when those optional
  packages are loaded) sees the fixed-shape version under the same name;
- PyG's optional fast kernels (``torch_scatter``, pyg-lib) are switched off,
  so PyG takes its plain-PyTorch paths, which trace;
- empty edge slots (index -1, from the neighbour searches, from
  ``remove_self_loops`` and from pooling) are inert in message passing's
  gather, in scatters, softmax and degrees: those take the slots' sink for
  an index computed from such an edge index
  (:mod:`poptorch_geometric.ops.empty_slots` tracks it while the model is
  traced).

A PyG function that reads a size from tensor values because the caller
did not give it (``scatter`` without ``dim_size``, ``global_add_pool``
without ``size``, ...) stays as it is: the core stops that read with an
error naming the line that made the call.

Example::

    >>> import torch_geometric.utils as U
    >>> original = U.to_dense_batch
    >>> with _TorchGeometricOpsSubstitutionManager():
    ...     U.to_dense_batch(torch.ones(2, 1), torch.tensor([0, 1]))
    Traceback (most recent call last):
    ...
    ValueError: Dynamic shapes disabled. Argument 'batch_size' needs to be set
    >>> U.to_dense_batch is original
    True
"""
import functools
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch_geometric
import torch_geometric.backend
import torch_geometric.experimental
import torch_geometric.nn
import torch_geometric.typing
import torch_geometric.utils

from . import _padding_masks, ops
from .ops import torch_scatter as scatter_ops

__all__ = ["_TorchGeometricOpsSubstitutionManager", "function_substitutions"]

_DYNAMIC = "disable_dynamic_shapes"
#: ``torch_geometric.typing`` flags of optional kernels that do not trace;
#: PyG has a plain-PyTorch path for each.
_KERNEL_FLAGS = ("WITH_TORCH_SCATTER", "WITH_SEGMM", "WITH_SOFTMAX",
                 "WITH_INDEX_SORT", "WITH_GMM", "WITH_SAMPLED_OP")
#: Modules whose bindings are never rewritten: they are already fixed-shape.
_OWN_PREFIXES = ("poptorch_geometric", "poptorch_core", "poptorch")

_NEIGHBOUR_OPS = ("knn", "knn_graph", "radius", "radius_graph", "nearest")
_UTILS_OPS = ("remove_self_loops", "add_remaining_self_loops",
              "to_dense_batch")
#: Node-selection poolings: fixed numbers of node slots (ops/topk_pool.py).
_POOLINGS = ("TopKPooling", "SAGPooling", "ASAPooling")
#: PyG functions that read edge indices, made to ignore empty (-1) slots.
_EMPTY_SLOT_OPS = ("scatter", "softmax", "degree")


def _class_substitutions() -> Dict[Any, Dict[str, Callable]]:
    """PopTorch Geometric's table of substituted layers and module
    functions (entries missing on this PyG are left out), with this
    package's further fixed-shape layers."""
    nn = torch_geometric.nn
    table: Dict[Any, Dict[str, Callable]] = {
        nn.MessagePassing: {
            "_index_select": ops.empty_slots.message_passing_index_select},
        nn.aggr.base.Aggregation: {
            "assert_sorted_index": ops.Aggregation.assert_sorted_index},
        nn.aggr.QuantileAggregation: {
            "forward": ops.QuantileAggregation.forward},
        nn.ClusterGCNConv: {"forward": ops.ClusterGCNConv.forward},
        nn.ChebConv: {"__norm__": ops.ChebConv.__norm__},
        nn.dense.HeteroLinear: {"forward": ops.HeteroLinear.forward},
        nn.InstanceNorm: {"forward": ops.InstanceNorm.forward},
        nn.conv.MFConv: {"forward": ops.MFConv.forward},
        nn.conv.RGCNConv: {"forward": ops.RGCNConv.forward},
        nn.conv.FiLMConv: {"forward": ops.FiLMConv.forward},
        nn.conv.GPSConv: {"forward": ops.GPSConv.forward},
        nn.conv.MeshCNNConv: {"message": ops.MeshCNNConv.message},
        **{getattr(nn, name): {"forward": getattr(ops, name).forward}
           for name in ("DynamicEdgeConv", "GravNetConv", "XConv")},
        nn.conv.ppf_conv: {"get_angle": ops.point_pair.get_angle},
        nn: {"knn_interpolate": ops.knn_interpolate},
        nn.unpool: {"knn_interpolate": ops.knn_interpolate},
        nn.pool: {name: getattr(ops, name) for name in _NEIGHBOUR_OPS},
        **{getattr(nn.pool, name): {"forward": getattr(ops, name).forward}
           for name in _POOLINGS},
        nn.pool.EdgePooling: {"forward": ops.EdgePooling.forward,
                              "unpool": ops.EdgePooling.unpool},
    }
    table.update(_padding_norm_substitutions())
    # PyG 2.8 calls torch.ops.pyg.knn directly in these modules; older
    # versions bound module-level functions, replaced when present.
    for module, name in (("edge_conv", "knn"), ("gravnet_conv", "knn"),
                         ("x_conv", "knn_graph")):
        target = getattr(nn.conv, module, None)
        if target is not None and hasattr(target, name):
            table[target] = {name: getattr(ops, name)}
    return table


def _padding_norm_substitutions() -> Dict[Any, Dict[str, Callable]]:
    """Norms whose statistics leave the padding of a fixed-size batch out
    (``ops.batch_norm``, ``ops.graph_norms``; InstanceNorm is above)."""
    nn = torch_geometric.nn
    return {
        torch.nn.modules.batchnorm._BatchNorm: {
            "forward": ops.BatchNorm1d.forward},
        **{getattr(nn, name): {"forward": getattr(ops, name).forward}
           for name in ("LayerNorm", "GraphNorm", "PairNorm",
                        "MeanSubtractionNorm", "GraphSizeNorm")}}


def function_substitutions() -> List[Tuple[Callable, Callable]]:
    """``(original, replacement)`` pairs: every loaded module that binds an
    original under its own name gets the replacement while a model is
    traced. ``torch_scatter`` and ``torch_cluster`` pairs are included
    when those packages are loaded."""
    pairs = [(getattr(torch_geometric.utils, name), getattr(ops, name))
             for name in _UTILS_OPS]
    pairs += [(getattr(torch_geometric.utils, name),
               getattr(ops.empty_slots, f"traced_{name}"))
              for name in _EMPTY_SLOT_OPS]
    pairs += [(getattr(torch_geometric.nn.pool, name), getattr(ops, name))
              for name in _NEIGHBOUR_OPS]
    pairs.append((torch_geometric.nn.unpool.knn_interpolate,
                  ops.knn_interpolate))
    pairs.append((torch_geometric.nn.pool.connect.filter_edges.filter_adj,
                  ops.filter_adj))
    torch_scatter = sys.modules.get("torch_scatter")
    if torch_scatter is not None:
        pairs += [(getattr(torch_scatter, name), getattr(scatter_ops, name))
                  for name in scatter_ops.__all__
                  if hasattr(torch_scatter, name)]
    torch_cluster = sys.modules.get("torch_cluster")
    if torch_cluster is not None:
        import poptorch_core
        pairs += [(getattr(torch_cluster, name), getattr(ops, name))
                  for name in _NEIGHBOUR_OPS[:4]
                  if hasattr(torch_cluster, name)]
        if hasattr(torch_cluster, "nearest"):
            pairs.append((torch_cluster.nearest, poptorch_core.nearest))
    return pairs


def _wrap(original: Callable, replacement: Callable) -> Callable:
    @functools.wraps(original)
    def substitute(*args: Any, **kwargs: Any) -> Any:
        return replacement(*args, **kwargs)
    substitute.__poptorch_substitute__ = True
    return substitute


class _TorchGeometricOpsSubstitutionManager:
    """Swaps PyG's data-dependent ops for fixed-shape ones.
    ``replace()`` / ``restore()``, or use it as a context manager.
    ``restore()`` puts back exactly what ``replace()`` found, including the
    previous ``disable_dynamic_shapes`` setting."""

    #: (sic, PopTorch's name) target module or class -> {attribute: new}.
    subsitutions: Dict[Any, Dict[str, Callable]] = _class_substitutions()

    def __init__(self) -> None:
        #: target -> {attribute: original}, filled by :meth:`replace`.
        self.overrides: Dict[Any, Dict[str, Any]] = {}
        self._saved: Dict[str, Any] = {}
        self._tracking: Optional[ops.empty_slots.EmptySlotTracking] = None

    def _set(self, target: Any, name: str, value: Any) -> None:
        self.overrides.setdefault(target, {}).setdefault(
            name, getattr(target, name))
        setattr(target, name, value)

    def replace(self) -> None:
        """Installs the substitutions."""
        _padding_masks.begin_trace()
        # Taken first: the class table below replaces some of the originals.
        pairs = function_substitutions()
        flags = torch_geometric.experimental.__experimental_flag__
        self._saved = {
            "dynamic": flags[_DYNAMIC],
            "segment_matmul": torch_geometric.backend.use_segment_matmul,
            **{flag: getattr(torch_geometric.typing, flag)
               for flag in _KERNEL_FLAGS}}
        torch_geometric.experimental.set_experimental_mode(True, _DYNAMIC)
        torch_geometric.backend.use_segment_matmul = False
        for flag in _KERNEL_FLAGS:
            setattr(torch_geometric.typing, flag, False)
        for target, attributes in self.subsitutions.items():
            for name, replacement in attributes.items():
                if hasattr(target, name):
                    self._set(target, name,
                              _wrap(getattr(target, name), replacement))
        self._replace_functions(pairs)
        self._tracking = ops.empty_slots.EmptySlotTracking()
        self._tracking.__enter__()

    def _replace_functions(self, pairs: List[Tuple[Callable, Callable]]
                           ) -> None:
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            module_name = getattr(module, "__name__", None)
            if namespace is None or not isinstance(module_name, str) or \
                    module_name.split(".")[0] in _OWN_PREFIXES:
                continue
            for original, replacement in pairs:
                name = original.__name__
                if namespace.get(name) is original:
                    self._set(module, name, _wrap(original, replacement))

    def restore(self) -> None:
        """Puts back everything :meth:`replace` changed."""
        if self._tracking is not None:
            self._tracking.__exit__(None, None, None)
            self._tracking = None
        _padding_masks.end_trace()
        for target, attributes in self.overrides.items():
            for name, original in attributes.items():
                setattr(target, name, original)
        self.overrides = {}
        if self._saved:
            flags = torch_geometric.experimental.__experimental_flag__
            flags[_DYNAMIC] = self._saved["dynamic"]
            torch_geometric.backend.use_segment_matmul = \
                self._saved["segment_matmul"]
            for flag in _KERNEL_FLAGS:
                setattr(torch_geometric.typing, flag, self._saved[flag])
            self._saved = {}

    def __enter__(self) -> "_TorchGeometricOpsSubstitutionManager":
        self.replace()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()
