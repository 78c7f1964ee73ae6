"""A :class:`Graph` of an :class:`~poptorch_core.Ir`: a captured ATen-level
``torch.fx.GraphModule`` with named inputs and outputs, plus the host
transfer streams of the main graph.

Example::

    >>> ir = poptorch.Ir()
    >>> g = ir.create_graph(lambda x, y: x @ y, poptorch.TensorSpec((2, 3)),
    ...                     poptorch.TensorSpec((3, 4)))
    >>> [i.name for i in g.inputs]
    ['x', 'y']
    >>> g(torch.ones(2, 3), torch.ones(3, 4)).shape
    torch.Size([2, 4])
"""
import dataclasses
from typing import Any, Optional, Sequence, Tuple, Union

import torch
import torch.fx
from torch.utils._pytree import tree_leaves

from .binding import GraphTensor, TensorSpec
from .dot import graph_module_to_dot
from .fx_meta import node_shape_dtype

# The owning Ir is typed ``Any``: ``ir`` builds graphs, so importing it
# here (even for type checking) would make the two modules a cycle.

__all__ = ["Graph", "HostToDeviceStream", "DeviceToHostStream"]

GraphOutput = Union[None, torch.Tensor, Tuple[torch.Tensor, ...]]


@dataclasses.dataclass(frozen=True)
class _Stream:
    name: str
    shape: Tuple[int, ...]
    dtype: torch.dtype

    @property
    def tensor_id(self) -> str:
        """PopXL's name for the stream's identifier."""
        return self.name

    @property
    def spec(self) -> TensorSpec:
        """Shape and dtype as a :class:`TensorSpec`."""
        return TensorSpec(self.shape, self.dtype)


class HostToDeviceStream(_Stream):
    """A stream carrying one model input from the host to the device."""


class DeviceToHostStream(_Stream):
    """A stream carrying one model output from the device to the host."""


def _empty_graph_module() -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    graph.output(())
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _output_nodes(gm: torch.fx.GraphModule) -> Sequence[torch.fx.Node]:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return [a for a in tree_leaves(output.args[0])
            if isinstance(a, torch.fx.Node)]


def _graph_tensor(node: torch.fx.Node, name: str, kind: str,
                  by_ref: bool) -> GraphTensor:
    known = node_shape_dtype(node)
    if known is None:
        raise ValueError(
            f"Graph node '{node.name}' has no shape or dtype: capture the "
            "graph with make_fx, which records them in node.meta['val'].")
    return GraphTensor(name, known[0], known[1], by_ref, kind)


class Graph:
    """A captured graph: ``graph_module`` plus named inputs and outputs.

    Calling a graph runs it on real tensors, given in the order of
    :attr:`inputs` (as ``popxl.ops.call`` takes them). By-value inputs are
    copied first, so only inputs marked by reference see in-place changes.
    It returns None, one tensor, or a tuple, by the number of outputs.
    """

    def __init__(self, ir: Any, name: str,
                 graph_module: Optional[torch.fx.GraphModule] = None,
                 inputs: Sequence[GraphTensor] = (),
                 num_user_outputs: Optional[int] = None):
        self._ir = ir
        self._name = name
        self._graph_module = graph_module or _empty_graph_module()
        self._inputs = tuple(inputs)
        self._outputs = tuple(
            _graph_tensor(node, node.name, "output", False)
            for node in _output_nodes(self._graph_module))
        self._num_user_outputs = (len(self._outputs) if num_user_outputs is
                                  None else num_user_outputs)

    @classmethod
    def _from_traced_module(cls, ir: Any, name: str,
                            gm: torch.fx.GraphModule) -> "Graph":
        """A graph around a model capture, whose placeholders carry
        ``node.meta["poptorch_kind"]`` and whose leading
        ``gm.meta["poptorch_num_user_outputs"]`` outputs are user outputs."""
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # Parameters, buffers and inputs are all handed over as they are:
        # the executor owns the copies, so in-place updates must land.
        inputs = [
            _graph_tensor(n, str(n.target),
                          n.meta.get("poptorch_kind", "input"), True)
            for n in placeholders
        ]
        return cls(ir, name, gm, inputs,
                   gm.meta.get("poptorch_num_user_outputs"))

    @property
    def ir(self) -> Any:
        """The Ir that owns this graph."""
        return self._ir

    @property
    def name(self) -> str:
        """The graph's unique name within its Ir."""
        return self._name

    @property
    def id(self) -> str:
        """Same as :attr:`name` (PopXL's graph id)."""
        return self._name

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        """The ATen-level ``torch.fx.GraphModule``."""
        return self._graph_module

    @property
    def inputs(self) -> Tuple[GraphTensor, ...]:
        """The graph inputs, in call order."""
        return self._inputs

    @property
    def outputs(self) -> Tuple[GraphTensor, ...]:
        """The graph outputs, in order."""
        return self._outputs

    @property
    def user_outputs(self) -> Tuple[GraphTensor, ...]:
        """The outputs that go back to the user (the rest are internal)."""
        return self._outputs[:self._num_user_outputs]

    def is_empty(self) -> bool:
        """True for a graph without any node but its output."""
        return len(self._graph_module.graph.nodes) <= 1

    def to_dot(self) -> str:
        """The graph as Graphviz DOT text."""
        return graph_module_to_dot(
            self._graph_module, self._name, f"{self._ir!r} {self._name}",
            [i.name for i in self._inputs])

    def _h2d_streams(self) -> Tuple[HostToDeviceStream, ...]:
        return tuple(
            HostToDeviceStream(i.name, i.shape, i.dtype)
            for i in self._inputs if i.kind == "input")

    def _d2h_streams(self) -> Tuple[DeviceToHostStream, ...]:
        return tuple(
            DeviceToHostStream(f"output_{k}", o.shape, o.dtype)
            for k, o in enumerate(self.user_outputs))

    def _check_call_inputs(self, tensors: Sequence[torch.Tensor]) -> None:
        if len(tensors) != len(self._inputs):
            raise ValueError(
                f"Graph '{self._name}' takes {len(self._inputs)} input "
                f"tensors ({', '.join(i.name for i in self._inputs)}), "
                f"got {len(tensors)}.")
        for spec, tensor in zip(self._inputs, tensors):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(
                    f"Input '{spec.name}' of graph '{self._name}' must be a "
                    f"torch.Tensor, got {type(tensor).__name__}.")
            if tuple(tensor.shape) != spec.shape or tensor.dtype != spec.dtype:
                raise ValueError(
                    f"Input '{spec.name}' of graph '{self._name}' must have "
                    f"shape {list(spec.shape)} and dtype {spec.dtype}, got "
                    f"{list(tensor.shape)} and {tensor.dtype}.")

    def __call__(self, *tensors: torch.Tensor) -> GraphOutput:
        self._check_call_inputs(tensors)
        args = [t if spec.by_ref else t.clone()
                for spec, t in zip(self._inputs, tensors)]
        outputs = tuple(
            o for o in tree_leaves(self._graph_module(*args))
            if isinstance(o, torch.Tensor))
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else outputs

    def __repr__(self) -> str:
        return (f"Graph[name={self._name!r}, inputs={len(self._inputs)}, "
                f"outputs={len(self._outputs)}]")
