"""Capture one forward pass of a model into an ATen-level ``torch.fx`` graph.

Invariants of a :class:`CapturedModel`'s graph module:

- Placeholders are, in order: every unique parameter, every unique buffer,
  then every tensor leaf of the forward's arguments (depth-first, as
  :func:`poptorch_core._args_parser.flattenTensors` orders them). Each
  placeholder's ``meta["poptorch_kind"]`` is ``"parameter"``, ``"buffer"`` or
  ``"input"``. Tied parameters (one tensor under several names) are one
  placeholder.
- Outputs are the non-constant tensor leaves of the forward's result, in
  order, followed (training only) by the final loss.
  ``gm.meta["poptorch_num_user_outputs"]`` counts the former.
- In-place updates of buffers and inputs stay in the graph as in-place ops on
  the placeholders, so running the graph on the device's buffers updates them
  as the eager model would; :attr:`CapturedModel.mutated_buffers` and
  :attr:`CapturedModel.mutated_inputs` list them.
- The graph is captured "pre-dispatch", so ``torch.no_grad()`` regions inside
  forward are recorded and honoured when the graph runs under autograd.

The host model is left exactly as it was: it is traced on copies of its
buffers and of the inputs, and its parameter/buffer slots are restored.
"""
import contextlib
import dataclasses
from typing import (Any, Callable, Dict, Iterator, List, Optional,
                    Sequence, Tuple)

import torch
import torch.fx
from torch._guards import TracingContext, tracing
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from .. import _dtypes, _impl
from .._args_parser import (flattenTensors, loadImportedPlugins,
                            rebuildStructure)
from ..errors import createPoptorchError
from . import (integer_operands, interception, loss_check, rules,
               strided_inplace)
from .decompositions import TRACE_DECOMPOSITIONS
from .stack_traces import torch_frames_kept

_BATCHNORM_TYPES = (torch.nn.modules.batchnorm._BatchNorm,)


@dataclasses.dataclass
class CapturedModel:
    """A traced forward pass and what the executor needs to run it."""
    graph_module: torch.fx.GraphModule
    #: Every name of each unique parameter / buffer, in placeholder order.
    param_names: List[List[str]]
    buffer_names: List[List[str]]
    num_inputs: int
    #: The forward's result as traced; its tensor leaves are replaced on
    #: each run (``rebuildStructure``).
    output_template: Any
    #: For each tensor leaf of the result: the graph output index, or
    #: ``None`` for a host-side constant (returned as traced, unbatched).
    output_slots: List[Optional[int]]
    constants: Dict[int, torch.Tensor]
    mutated_buffers: List[int]
    mutated_inputs: List[int]
    #: Graph output index of the final loss (training only).
    loss_index: Optional[int] = None

    @property
    def num_user_outputs(self) -> int:
        return self.graph_module.meta["poptorch_num_user_outputs"]


# --- Lifting parameters and buffers ------------------------------------------

@dataclasses.dataclass
class _StateSlots:
    """Where each unique parameter/buffer lives in the module tree."""
    tensors: List[torch.Tensor]
    names: List[List[str]]
    slots: List[List[Tuple[torch.nn.Module, str, str]]]  # (module, dict, key)


def _collect_state(module: torch.nn.Module, kind: str) -> _StateSlots:
    dict_name = "_parameters" if kind == "parameter" else "_buffers"
    index: Dict[int, int] = {}
    state = _StateSlots([], [], [])
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for key, tensor in getattr(sub, dict_name).items():
            if tensor is None:
                continue
            name = f"{prefix}.{key}" if prefix else key
            i = index.setdefault(id(tensor), len(state.tensors))
            if i == len(state.tensors):
                state.tensors.append(tensor)
                state.names.append([])
                state.slots.append([])
            if name not in state.names[i]:
                state.names[i].append(name)
            state.slots[i].append((sub, dict_name, key))
    return state


def module_state(module: torch.nn.Module) -> Tuple[
        List[torch.Tensor], List[List[str]], List[torch.Tensor], List[List[str]]]:
    """The unique parameters and buffers of ``module`` with all their names,
    in placeholder order: ``(params, param_names, buffers, buffer_names)``."""
    params = _collect_state(module, "parameter")
    buffers = _collect_state(module, "buffer")
    return params.tensors, params.names, buffers.tensors, buffers.names


@contextlib.contextmanager
def _swapped_state(states: Sequence[_StateSlots],
                   values: Sequence[Sequence[torch.Tensor]]) -> Iterator[None]:
    """Puts ``values`` in the module slots of ``states`` for the duration,
    then checks that forward neither reassigned nor removed them."""
    saved = []
    for state, vals in zip(states, values):
        for slots, value in zip(state.slots, vals):
            for sub, dict_name, key in slots:
                saved.append((sub, dict_name, key, getattr(sub, dict_name)[key]))
                getattr(sub, dict_name)[key] = value
    try:
        yield
        _check_state_unchanged(states, values)
    finally:
        for sub, dict_name, key, original in saved:
            getattr(sub, dict_name)[key] = original


def _check_state_unchanged(states: Sequence[_StateSlots],
                           values: Sequence[Sequence[torch.Tensor]]) -> None:
    for state, vals in zip(states, values):
        for slots, value in zip(state.slots, vals):
            for sub, dict_name, key in slots:
                if isinstance(sub, _BATCHNORM_TYPES):
                    continue
                kind = "Parameter" if dict_name == "_parameters" else "Buffer"
                current = getattr(sub, dict_name)
                if key not in current:
                    raise createPoptorchError(
                        f"{kind} {key} is removed from the model when calling "
                        "the forward method.")
                if current[key] is not value:
                    raise createPoptorchError(
                        f"{kind} {key} is reassigned within the model when "
                        "calling the forward method. This is not supported. "
                        f"Consider using self.{key}.copy_(src) to copy data "
                        "from a source tensor, where src is the name of the "
                        "source tensor.")


# --- Capture -------------------------------------------------------------------

@contextlib.contextmanager
def _tracing_context(training: bool, device: torch.device,
                     excludes: Sequence[str],
                     on_op: Optional[Callable[[], None]],
                     call_inputs: Sequence[torch.Tensor] = ()
                     ) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        # Tracing runs random ops for real: keep the host's random stream as
        # it was, as compiling on an IPU would.
        stack.enter_context(torch.random.fork_rng(
            devices=[device] if device.type == "cuda" else []))
        stack.enter_context(_impl.ipu_tracing(training))
        stack.enter_context(_impl.tracing_call_inputs(call_inputs))
        # Name scopes and attributes (poptorch.NameScope, Attribute,
        # MultiConv) are recorded in node.meta["custom"].
        stack.enter_context(torch.fx.traceback.preserve_node_meta())
        stack.enter_context(torch_frames_kept())
        # make_fx records each node's value as a fake tensor; tracing real
        # tensors, it builds a new FakeTensorMode for every node unless a
        # tracing context offers one (a quarter of the NCI model's capture).
        stack.enter_context(tracing(TracingContext(
            FakeTensorMode(allow_fallback_kernels=True))))
        # A plugin (PopTorch Geometric) substitutes its fixed-shape ops for
        # models of a package it supports, imported or not by the script.
        loadImportedPlugins()
        stack.enter_context(_impl._OverwriteContextManager())
        try:
            _impl.run_pre_compile_hooks()
            stack.enter_context(torch.set_grad_enabled(training))
            stack.enter_context(interception.make_mode(device, excludes,
                                                        on_op))
            yield
        finally:
            _impl.run_post_compile_hooks()


def _trace_copy(tensor: torch.Tensor, training: bool) -> torch.Tensor:
    copy = tensor.detach().clone()
    if training and tensor.requires_grad:
        copy.requires_grad_(True)
    return copy


def ipu_arguments(args: Sequence[Any], kwargs: Dict[str, Any],
                  device: torch.device,
                  prepare: Optional[Callable[[torch.Tensor],
                                             torch.Tensor]] = None
                  ) -> Tuple[List[Any], Dict[str, Any]]:
    """The forward's arguments as a traced model sees them: every tensor
    leaf (after ``prepare``, e.g. taking one micro-batch) with its IPU dtype
    on ``device``. Raises if an int64 value does not fit int32."""
    structure = (list(args), dict(kwargs))
    flat = [_dtypes.to_ipu(prepare(t) if prepare else t.detach(),
                           f"Input {i}", device)
            for i, t in enumerate(flattenTensors(structure))]
    return rebuildStructure(structure, iter(flat))


def capture_module(module: torch.nn.Module, args: Sequence[Any],
                   kwargs: Dict[str, Any], *, training: bool,
                   device: torch.device,
                   params: Optional[Sequence[torch.Tensor]] = None,
                   buffers: Optional[Sequence[torch.Tensor]] = None,
                   excludes: Sequence[str] = (),
                   on_op: Optional[Callable[[], None]] = None,
                   call_inputs: Sequence[torch.Tensor] = (),
                   input_names: Optional[Sequence[str]] = None,
                   ) -> CapturedModel:
    """Traces ``module(*args, **kwargs)`` once into a :class:`CapturedModel`.

    Args:
        module: the model; left unchanged.
        args, kwargs: the forward's arguments, tensors already shaped as one
            micro-batch and demoted to IPU dtypes.
        training: trace for a training model (a final loss is required).
        device: where factory calls without ``device=`` create tensors.
        params, buffers: the tensors to trace with, in the order of the
            module's unique parameters/buffers (defaults: the module's own).
        excludes: path fragments never reported as the user's source line.
        on_op: called before each torch call the model makes while traced.
        call_inputs: the user's own tensors, for plugins (``args`` are copies).
        input_names: the input tensors' names in errors ("input <i>").
    """
    param_state = _collect_state(module, "parameter")
    buffer_state = _collect_state(module, "buffer")
    params = list(params if params is not None else param_state.tensors)
    buffers = list(buffers if buffers is not None else buffer_state.tensors)
    inputs = flattenTensors((list(args), dict(kwargs)))
    trace_params = [_trace_copy(p, training) for p in params]
    trace_buffers = [b.detach().clone() for b in buffers]
    trace_inputs = _input_copies(inputs)
    versions = [t._version for t in trace_buffers + trace_inputs]
    num_p, num_b = len(params), len(buffers)
    result: Dict[str, Any] = {}

    def forward(*flat: torch.Tensor) -> List[torch.Tensor]:
        with _swapped_state((param_state, buffer_state),
                            (flat[:num_p], flat[num_p:num_p + num_b])):
            call_args, call_kwargs = rebuildStructure(
                (list(args), dict(kwargs)), iter(flat[num_p + num_b:]))
            out = module(*call_args, **call_kwargs)
        result["out"] = out
        result["flat"] = flattenTensors(out)
        return list(result["flat"])

    with _tracing_context(training, device, excludes, on_op, call_inputs), \
            integer_operands.named(num_p + num_b, input_names):
        gm = make_fx(forward, decomposition_table=TRACE_DECOMPOSITIONS,
                     pre_dispatch=True, record_stack_traces=True)(
                         *trace_params, *trace_buffers, *trace_inputs)

    rules.check_graph(gm, excludes)
    strided_inplace.check_strided_inplace(gm, excludes)
    mutated = _mutated(trace_buffers + trace_inputs, versions,
                       list(buffers) + list(inputs))
    return _finalise(gm, param_state, buffer_state, len(inputs), result,
                     mutated, training, excludes)


def _input_copies(inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The inputs to trace with: copies, so that the trace never writes the
    user's tensors. A zero-sized input is refused (an IPU has no such
    tensor)."""
    for tensor in inputs:
        if tensor.numel() == 0:
            raise rules.zero_sized_error(tensor.shape)
    return [t.detach().clone() for t in inputs]


def _mutated(traced: Sequence[torch.Tensor], versions: Sequence[int],
             originals: Sequence[torch.Tensor]) -> List[int]:
    """Indices of the buffers and inputs that the traced forward changed.

    Version counters miss kernels that write through raw pointers (the
    running statistics of batch_norm), so values are compared as well.
    """
    return [i for i, (t, v, orig) in enumerate(zip(traced, versions,
                                                   originals))
            if t._version != v or not torch.equal(t, orig.detach())]


def _finalise(gm: torch.fx.GraphModule, param_state: _StateSlots,
              buffer_state: _StateSlots, num_inputs: int,
              result: Dict[str, Any], mutated: List[int],
              training: bool, excludes: Sequence[str] = ()) -> CapturedModel:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    num_p, num_b = len(param_state.tensors), len(buffer_state.tensors)
    for i, node in enumerate(placeholders):
        node.meta["poptorch_kind"] = ("parameter" if i < num_p else
                                      "buffer" if i < num_p + num_b else
                                      "input")
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    flat_outputs = list(output_node.args[0])

    # Outputs that depend on no placeholder are host-side constants.
    graph_outputs, slots, constants = [], [], {}
    for k, out in enumerate(flat_outputs):
        placeholders_used = isinstance(out, torch.fx.Node) and any(
            a.op == "placeholder" for a in rules.ancestors([out]))
        if placeholders_used:
            slots.append(len(graph_outputs))
            graph_outputs.append(out)
        else:
            slots.append(None)
            constants[k] = result["flat"][k].detach().clone()
    num_user_outputs = len(graph_outputs)

    loss_index = None
    if training:
        loss_node = _find_final_loss(graph_outputs)
        loss_check.warn_if_loss_not_returned(loss_node, graph_outputs,
                                              excludes)
        if loss_node in graph_outputs:
            loss_index = graph_outputs.index(loss_node)
        else:
            loss_index = len(graph_outputs)
            graph_outputs.append(loss_node)
    output_node.args = (tuple(graph_outputs),)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    gm.meta["poptorch_num_user_outputs"] = num_user_outputs

    return CapturedModel(
        graph_module=gm, param_names=param_state.names,
        buffer_names=buffer_state.names, num_inputs=num_inputs,
        output_template=result["out"], output_slots=slots,
        constants=constants,
        mutated_buffers=[i for i in mutated if i < num_b],
        mutated_inputs=[i - num_b for i in mutated if i >= num_b],
        loss_index=loss_index)


def _is_identity_loss(target: object) -> bool:
    return target is torch.ops.poptorch.identity_loss.default


def _find_final_loss(outputs: List[torch.fx.Node]) -> torch.fx.Node:
    """The single loss that no other live loss consumes."""
    live = rules.ancestors(outputs)
    losses = [n for n in live if rules.is_op(n, _is_identity_loss)]
    # A loss feeding another loss is dissolved into plain ops.
    feeding = set()
    for loss in losses:
        feeding |= (rules.ancestors(loss.all_input_nodes) & set(losses))
    final = [n for n in losses if n not in feeding]
    if not final:
        raise _impl.cpp_error(
            "Couldn't find a loss in graph! A trainingModel's forward must "
            "return its loss: a torch loss (F.mse_loss, ...) or a value "
            "wrapped in poptorch.identity_loss(value, reduction=...). Use "
            "poptorch.inferenceModel for a model that only predicts.")
    if len(final) > 1:
        raise _impl.cpp_error(
            "Multiple independent losses found in graph. Graph must have one "
            "final loss. Wrap final graph loss in poptorch.identity_loss.")
    return final[0]
