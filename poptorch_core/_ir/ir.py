"""``poptorch_core.Ir``: the intermediate representation of a compiled model,
shaped like PopXL's ``popxl.Ir``.

An Ir owns a main graph (the captured model, set by the executor) and any
number of subgraphs built with :meth:`Ir.create_graph` from a function or a
module. Graphs are ATen-level ``torch.fx`` captures made with ``make_fx``:
real tensors are traced in ``"real"`` mode (on copies, so the caller's
tensors are never changed), and as soon as one argument is a
:class:`TensorSpec` everything is traced in ``"fake"`` mode. Tracing runs with
:func:`~poptorch_core.isRunningOnIpu` True, so ``poptorch`` ops take their
simulated-IPU meaning.

Example::

    >>> ir = poptorch.Ir(replication=8)
    >>> g = ir.create_graph(lambda x: x.relu(), poptorch.TensorSpec((4,)))
    >>> g.name
    '<lambda>_subgraph(0)'
    >>> ir.replica_grouping(stride=2, group_size=4).assignment
    [0, 1, 0, 1, 0, 1, 0, 1]

DOT files: ``ir.dot_checkpoint(check)`` writes one file per graph, named
``<save_dir>/ir<id>_<graph name>_<check>.dot`` (characters outside
``[A-Za-z0-9_.-]`` become ``_``), only when ``check`` or ``ALL`` is listed in
``POPART_DOT_CHECKS`` (``:`` or ``,`` separated). ``save_dir`` defaults to
``POPTORCH_SIM_DOT_DIR`` and then to the current directory.
"""
import contextlib
import itertools
import os
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from .. import _impl
from ..files import atomic_write
from .binding import TensorByRef, TensorSpec, bind_arguments
from .dot import DOT_DIR_ENV, dot_check_enabled
from .graph import DeviceToHostStream, Graph, HostToDeviceStream
from .replica_grouping import ReplicaGrouping, check_positive_int

__all__ = ["Ir", "Graph", "TensorSpec", "TensorByRef", "ReplicaGrouping",
           "HostToDeviceStream", "DeviceToHostStream"]

_ir_ids = itertools.count()


def _qualname(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module) or not hasattr(fn, "__qualname__"):
        return type(fn).__qualname__
    return fn.__qualname__


def _as_output_tuple(outputs: Any, qualname: str) -> tuple:
    if outputs is None:
        return ()
    if isinstance(outputs, torch.Tensor):
        return (outputs, )
    message = (f"Output of subgraph {qualname} must be None, a Tensor or an "
               "iterable of Tensors. Output type: ")
    try:
        outputs = tuple(outputs)
    except TypeError:
        raise ValueError(message + type(outputs).__name__) from None
    for out in outputs:
        if not isinstance(out, torch.Tensor):
            raise ValueError(message + f"iterable containing "
                             f"{type(out).__name__}")
    return outputs


def _example_inputs(values: Sequence[Any]) -> Tuple[str, List[Any]]:
    """Tracing inputs and mode: copies of real tensors, or fake tensors as
    soon as one value is a spec."""
    if not any(isinstance(v, TensorSpec) for v in values):
        return "real", [v.detach().clone() for v in values]
    # Module parameters and captured tensors are real: let them in as
    # constants.
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = []
    for value in values:
        if isinstance(value, TensorSpec):
            with mode:
                fakes.append(torch.empty(value.shape, dtype=value.dtype))
        else:
            fakes.append(mode.from_tensor(value.detach()))
    return "fake", fakes


def _name_placeholders(gm: torch.fx.GraphModule, names: List[str]) -> None:
    # make_fx names placeholders arg0_1, ...; the input names make the
    # generated code and the DOT files readable.
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, name in zip(placeholders, names):
        node._rename(name)
        node.target = node.name
    gm.recompile()


class Ir:
    """The IR of one model: a main graph, subgraphs, host streams and the
    replication settings.

    Args:
        replication: the replication factor (number of model replicas).
    """

    def __init__(self, replication: int = 1):
        self._id = next(_ir_ids)
        self._replication_factor = check_positive_int("replication",
                                                       replication)
        self._num_instances = 1
        self._num_host_transfers = 1
        self._executable_built = False
        self._name_counters: Dict[str, int] = {}
        self._main_graph = Graph(self, "main")
        self._subgraphs: List[Graph] = []
        self._h2d_streams: List[HostToDeviceStream] = []
        self._d2h_streams: List[DeviceToHostStream] = []

    # Identity -------------------------------------------------------------
    @property
    def id(self) -> int:
        """A process-wide unique number."""
        return self._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Ir):
            raise TypeError(f"Value must be of type poptorch.Ir. Value: "
                            f"{other!r}. Type: {type(other)}")
        return self._id == other._id

    def __repr__(self) -> str:
        return f"Ir[id={self._id}]"

    # Graphs ---------------------------------------------------------------
    @property
    def main_graph(self) -> Graph:
        """The captured model (empty until the executor sets it)."""
        return self._main_graph

    @property
    def graphs(self) -> List[Graph]:
        """Every graph: the main graph first, then subgraphs in creation
        order."""
        return [self._main_graph] + self._subgraphs

    def get_graph(self, name: str) -> Graph:
        """The graph called ``name``; KeyError when there is none."""
        for graph in self.graphs:
            if graph.name == name:
                return graph
        raise KeyError(f"{self!r} has no graph named {name!r}. Graphs: "
                       f"{[g.name for g in self.graphs]}")

    def _create_name(self, base: str) -> str:
        base = base.replace(".", "")
        taken = {g.name for g in self.graphs}
        while True:  # skip names a user already took explicitly
            index = self._name_counters.get(base, 0)
            self._name_counters[base] = index + 1
            name = f"{base}_subgraph({index})"
            if name not in taken:
                return name

    def create_empty_graph(self, name: Optional[str] = None) -> Graph:
        """A new graph without inputs, outputs or ops, named
        ``<name>_subgraph(<n>)`` (``name`` defaults to ``"graph"``)."""
        graph = Graph(self, self._create_name(name or "graph"))
        self._subgraphs.append(graph)
        return graph

    def create_graph(self, fn: Callable, *args: Any, **kwargs: Any) -> Graph:
        """Captures ``fn(*args, **kwargs)`` as a new subgraph.

        ``fn`` is a function or a ``torch.nn.Module`` (its ``forward`` is
        traced; parameters become constants). Every tensor or
        :class:`TensorSpec` in the arguments, also inside lists, tuples,
        dicts, ``*args`` and ``**kwargs``, becomes a graph input; other
        values are frozen into the graph. Arguments annotated with
        :class:`TensorByRef` are passed by reference.

        Raises:
            ValueError: the arguments do not match ``fn``'s signature, or
                ``fn`` returns something other than None, a tensor or an
                iterable of tensors.
            TypeError: a list or tuple mixes tensors with other values.

        Example::

            >>> def scale(x, factors: list, *, by=2.0):
            ...     return [x * f * by for f in factors]
            >>> ir = poptorch.Ir()
            >>> g = ir.create_graph(scale, poptorch.TensorSpec((3,)),
            ...                     [torch.ones(3), torch.ones(3)])
            >>> [i.name for i in g.inputs]
            ['x', 'factors_0', 'factors_1']
        """
        qualname = _qualname(fn)
        bound = bind_arguments(fn, qualname, *args, **kwargs)
        mode, examples = _example_inputs(bound.values)

        def traced(*tensors: torch.Tensor) -> tuple:
            return _as_output_tuple(bound.call(tensors), qualname)

        tracing = (contextlib.nullcontext() if _impl.isRunningOnIpu() else
                   _impl.ipu_tracing())
        with tracing:
            gm = make_fx(traced, tracing_mode=mode)(*examples)
        _name_placeholders(gm, [i.name for i in bound.inputs])
        graph = Graph(self, self._create_name(qualname), gm, bound.inputs)
        self._subgraphs.append(graph)
        return graph

    def _adopt_main_graph(self, gm: torch.fx.GraphModule,
                          name: str = "main") -> Graph:
        """Makes a model capture the main graph (called by the executor).

        ``gm``'s placeholders carry ``node.meta["poptorch_kind"]`` in
        {"parameter", "buffer", "input"}; its leading
        ``gm.meta["poptorch_num_user_outputs"]`` outputs are user outputs.
        """
        if any(g.name == name for g in self._subgraphs):
            raise ValueError(f"{self!r} already has a subgraph named "
                             f"{name!r}; pick another main graph name.")
        self._main_graph = Graph._from_traced_module(self, name, gm)
        return self._main_graph

    # Streams and host transfers -------------------------------------------
    def h2d_stream(self, shape: Sequence[int], dtype: torch.dtype,
                   name: Optional[str] = None) -> HostToDeviceStream:
        """Declares an extra host-to-device stream."""
        return self._declare_stream(HostToDeviceStream, shape, dtype, name,
                                    self.get_all_h2d_streams(),
                                    self._h2d_streams)

    def d2h_stream(self, shape: Sequence[int], dtype: torch.dtype,
                   name: Optional[str] = None) -> DeviceToHostStream:
        """Declares an extra device-to-host stream."""
        return self._declare_stream(DeviceToHostStream, shape, dtype, name,
                                    self.get_all_d2h_streams(),
                                    self._d2h_streams)

    @staticmethod
    def _declare_stream(stream_type: type, shape: Sequence[int],
                        dtype: torch.dtype, name: Optional[str],
                        existing: Sequence[Any], declared: List[Any]) -> Any:
        spec = TensorSpec(tuple(shape), dtype)
        default_name = ("h2d" if stream_type is HostToDeviceStream else
                        "d2h") + f"_stream_{len(declared)}"
        stream = stream_type(name or default_name, spec.shape, spec.dtype)
        if any(s.name == stream.name for s in existing):
            raise ValueError(f"A stream named {stream.name!r} already "
                             "exists; stream names must be unique.")
        declared.append(stream)
        return stream

    def get_all_h2d_streams(self) -> List[HostToDeviceStream]:
        """One stream per model input of the main graph (in input order),
        then the declared ones."""
        return list(self._main_graph._h2d_streams()) + self._h2d_streams

    def get_all_d2h_streams(self) -> List[DeviceToHostStream]:
        """One stream per user output of the main graph (in output order),
        then the declared ones."""
        return list(self._main_graph._d2h_streams()) + self._d2h_streams

    @property
    def num_host_transfers(self) -> int:
        """Host transfers per run: device iterations x gradient accumulation
        (set by the executor)."""
        return self._num_host_transfers

    @num_host_transfers.setter
    def num_host_transfers(self, value: int) -> None:
        self._num_host_transfers = check_positive_int("num_host_transfers",
                                                       value)

    # Replication ----------------------------------------------------------
    @property
    def replication_factor(self) -> int:
        """Number of model replicas."""
        return self._replication_factor

    @replication_factor.setter
    def replication_factor(self, value: int) -> None:
        if self._executable_built:
            raise RuntimeError(
                f"Cannot set the replication factor of {self!r}: an "
                "executable has already been built from it. Set "
                "replicationFactor in the Options before compiling instead.")
        self._replication_factor = check_positive_int("replication_factor",
                                                       value)

    @property
    def instance_replication_factor(self) -> int:
        """Replicas run by this process (``replication_factor`` divided by
        the number of processes in a distributed run)."""
        return self._replication_factor // self._num_instances

    def _set_num_instances(self, num_instances: int) -> None:
        """Number of processes sharing the replicas (distributed runs)."""
        num_instances = check_positive_int("num_instances", num_instances)
        if self._replication_factor % num_instances != 0:
            raise ValueError(
                f"The replication factor ({self._replication_factor}) must "
                f"be a multiple of the number of instances ({num_instances}).")
        self._num_instances = num_instances

    def _mark_executable_built(self) -> None:
        """Called by the executor once it has built an executable."""
        self._executable_built = True

    def replica_grouping(self, stride: int = 1,
                         group_size: Optional[int] = None) -> ReplicaGrouping:
        """Groups of ``group_size`` replicas ``stride`` apart.

        ``group_size`` defaults to ``replication_factor // stride``.
        With 8 replicas: ``(1, 2)`` gives ``[0,0,1,1,2,2,3,3]`` and
        ``(4, 2)`` gives ``[0,1,2,3,0,1,2,3]``.
        """
        return ReplicaGrouping._from_params(self._replication_factor, stride,
                                            group_size)

    def replica_grouping_from_assignments(
            self, assignment: Sequence[int]) -> ReplicaGrouping:
        """The grouping where replica ``r`` is in group ``assignment[r]``.

        Any equal-sized partition is accepted; one without a constant stride
        can set up variables but not collectives.
        """
        return ReplicaGrouping._from_assignments(self._replication_factor,
                                                 assignment)

    # DOT ------------------------------------------------------------------
    def dot_checkpoint(self, check: str,
                       save_dir: Optional[str] = None) -> List[str]:
        """Writes every graph as a DOT file if ``check`` is enabled.

        ``check`` is enabled when ``POPART_DOT_CHECKS`` lists it or ``ALL``.
        Files are ``<save_dir>/ir<id>_<graph name>_<check>.dot``; returns
        their paths (empty when the check is not enabled).
        """
        if not isinstance(check, str):
            raise TypeError(f"check must be a str, not {type(check).__name__}.")
        if not dot_check_enabled(check):
            return []
        save_dir = save_dir or os.environ.get(DOT_DIR_ENV) or os.getcwd()
        os.makedirs(save_dir, exist_ok=True)
        paths = []
        for graph in self.graphs:
            stem = re.sub(r"[^A-Za-z0-9_.-]", "_",
                          f"ir{self._id}_{graph.name}_{check}")
            path = os.path.join(save_dir, stem + ".dot")
            with atomic_write(path, "w", encoding="utf-8") as f:
                f.write(graph.to_dot())
            paths.append(path)
        return paths


def executable_ir(graph_module: torch.fx.GraphModule,
                  num_host_transfers: int, replication: int = 1) -> Ir:
    """The Ir of a compiled model: its main graph is the captured
    ``graph_module`` and its executable counts as built.

    ``num_host_transfers`` is device iterations x gradient accumulation,
    ``replication`` the model's replication factor.
    """
    ir = Ir(replication=replication)
    ir._adopt_main_graph(graph_module)
    ir.num_host_transfers = num_host_transfers
    ir._mark_executable_built()
    return ir
