"""Which tensors a traced step allocates, reads and keeps for the backward.

:func:`trace_values` runs the captured graph once on fake tensors (no data,
no compute) under autograd, exactly as the executor runs it for training.
Each tensor is identified by its storage, so views and in-place results
count once; autograd's ``saved_tensors_hooks`` report every tensor the
backward will need. A dispatch mode also sees the tensors that a composite
op (``cross_entropy``, ``layer_norm``, ...) allocates internally: those it
does not return or save are its scratch memory, live while it runs. The
memory model turns this into live ranges (:mod:`.memory`).

Example::

    >>> gm = torch.fx.symbolic_trace(lambda x, w: (x @ w).relu().sum())
    >>> values = trace_values(gm, [(2, 3), (3, 4)], trainable=[False, True])
    >>> sorted(values.storages[k].nbytes for k in values.saved)
    [24, 32]
"""
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Set

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from .._logging import logger
from ._costs import tensors_in


@dataclasses.dataclass
class StorageInfo:
    """One allocation: its size and the node that made it (None for the
    graph's inputs: parameters, buffers and the micro-batch)."""
    nbytes: int
    node: Optional[torch.fx.Node]


@dataclasses.dataclass
class GraphValues:
    """The allocations of one traced step.

    Attributes:
        nodes: the computing nodes in execution order.
        storages: storage key -> :class:`StorageInfo` (with the node
            that allocated it, also for a composite op's internals).
        touches: node -> storages it reads, writes or returns.
        placeholders: placeholder node -> its storage key.
        saved: storage key -> the first node whose backward needs it.
        outputs: storages the step returns.
        grad_keys: storages of values that get a gradient in the backward.
        exact: False when the fake run failed and every value produced was
            assumed saved (a conservative fallback).
    """
    nodes: List[torch.fx.Node]
    storages: Dict[int, StorageInfo]
    touches: Dict[torch.fx.Node, Set[int]]
    placeholders: Dict[torch.fx.Node, int]
    saved: Dict[int, torch.fx.Node]
    outputs: Set[int]
    grad_keys: Set[int] = dataclasses.field(default_factory=set)
    exact: bool = True

    def produced(self, node: torch.fx.Node) -> List[int]:
        """The storages ``node`` allocated."""
        return [k for k in self.touches.get(node, ())
                if self.storages[k].node is node]


def _key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


class _Recorder(torch.fx.Interpreter):
    """Runs the graph, recording the storages each node touches."""

    def __init__(self, gm: torch.fx.GraphModule, values: GraphValues):
        super().__init__(gm)
        self.values = values
        self.current: Optional[torch.fx.Node] = None
        # Fake tensors are kept alive so that no storage key is reused.
        self._keep: List[Any] = []

    def note(self, tensor: torch.Tensor) -> int:
        key = _key(tensor)
        if key not in self.values.storages:
            self._keep.append(tensor)
            self.values.storages[key] = StorageInfo(
                tensor.untyped_storage().nbytes(), self.current)
        return key

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op in ("call_function", "call_method", "call_module"):
            self.current = n
            self.values.nodes.append(n)
        result = super().run_node(n)
        if n.op == "output":
            self.values.outputs = {self.note(t) for t in tensors_in(result)}
            return result
        produced = tensors_in(result)
        keys = {self.note(t) for t in produced}
        self.values.grad_keys |= {_key(t) for t in produced
                                  if t.requires_grad}
        if n.op == "placeholder":
            self.values.placeholders[n] = next(iter(keys))
        else:
            keys |= {self.note(t) for t in tensors_in(
                [self.env[i] for i in n.all_input_nodes if i in self.env])}
            self.values.touches[n] = keys
        return result

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = self.note(tensor)
        self.values.saved.setdefault(key, self.current)
        if tensor.requires_grad:
            self.values.grad_keys.add(key)
        return tensor


class _Allocations(TorchDispatchMode):
    """Notes every tensor an ATen op creates, also inside composite ops."""

    def __init__(self, recorder: _Recorder):
        super().__init__()
        self._recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self._recorder.current is not None:
            for tensor in tensors_in(out):
                self._recorder.note(tensor)
        return out


def _fake_like(spec: Any) -> torch.Tensor:
    """A fake tensor (the fake mode is active) shaped like ``spec``: a
    tensor, whose device it keeps (factories in the graph create tensors on
    the simulator's host device), or a shape for float32."""
    if isinstance(spec, torch.Tensor):
        return torch.empty(tuple(spec.shape), dtype=spec.dtype,
                           device=spec.device)
    return torch.empty(tuple(spec), dtype=torch.float32)


def trace_values(gm: torch.fx.GraphModule, inputs: Sequence[Any],
                 trainable: Sequence[bool]) -> GraphValues:
    """Runs ``gm`` on fake tensors shaped like ``inputs`` (tensors, or
    shapes for float32) and records its allocations.

    Args:
        gm: the traced step.
        inputs: one entry per placeholder: a tensor (only its shape and
            dtype are used) or a shape.
        trainable: per placeholder, whether it is a parameter that gets a
            gradient (autograd then saves what its backward needs).
    """
    values = GraphValues([], {}, {}, {}, {}, set())
    recorder = _Recorder(gm, values)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        with mode, torch.enable_grad(), \
                torch.autograd.graph.saved_tensors_hooks(recorder.pack,
                                                         lambda t: t):
            fakes = []
            for spec, grad in zip(inputs, trainable):
                fake = _fake_like(spec)
                fakes.append(fake.requires_grad_(
                    grad and fake.dtype.is_floating_point))
            with _Allocations(recorder):
                recorder.run(*fakes)
    except Exception as error:  # noqa: BLE001  any op without a fake kernel
        logger.debug("Device model: fake run failed (%s); assuming every "
                     "value is kept for the backward", error)
        return _from_metadata(gm, any(trainable))
    return values


def _meta_bytes(node: torch.fx.Node) -> int:
    return sum(t.numel() * t.element_size()
               for t in tensors_in(node.meta.get("val")))


def _from_metadata(gm: torch.fx.GraphModule, training: bool) -> GraphValues:
    """A conservative reading from the tracer's metadata: every node
    allocates its outputs and, when training, keeps them."""
    values = GraphValues([], {}, {}, {}, {}, set(), exact=False)
    keys: Dict[torch.fx.Node, int] = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            values.outputs = {keys[n] for n in node.all_input_nodes
                              if n in keys}
            continue
        key = keys[node] = len(keys)
        if node.op == "placeholder":
            values.storages[key] = StorageInfo(_meta_bytes(node), None)
            values.placeholders[node] = key
            continue
        values.storages[key] = StorageInfo(_meta_bytes(node), node)
        values.nodes.append(node)
        values.touches[node] = {key} | {keys[i] for i in node.all_input_nodes
                                        if i in keys}
        if training:
            values.saved[key] = node
            values.grad_keys.add(key)
    return values
