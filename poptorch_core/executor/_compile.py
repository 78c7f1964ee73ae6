"""Building a :class:`~._program.Program` for an executor (spec 4.3, 10).

Compilation traces the model once on micro-batch-shaped copies of the
inputs (with IPU dtypes), checks the graph against IPU rules, creates the
device's copy of the weights and turns the graph into a runnable form.
"""
import operator
from typing import Any, List

import torch
import torch.fx

from .. import _dtypes, _impl
from .._args_parser import flattenTensors, rebuildStructure
from .._ipu_count import _ipus_to_reserve
from .._logging import logger
from ..annotations import _block_tracking
from ..device._stamps import OpStamper
from ..enums import OutputMode
from ..tracing import capture as _capture
from . import _pipeline, _replica_weights
from ._anchors import wants_gradients
from ._args import BoundArgs, InputSignature
from ._backends import Executable
from ._device_state import DeviceRng, DeviceState
from ._host_memory import keep_host_memory
from ._lowering import lower_for_host
from ._program import Program
from ._simulation import after_compile
from ._wide_inputs import only_widened_inputs

__all__: list = []

_BROADCAST_BUFFERS_MSG = (
    "PopTorch does not support broadcasting buffers. If your model is able to "
    "tolerate buffers becoming out of sync between replicas, you can disable "
    "buffer broadcasting using poptorch.Options.broadcastBuffers(False).")


def _trace_inputs(executor: Any, bound: BoundArgs, layout: Any,
                  device: torch.device) -> List[torch.Tensor]:
    """The first micro-batch of each input, with IPU dtypes: what the model
    sees while it is traced."""
    flat = flattenTensors(bound.as_structure())
    warned_contiguous = warned_grad = False
    micro = []
    for i, tensor in enumerate(flat):
        layout.check_divisible(tensor)
        if not tensor.is_contiguous() and not warned_contiguous:
            warned_contiguous = True
            logger.warning("At least one input tensor is not contiguous: "
                           "non-contiguous tensors will be converted.")
        if tensor.requires_grad and not warned_grad:
            warned_grad = True
            logger.warning("Input tensor has requires_grad=True set. This "
                           "tensor will be detached because backward pass "
                           "via inputs is not supported.")
        tensor = _dtypes.to_ipu(tensor.detach(), f"Input {i}", device)
        if tensor.dim() > 0:
            tensor = tensor.narrow(0, 0, layout.micro_shape(tensor)[0])
        micro.append(tensor.contiguous())
    return micro


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


def build_program(executor: Any, bound: BoundArgs) -> Program:
    opts = executor._options
    layout = executor._layout()
    device = torch.device(opts.Simulator.host_device)
    model = executor._model
    training = executor._training

    executor.ir.replication_factor = layout.replicas
    if opts.Simulator.host_memory_pool:
        keep_host_memory()
    micro = _trace_inputs(executor, bound, layout, device)
    trace_args, trace_kwargs = rebuildStructure(bound.as_structure(),
                                                iter(micro))
    params, param_names, buffers, buffer_names = _capture.module_state(model)
    state = DeviceState(params, buffers,
                        [n[0] for n in param_names + buffer_names], device)
    grouped = _replica_weights.resolve(executor, param_names, params)
    state.group_weights(grouped)
    if training:
        _replica_weights.check_optimizer(executor._optimizer_link.optimizer,
                                         grouped)
    with _block_tracking() as tracker, OpStamper(model, tracker) as stamp:
        captured = _capture.capture_module(
            model, trace_args, trace_kwargs, training=training,
            device=device, params=state.replica_params(0),
            buffers=state.buffers(),
            excludes=opts._source_location_excludes, on_op=stamp)
    strategy = opts._execution_strategy
    placement = _pipeline.resolve(strategy, tracker.seen_blocks(),
                                  stamp.blocks)
    _pipeline.check(strategy, placement, training,
                    layout.gradient_accumulation, layout.device_iterations)
    _ipus_to_reserve(placement.num_ipus, opts)
    estimate = after_compile(executor, captured, placement, state, layout,
                             grouped)

    if captured.mutated_buffers and layout.input_group_size < layout.replicas:
        if opts.broadcast_buffers:
            raise _impl._cpp_error(_BROADCAST_BUFFERS_MSG)
        state.make_per_replica(layout.replicas)

    graph = captured.graph_module
    output_node = next(n for n in graph.graph.nodes if n.op == "output")
    aliases = [_may_alias(n) for n in output_node.args[0]]
    executor._ir._adopt_main_graph(graph)
    executor._ir.num_host_transfers = (layout.device_iterations *
                                       layout.gradient_accumulation)
    executor._ir._mark_executable_built()
    seed = opts.random_seed if opts.exists("random_seed") else None
    host_graph = lower_for_host(graph)
    program = Program(
        captured=captured,
        executable=Executable(host_graph, opts.Simulator.execution_backend),
        state=state, rng=DeviceRng(device, seed), layout=layout,
        signature=InputSignature.of(bound),
        output_mode=OutputMode(opts.output_mode),
        output_period=opts.output_return_period, training=training,
        reduction=opts.Training.accumulation_and_replication_reduction_type,
        output_aliases=aliases,
        saved_inputs=rebuildStructure(bound.as_structure(), iter(
            [t.detach().cpu().clone()
             for t in flattenTensors(bound.as_structure())])),
        keep_gradients=wants_gradients(opts.anchored_tensors),
        wide_inputs=_wide_int64_inputs(host_graph, bound, captured.num_inputs),
        uses_rng=any(torch.Tag.nondeterministic_seeded in
                     getattr(node.target, "tags", ())
                     for node in graph.graph.nodes),
        estimate=estimate)
    if training:
        program.device_optimizer = executor._optimizer_link.build(
            state, param_names)
    return program
