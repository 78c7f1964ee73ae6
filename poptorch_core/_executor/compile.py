"""Building a :class:`~._program.Program` for an executor.

Compilation traces the model once on micro-batch-shaped copies of the
inputs (with IPU dtypes), checks the graph against IPU rules, creates the
device's copy of the weights and turns the graph into a runnable form.
"""
import operator
from typing import Any, Callable, Set, Tuple

import torch
import torch.fx

from .. import _impl
from .._args_parser import flattenTensors, rebuildStructure
from .._logging import logger
from ..annotations import block_tracking
from ..device._stamps import OpStamper
from ..enums import OutputMode
from .._ir import Ir
from .._ir.ir import executable_ir
from ..options._validation import validate_backend_options
from .._tracing import capture as _capture_mod
from . import pipeline, replica_weights, scale_out_hook
from .arguments import BoundArgs, InputSignature, flat_input_names
from .micro_batches import BatchLayout
from .device_state import DeviceRng, DeviceState
from .program import Program
from .simulation import after_compile
from .state import ExecutorState
from .tiered import TieredBackend
from .backends import Executable
from .backends.host_memory import keep_host_memory
from .backends.passes.lowering import lower_for_host
from .backends.passes.wide_inputs import only_widened_inputs

_BROADCAST_BUFFERS_MSG = (
    "PopTorch does not support broadcasting buffers. If your model is able to "
    "tolerate buffers becoming out of sync between replicas, you can disable "
    "buffer broadcasting using poptorch.Options.broadcastBuffers(False).")


def _micro_batch_of(layout: BatchLayout) -> Callable:
    """What the model sees of each input while it is traced: the first
    micro-batch, contiguous (with PopTorch's warnings, once each)."""
    warned: Set[str] = set()

    def warn_once(key: str, message: str) -> None:
        if key not in warned:
            warned.add(key)
            logger.warning(message)

    def prepare(tensor: torch.Tensor) -> torch.Tensor:
        layout.check_divisible(tensor)
        if not tensor.is_contiguous():
            warn_once("contiguous", "At least one input tensor is not "
                      "contiguous: non-contiguous tensors will be converted.")
        if tensor.requires_grad:
            warn_once("grad", "Input tensor has requires_grad=True set. This "
                      "tensor will be detached because backward pass via "
                      "inputs is not supported.")
        tensor = tensor.detach()
        if tensor.dim() > 0:
            tensor = tensor.narrow(0, 0, layout.micro_shape(tensor)[0])
        return tensor.contiguous()
    return prepare


def _may_alias(node: Any) -> bool:
    """Whether a graph output may share memory with a placeholder."""
    if not isinstance(node, torch.fx.Node):
        return False
    if node.op == "placeholder":
        return True
    if node.target is operator.getitem:
        return _may_alias(node.args[0])
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None
                                      for r in schema.returns)


def _wide_int64_inputs(graph_module: torch.fx.GraphModule,
                       bound: BoundArgs, num_inputs: int) -> frozenset:
    """The int64 inputs of this call that the graph only widens back."""
    flat = flattenTensors(bound.as_structure())
    if len(flat) != num_inputs:
        return frozenset()
    return frozenset(
        i for i in only_widened_inputs(graph_module.graph, num_inputs)
        if flat[i].dtype == torch.int64)


def _capture(state: ExecutorState, bound: BoundArgs, layout: BatchLayout,
             device: torch.device
             ) -> Tuple[_capture_mod.CapturedModel, DeviceState, list,
                        pipeline.Placement]:
    """Traces the model on its first micro-batch, with the device's copy of
    the weights, and places its ops on IPUs."""
    opts = state.options
    trace_args, trace_kwargs = _capture_mod.ipu_arguments(
        bound.positional, bound.named, device, _micro_batch_of(layout))
    device_state, param_names = _device_state(state, layout, device)
    with block_tracking() as tracker, \
            OpStamper(state.model, tracker) as stamp:
        captured = _capture_mod.capture_module(
            state.model, trace_args, trace_kwargs, training=state.training,
            device=device, params=device_state.replica_params(0),
            buffers=device_state.buffers(),
            excludes=opts.source_location_excludes, on_op=stamp,
            call_inputs=flattenTensors(bound.as_structure()),
            input_names=flat_input_names(bound))
    strategy = opts.execution_strategy
    placement = pipeline.resolve(strategy, tracker.seen_blocks(),
                                  stamp.blocks)
    pipeline.check(strategy, placement, state.training,
                    layout.gradient_accumulation, layout.device_iterations)
    pipeline.ipus_to_reserve(placement.num_ipus, opts)
    return captured, device_state, param_names, placement


def _device_state(state: ExecutorState, layout: BatchLayout,
                  device: torch.device) -> Tuple[DeviceState, list]:
    """The device's copy of the weights (one copy per replica group for
    replica-grouped weights) and the parameters' names."""
    params, param_names, buffers, buffer_names = \
        _capture_mod.module_state(state.model)
    device_state = DeviceState(params, buffers,
                               [n[0] for n in param_names + buffer_names],
                               device)
    grouped = replica_weights.resolve(
        state.per_replica_params, Ir(replication=layout.replicas),
        param_names, params)
    device_state.group_weights(grouped)
    if state.training:
        replica_weights.check_optimizer(state.optimizer_link.optimizer,
                                         grouped)
    return device_state, param_names


def _saved_inputs(bound: BoundArgs) -> Any:
    """Host copies of the compile-time inputs (``save`` stores them)."""
    structure = bound.as_structure()
    return rebuildStructure(structure, iter(
        [t.detach().cpu().clone() for t in flattenTensors(structure)]))


def build_program(state: ExecutorState, bound: BoundArgs) -> Program:
    """Compiles ``state``'s model for the (full-batch) inputs ``bound``."""
    opts = state.options
    layout = state.layout()
    device = torch.device(opts.Simulator.host_device)
    if opts.Simulator.host_memory_pool:
        keep_host_memory()
    captured, device_state, param_names, placement = _capture(
        state, bound, layout, device)
    validate_backend_options(opts, [name for names in captured.buffer_names
                                    for name in names])
    estimate = after_compile(state, captured, placement, device_state,
                             layout)
    # Replicas of other processes count: their buffers drift apart too.
    replicas = layout.replicas * opts.Distributed.numProcesses
    if captured.mutated_buffers and layout.input_group_size < replicas:
        if opts.broadcast_buffers:
            raise _impl.cpp_error(_BROADCAST_BUFFERS_MSG)
        device_state.make_per_replica(layout.replicas)

    graph = captured.graph_module
    output_node = next(n for n in graph.graph.nodes if n.op == "output")
    state.ir = executable_ir(graph, layout.device_iterations *
                             layout.gradient_accumulation, layout.replicas)
    seed = opts.random_seed if opts.exists("random_seed") else None
    host_graph = lower_for_host(graph)
    backend = opts.Simulator.execution_backend
    program = Program(
        captured=captured,
        executable=Executable(host_graph, "interpret" if backend == "auto"
                              else backend),
        state=device_state, rng=DeviceRng(device, seed), layout=layout,
        signature=InputSignature.of(bound),
        output_mode=OutputMode(opts.output_mode),
        output_period=opts.output_return_period, training=state.training,
        reduction=opts.Training.accumulation_and_replication_reduction_type,
        output_aliases=[_may_alias(n) for n in output_node.args[0]],
        saved_inputs=_saved_inputs(bound),
        input_names=flat_input_names(bound),
        keep_gradients=any(a.long_name.startswith("Gradient___")
                           for a in opts.anchors.values()),
        wide_inputs=_wide_int64_inputs(host_graph, bound, captured.num_inputs),
        uses_rng=any(torch.Tag.nondeterministic_seeded in
                     getattr(node.target, "tags", ())
                     for node in graph.graph.nodes),
        estimate=estimate)
    if backend == "auto":
        program.tiers = TieredBackend(
            opts.Simulator.host_device,
            enabled=opts.Distributed.numProcesses == 1)
    if state.training:
        program.device_optimizer = state.optimizer_link.build(
            device_state.host_params, device_state.params, param_names)
        program.device_optimizer.fused_update = backend == "compile"
    scale_out_hook.attach(state, program)
    return program
