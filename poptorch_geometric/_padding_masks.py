"""Which rows are real, for the norms of a model PopTorch traces.

A fixed-size batch has real graphs first, then padding graphs, and its
``nodes_mask`` / ``edges_mask`` / ``graphs_mask`` say which slots are real.
Norms that take statistics over rows (BatchNorm, LayerNorm in graph mode,
InstanceNorm, GraphNorm, ...) must take them over the real rows only, or
padding changes every real output. This module tells them, while a model is
traced, which mask applies:

- the PyG argument parser records the masks of each batch that the traced
  forward receives (``model(batch)``, ``with_loss(model, ...)(batch)``):
  they are traced values, so every later call feeds its own batch's masks;
- :func:`real_rows` picks the mask by the row count of the norm's input
  (node, edge or graph slots), and raises :class:`poptorch.Error`, naming
  the layer and the fix, when the count is ambiguous or matches no mask;
- when the model gets the batch's tensors instead of the batch
  (``model(batch.x, batch.edge_index, batch.batch)``) the masks are out of
  reach: the collaters and loaders register the tensors of the batches they
  make (weakly), and a norm that needs statistics fails at trace time when
  an input of the call is one of them. Inputs of any other origin are
  plain data: the norm runs as in PyTorch.

Invariant: outside a trace :func:`real_rows` returns None, so eager calls
and plain PopTorch models are unchanged.

Example::

    >>> import torch
    >>> layer = torch.nn.BatchNorm1d(2)
    >>> real_rows(layer, 4) is None      # not tracing: all rows count
    True
    >>> all_rows_real(layer) is layer
    True
"""
import contextlib
import dataclasses
import weakref
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.data.data import BaseData

import poptorch_core as poptorch
from poptorch_core import plugins

__all__ = ["all_rows_real", "begin_trace", "end_trace", "graph_slots",
           "node_mask", "record_pooled", "real_rows", "rows_within",
           "record_batch", "register_padded",
           "is_padded_batch", "is_padded_tensor", "registered_batches"]

_ALL_ROWS_REAL = "_poptorch_geometric_all_rows_real"
_MASK_KEYS = ("nodes_mask", "edges_mask")


@dataclasses.dataclass
class _Trace:
    """What one trace knows: the masks of the batches its forward got,
    as (description, mask) pairs, and their batch vectors' graph slots."""
    masks: List[Tuple[str, Tensor]] = dataclasses.field(default_factory=list)
    batch_vectors: Dict[int, Tuple[Tensor, int]] = dataclasses.field(
        default_factory=dict)
    #: Batch vectors that pooling layers made, and their graph slots.
    pooled_vectors: Dict[int, Tuple[Tensor, int]] = dataclasses.field(
        default_factory=dict)
    root: Optional[torch.nn.Module] = None
    hook: Any = None
    padded_inputs: Optional[bool] = None
    #: A batch without masks was received.
    unmasked_batch: bool = False
    #: Masks of rows that a layer lays out itself (:func:`rows_within`),
    #: ahead of the batch's.
    own: List[Tensor] = dataclasses.field(default_factory=list)


_traces: List[_Trace] = []
#: id -> tensor of every tensor of a fixed-size batch made in this process.
_padded: "weakref.WeakValueDictionary[int, Tensor]" = \
    weakref.WeakValueDictionary()


def all_rows_real(module: torch.nn.Module) -> torch.nn.Module:
    """Marks ``module`` and its submodules as seeing no padding rows: their
    norms take statistics over every row, as in PyTorch, even in a model
    that receives a fixed-size batch. For norms over rows that are not the
    batch's nodes, edges or graphs (a side input, a dense reshape), which
    otherwise stop the trace with an error. Returns ``module``.

    Example::

        >>> head = all_rows_real(torch.nn.BatchNorm1d(8))
    """
    for sub in module.modules():
        setattr(sub, _ALL_ROWS_REAL, True)
    return module


# --- The trace's masks -------------------------------------------------------

def begin_trace() -> None:
    """Starts a trace with no batch recorded (the substitution manager
    calls it on entry)."""
    trace = _Trace()

    def remember_root(module: torch.nn.Module, _args: Any) -> None:
        if trace.root is None:
            trace.root = module
    trace.hook = torch.nn.modules.module.register_module_forward_pre_hook(
        remember_root)
    _traces.append(trace)


def end_trace() -> None:
    """Forgets the innermost trace's batches (on the manager's exit)."""
    if _traces:
        _traces.pop().hook.remove()


def record_batch(batch: BaseData) -> None:
    """Called with every PyG object the parser rebuilds: inside a trace its
    masks become the trace's; outside, a batch with masks is registered as
    padded (async loaders and combined batches are rebuilt this way)."""
    if not (poptorch.isRunningOnIpu() and _traces):
        if _has_masks(batch):
            register_padded(batch)
        return
    trace = _traces[-1]
    trace.unmasked_batch |= not _has_masks(batch)
    graphs_mask = getattr(batch, "graphs_mask", None)
    num_graphs = None
    if isinstance(graphs_mask, Tensor):
        trace.masks.append(("graph slots", graphs_mask))
        num_graphs = graphs_mask.shape[0]
    hetero = isinstance(batch, HeteroData)
    stores = batch.node_stores + batch.edge_stores if hetero else \
        batch.stores
    for store in stores:
        where = f" of {store._key!r}" if hetero else ""
        for key in _MASK_KEYS:
            mask = store.get(key)
            if isinstance(mask, Tensor):
                trace.masks.append((f"{key[:4]} slots{where}", mask))
    for store in batch.node_stores:
        vector = store.get("batch")
        if num_graphs is not None and isinstance(vector, Tensor):
            trace.batch_vectors[id(vector)] = (vector, num_graphs)


def _has_masks(batch: BaseData) -> bool:
    return any(isinstance(store.get(key), Tensor) for store in batch.stores
               for key in ("graphs_mask",) + _MASK_KEYS)


def graph_slots(batch: Optional[Tensor]) -> Optional[int]:
    """The number of graph slots of the traced batch whose batch vector is
    ``batch``; None when ``batch`` is not one (or outside a trace)."""
    if batch is None or not _traces:
        return None
    trace = _traces[-1]
    vector, count = trace.batch_vectors.get(
        id(batch), trace.pooled_vectors.get(id(batch), (None, None)))
    return count if vector is batch else None


def node_mask(batch: Optional[Tensor], rows: int) -> Optional[Tensor]:
    """The traced batch's ``nodes_mask``, for ``rows`` nodes of the batch
    whose batch vector is ``batch`` (None: one graph of the batch's
    nodes); None when these are not the batch's own nodes (a pooling's
    slots), when no single homogeneous batch with ``rows`` nodes was
    received, or outside a trace."""
    if not (poptorch.isRunningOnIpu() and _traces):
        return None
    trace = _traces[-1]
    if batch is not None and trace.batch_vectors.get(
            id(batch), (None, ))[0] is not batch:
        return None
    masks = _unique([(what, mask) for what, mask in trace.masks
                     if what == "node slots" and mask.shape[0] == rows])
    return masks[0][1].to(torch.bool) if len(masks) == 1 else None


def record_pooled(batch: Tensor, num_graphs: Optional[int],
                  used: Tensor) -> None:
    """Inside a trace, records the node slots a pooling layer made: its
    batch vector has ``num_graphs`` graph slots (when known), and ``used``
    says which of its rows are real, for the norms that follow."""
    if not (poptorch.isRunningOnIpu() and _traces):
        return
    trace = _traces[-1]
    if num_graphs is not None:
        trace.pooled_vectors[id(batch)] = (batch, num_graphs)
    trace.masks.append(("pooled node slots", used))


def real_rows(layer: torch.nn.Module, rows: int) -> Optional[Tensor]:
    """The boolean mask of the real rows among ``rows`` for ``layer``, which
    is about to take statistics over them while traced; None when every row
    counts (not tracing, a plain-data call, or :func:`all_rows_real`).

    Raises:
        poptorch.Error: the traced batches' masks do not tell which rows
            are real (several or none of them have ``rows`` entries), or
            the call's inputs are a fixed-size batch's tensors, whose masks
            the model does not receive.
    """
    if not (poptorch.isRunningOnIpu() and _traces) or \
            getattr(layer, _ALL_ROWS_REAL, False):
        return None
    trace = _traces[-1]
    for mask in reversed(trace.own):
        if mask.shape[0] == rows:
            return mask
    if trace.masks:
        matches = _unique([(what, mask) for what, mask in trace.masks
                           if mask.shape[0] == rows])
        if len(matches) == 1:
            return matches[0][1].to(torch.bool)
        raise _rows_error(trace, layer, rows, matches)
    if trace.padded_inputs is None:
        trace.padded_inputs = any(
            is_padded_tensor(t) for t in plugins.traced_call_inputs())
    if trace.padded_inputs:
        raise _unknown_masks_error(trace, layer, rows)
    return None


@contextlib.contextmanager
def rows_within(mask: Optional[Tensor]) -> Iterator[None]:
    """Inside the block, a norm over ``mask.shape[0]`` rows takes ``mask``
    (boolean) as its real rows, ahead of the batch's masks: for a layer
    that lays out rows of its own (XConv: ``K`` neighbour rows per node,
    real when their node is). ``None`` (no trace) changes nothing."""
    if mask is None or not _traces:
        yield
        return
    own = _traces[-1].own
    own.append(mask)
    try:
        yield
    finally:
        own.pop()


def _unknown_masks_error(trace: _Trace, layer: torch.nn.Module,
                         rows: int) -> poptorch.Error:
    given = ("a fixed-size batch without padding masks" if
             trace.unmasked_batch else
             "the tensors of a fixed-size batch rather than the batch")
    problem = (f"{_name(trace, layer)} takes statistics over its {rows} "
               f"rows, and this model was given {given}, so it cannot tell "
               "its padding rows from the real ones and the statistics "
               "would include padding. ")
    if trace.unmasked_batch:
        return poptorch.Error(
            problem + "Make the batches with masks: add_pad_masks=True for "
            "the loaders (their default), add_masks_to_batch=True for a "
            "FixedSizeCollater.")
    return poptorch.Error(
        problem + "Call the model with the batch itself (a forward that "
        "takes the Batch and reads batch.x, batch.edge_index, ...), or "
        "train it through poptorch_geometric.with_loss(model, loss_fn), "
        "which passes the batch. If the rows hold no padding, mark the "
        "layer with poptorch_geometric.all_rows_real(layer).")


def _unique(matches: List[Tuple[str, Tensor]]) -> List[Tuple[str, Tensor]]:
    seen, out = set(), []
    for what, mask in matches:
        if id(mask) not in seen:
            seen.add(id(mask))
            out.append((what, mask))
    return out


def _rows_error(trace: _Trace, layer: torch.nn.Module, rows: int,
                matches: List[Tuple[str, Tensor]]) -> poptorch.Error:
    name = _name(trace, layer)
    if any(what.startswith("pooled") for what, _ in matches):
        return poptorch.Error(
            f"{name} takes statistics over {rows} rows, and a pooling "
            f"layer's node slots number {rows} as well as other slots of "
            "the traced model (EdgePooling and min_score keep a slot per "
            "node; so does a ratio when the layer is not given the batch's "
            "own batch vector): it cannot tell which padding mask applies. "
            "Apply the norm where the row counts differ (before the "
            "pooling, or after a pooling with a ratio given the batch's "
            "batch vector), or, if its rows hold no padding, mark it with "
            "poptorch_geometric.all_rows_real(layer).")
    if matches:
        which = " and ".join(f"{rows} {what}" for what, _ in matches)
        return poptorch.Error(
            f"{name} takes statistics over {rows} rows, and the fixed-size "
            f"batch has {which}: it cannot tell which padding mask "
            "applies. Choose FixedSizeOptions whose num_nodes, num_edges "
            "and num_graphs differ.")
    sizes = ", ".join(sorted({f"{m.shape[0]} {what}"
                              for what, m in trace.masks}))
    return poptorch.Error(
        f"{name} takes statistics over {rows} rows, which match none of "
        f"the fixed-size batch's slots ({sizes}), so its padding rows "
        "cannot be left out. Apply it to rows of nodes, edges or graphs of "
        "the batch, or, if its rows hold no padding, mark the layer with "
        "poptorch_geometric.all_rows_real(layer).")


def _name(trace: _Trace, layer: torch.nn.Module) -> str:
    """``BatchNorm1d `convs.0.nn.norms.0.module``` (its path in the model
    being traced)."""
    kind = type(layer).__name__
    if trace.root is not None:
        for path, module in trace.root.named_modules():
            if module is layer:
                return f"{kind} `{path}`" if path else f"{kind} (the model)"
    return kind


# --- Tensors of fixed-size batches -------------------------------------------

def register_padded(batch: BaseData) -> BaseData:
    """Registers (weakly) every tensor of ``batch``, a fixed-size batch;
    returns ``batch``."""
    for store in batch.stores:
        for value in store.values():
            if isinstance(value, Tensor):
                _padded[id(value)] = value
    return batch


def is_padded_batch(batch: Any) -> bool:
    """Whether ``batch`` holds a registered tensor."""
    return isinstance(batch, BaseData) and any(
        is_padded_tensor(value) for store in batch.stores
        for value in store.values() if isinstance(value, Tensor))


def is_padded_tensor(tensor: Tensor) -> bool:
    """``tensor`` or the tensor it is a view of is registered."""
    while tensor is not None:
        if _padded.get(id(tensor)) is tensor:
            return True
        tensor = tensor._base
    return False


def _registered(batches: Iterable[Any]) -> Iterator[Any]:
    for batch in batches:
        if isinstance(batch, BaseData):
            register_padded(batch)
        yield batch


def registered_batches(loader: torch.utils.data.DataLoader,
                       batches: Iterator[Any]) -> Iterator[Any]:
    """A fixed-size loader's batches, registered as they reach this
    process when they are copies (from worker processes, or pinned): their
    collater registered the originals in the worker. Otherwise
    ``batches`` itself."""
    if loader.num_workers or loader.pin_memory:
        return _registered(batches)
    return batches
