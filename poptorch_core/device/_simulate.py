"""From a :class:`StepSpec` to a :class:`SimulationReport`.

Example::

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(torch.nn.Linear(4, 2))(torch.ones(8, 4))
    >>> report = simulate(StepSpec(gm, training=False, params=[]))
    >>> report.fits, report.chip.name
    (True, 'Mk2 GC200')
"""
import operator
import os
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

from ..optim._resolve import resolve_optimizer
from .._tracing.rules import node_user_location
from . import _costs, _schedules
from ._activations import activation_peaks, checkpointed_stages
from ._liveness import GraphValues, trace_values
from ._placement import NodePlacement
from ._spec import StepSpec
from ._stamps import node_module
from ._weights import weight_bytes
from .chips import ChipModel, chip_model
from .memory import CATEGORIES, Consumer, IpuMemory
from .report import SimulationReport
from .timing import (HostIO, allreduce_seconds, serial_passes, stage_times,
                     update_seconds)

__all__ = ["simulate"]

_WEIGHT_CATEGORIES = ("parameters", "gradients", "accumulators",
                      "optimizer_state")
_TOP_CONSUMERS = 5


class _Weights:
    """Bytes of each weight, by category, and where it lives."""

    def __init__(self, spec: StepSpec, place: NodePlacement):
        placeholders = spec.placeholders
        resolved = resolve_optimizer(spec.optimizer) \
            if spec.training and spec.optimizer is not None else None
        #: ``(placeholder, bytes per category, IPU, phase)`` per weight.
        self.items: List[Tuple[torch.fx.Node, Dict[str, int], int, int]] = []
        for node, param in zip(placeholders, spec.params):
            sizes = weight_bytes(
                param.host, spec.optimizer if spec.training else None,
                spec.gradient_accumulation,
                trainable=param.trainable and spec.training,
                shape=tuple(node.meta["val"].shape), resolved=resolved)
            first = min((place.stage_of[u] for u in node.users
                         if u in place.stage_of), default=0)
            self.items.append((node, sizes, place.ipus.get(node, 0),
                               place.stages[first].phase))
        first_input = len(spec.params) + spec.num_buffers
        self.buffers = placeholders[len(spec.params):first_input]
        self.inputs = placeholders[first_input:]


def _nbytes(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    return val.numel() * val.element_size() if isinstance(
        val, torch.Tensor) else 0


def _amp_overrides(gm: torch.fx.GraphModule) -> Dict[torch.fx.Node, float]:
    """``poptorch.set_available_memory`` markers: producing op -> AMP."""
    out = {}
    for node in gm.graph.nodes:
        if "set_available_memory" in str(node.target) and node.args and \
                isinstance(node.args[0], torch.fx.Node):
            source = node.args[0]
            while source.target is operator.getitem:
                source = source.args[0]
            out[source] = float(node.args[1])
    return out


def _temporaries(spec: StepSpec, place: NodePlacement, chip: ChipModel
                 ) -> Tuple[Dict[int, Tuple[int, torch.fx.Node]],
                            Dict[torch.fx.Node, int]]:
    """Per IPU the largest capped temporary and its op; serial passes per
    op."""
    overrides = _amp_overrides(spec.graph)
    temps: Dict[int, Tuple[int, torch.fx.Node]] = {}
    passes: Dict[torch.fx.Node, int] = {}
    for node in spec.graph.graph.nodes:
        need = _costs.op_temporary_bytes(node)
        if not need:
            continue
        ipu = place.ipus.get(node, 0)
        amp = overrides.get(node, spec.amp(ipu))
        passes[node] = serial_passes(node, chip.memory_bytes, amp)
        size = min(need, int(amp * chip.memory_bytes))
        if size > temps.get(ipu, (0, None))[0]:
            temps[ipu] = (size, node)
    return temps, passes


def _weight_breakdown(weights: _Weights) -> Dict[int, Dict[str, int]]:
    """Weight categories per IPU (phased: the largest phase's share)."""
    per_phase: Dict[Tuple[int, int], Dict[str, int]] = {}
    for _, sizes, ipu, phase in weights.items:
        slot = per_phase.setdefault((ipu, phase), {})
        for key, value in sizes.items():
            slot[key] = slot.get(key, 0) + value
    out: Dict[int, Dict[str, int]] = {}
    for (ipu, _), sizes in per_phase.items():
        best = out.setdefault(ipu, {})
        if sum(sizes.values()) > sum(best.values()):
            out[ipu] = dict(sizes)
    return out


def _memory(spec: StepSpec, place: NodePlacement, chip: ChipModel,
            values: GraphValues, weights: _Weights,
            temps: Dict[int, Tuple[int, torch.fx.Node]]) -> List[IpuMemory]:
    acts = activation_peaks(values, place, spec.training,
                            spec.is_pipelined())
    by_ipu = _weight_breakdown(weights)
    result = []
    for ipu in place.ipu_ids:
        breakdown = dict.fromkeys(CATEGORIES, 0)
        breakdown.update(by_ipu.get(ipu, {}))
        breakdown["buffers"] = sum(_nbytes(n) for n in weights.buffers
                                   if place.ipus.get(n, 0) == ipu)
        breakdown["io"] = sum(_nbytes(n) for n in weights.inputs
                              if place.ipus.get(n, 0) == ipu) + sum(
            _nbytes(n) for n in _outputs(spec.graph)
            if place.ipus.get(n, 0) == ipu)
        breakdown["activations"] = acts[ipu].peak
        breakdown["stash"] = acts[ipu].stash
        breakdown["temporaries"], temp_node = temps.get(ipu, (0, None))
        memory = IpuMemory(ipu, chip.memory_bytes, breakdown)
        memory.consumers = _consumers(spec, ipu, weights, values,
                                      acts[ipu].live_at_peak,
                                      (breakdown["temporaries"], temp_node))
        result.append(memory)
    return result


def _outputs(gm: torch.fx.GraphModule) -> List[torch.fx.Node]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return [n for n in output.all_input_nodes]


def _module_of_param(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else "(model)"


def _consumers(spec: StepSpec, ipu: int, weights: _Weights,
               values: GraphValues, live: set,
               temporary: Tuple[int, Optional[torch.fx.Node]]
               ) -> List[Consumer]:
    """The modules holding most of ``ipu``'s memory."""
    found: Dict[str, Consumer] = {}

    def add(module: str, category: str, size: int,
            node: Optional[torch.fx.Node]) -> None:
        entry = found.setdefault(module, Consumer(module, 0, {}))
        entry.bytes += size
        entry.breakdown[category] = entry.breakdown.get(category, 0) + size
        if not entry.location and node is not None:
            entry.location = _short_location(
                node_user_location(node, spec.excludes))

    for (node, sizes, where, _), param in zip(weights.items, spec.params):
        if where != ipu:
            continue
        user = next(iter(node.users), None)
        for category in _WEIGHT_CATEGORIES:
            if sizes[category]:
                add(_module_of_param(param.name), category, sizes[category],
                    user)
    for key in live:
        maker = values.storages[key].node
        if maker is not None:
            add(node_module(maker) or "(model)", "activations",
                values.storages[key].nbytes, maker)
    size, node = temporary
    if node is not None:
        add(node_module(node) or "(model)", "temporaries", size, node)
    ranked = sorted(found.values(), key=lambda c: -c.bytes)
    return ranked[:_TOP_CONSUMERS]


def _short_location(text: str) -> str:
    """``file:line in func: code`` from a formatted source location; files
    below the working directory are shown relative to it."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if not lines:
        return ""
    where = lines[0][3:] if lines[0].startswith("at ") else lines[0]
    path = where.split(":", 1)[0]
    if os.path.isabs(path) and path.startswith(os.getcwd() + os.sep):
        where = os.path.relpath(path) + where[len(path):]
    return f"{where}: {lines[1]}" if len(lines) > 1 else where


def _phase_loads(spec: StepSpec, weights: _Weights, chip: ChipModel
                 ) -> Dict[int, float]:
    """Seconds to bring each phase's weights (and, training, their state)
    in from Streaming Memory and back."""
    loads: Dict[int, float] = {}
    for _, sizes, _, phase in weights.items:
        size = sizes["parameters"] + sizes["accumulators"] + \
            sizes["optimizer_state"]
        trips = 2 if spec.training else 1
        loads[phase] = loads.get(phase, 0.0) + \
            trips * size / chip.host_bandwidth
    return loads


def _plan(spec: StepSpec, stages: Sequence, weights: _Weights,
          chip: ChipModel) -> _schedules.Plan:
    count = spec.micro_batches
    if spec.is_phased():
        return _schedules.phased(stages, count, spec.training,
                                 _phase_loads(spec, weights, chip),
                                 spec.parallel_phases())
    if spec.is_pipelined() and len(stages) > 1:
        return _schedules.pipelined(stages, count, spec.training)
    return _schedules.sharded(stages, count, spec.training)


def _step_extras(spec: StepSpec, weights: _Weights, chip: ChipModel
                 ) -> Tuple[Dict[int, float], Dict[int, float]]:
    """Per IPU: optimizer update and gradient all-reduce seconds."""
    update: Dict[int, float] = {}
    reduce: Dict[int, float] = {}
    if not spec.training:
        return update, reduce
    for (_, sizes, ipu, _), param in zip(weights.items, spec.params):
        if not sizes["gradients"]:
            continue
        update[ipu] = update.get(ipu, 0.0) + update_seconds(sizes, chip)
        group = param.group_size or spec.replicas
        reduce[ipu] = reduce.get(ipu, 0.0) + allreduce_seconds(
            sizes["gradients"], group, chip)
    return update, reduce


def _micro_batch_size(weights: _Weights) -> int:
    for node in weights.inputs:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dim() > 0:
            return int(val.shape[0])
    return 1


def simulate(spec: StepSpec) -> SimulationReport:
    """The device model's estimate for one compiled model."""
    chip = chip_model(spec.ipu_version)
    place = NodePlacement.of(spec.graph, spec.blocks, spec.phase_of())
    placeholders = spec.placeholders
    trainable = [spec.training and i < len(spec.params) and
                 spec.params[i].trainable for i in range(len(placeholders))]
    values = trace_values(spec.graph, [n.meta["val"] for n in placeholders],
                          trainable)
    weights = _Weights(spec, place)
    temps, passes = _temporaries(spec, place, chip)
    memory = _memory(spec, place, chip, values, weights, temps)
    stages = stage_times(values, place, chip, passes, spec.training,
                         checkpointed_stages(place),
                         HostIO(set(weights.inputs), spec.output_share()))
    plan = _plan(spec, stages, weights, chip)
    bubble = plan.bubble_fraction if plan.schedule == "pipelined" else 0.0
    update, reduce = _step_extras(spec, weights, chip)
    plan.append_everywhere("optimizer", update)
    plan.append_everywhere("all-reduce", reduce)
    return SimulationReport(
        chip=chip, training=spec.training, memory=memory, stages=stages,
        schedule=plan.schedule, gantt=plan.bars, step_seconds=plan.makespan,
        bubble_fraction=bubble, micro_batches=spec.micro_batches,
        micro_batch_size=_micro_batch_size(weights), replicas=spec.replicas,
        optimizer_seconds=max(update.values(), default=0.0),
        allreduce_seconds=max(reduce.values(), default=0.0),
        grouped_weights=_grouped(spec, weights),
        exact_liveness=values.exact)


def _grouped(spec: StepSpec, weights: _Weights) -> Dict[str, Dict[str, int]]:
    """Replica-grouped weights: distinct values and bytes over all
    replicas (every replica holds one copy)."""
    out = {}
    for (_, sizes, _, _), param in zip(weights.items, spec.params):
        if param.groups > 1:
            out[param.name] = {
                "groups": param.groups,
                "group_size": param.group_size or spec.replicas,
                "bytes_per_copy": sizes["parameters"],
                "bytes_all_replicas": sizes["parameters"] * spec.replicas}
    return out
