"""Peak live activations per IPU, from live ranges over the traced step.

Each storage the step allocates is live on an IPU from the first to the
last op on that IPU that touches it (a value used on another IPU is copied
there over IPU-Links and is live there too). In training, what autograd
saves stays live until the end of the forward on the IPU of the op that
saved it, and the backward needs one op's gradients on top; with
recomputation checkpoints in a stage only the checkpoints and the stage's
inputs are kept (see :mod:`.memory`).

Example::

    >>> gm = torch.fx.symbolic_trace(lambda x: (x * 2).relu().sum())
    >>> values = trace_values(gm, [(256,)], [False])
    >>> place = NodePlacement.of(gm, {})
    >>> activation_peaks(values, place, training=False)[0].peak
    2048
"""
import dataclasses
from typing import Dict, List, Set, Tuple

import torch
import torch.fx

from ._liveness import GraphValues, trace_values  # noqa: F401 (doctest)
from ._placement import NodePlacement

_CHECKPOINT = "recomputation_checkpoint"


@dataclasses.dataclass
class IpuActivations:
    """Activation memory of one IPU.

    Attributes:
        peak: the largest live total over the step.
        live_at_peak: storage keys live at that moment.
        stash: pipelined training: copies kept for micro-batches in flight.
    """
    peak: int = 0
    live_at_peak: Set[int] = dataclasses.field(default_factory=set)
    stash: int = 0


def _is_checkpoint(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and \
        _CHECKPOINT in str(getattr(node.target, "__name__", node.target))


def checkpointed_stages(place: NodePlacement) -> Set[int]:
    """Stages holding a ``recomputationCheckpoint``."""
    return {place.stage_of[n] for n in place.stage_of if _is_checkpoint(n)}


def _ranges(values: GraphValues, place: NodePlacement
            ) -> Dict[Tuple[int, int], List[int]]:
    """``(storage, ipu)`` -> positions of the ops on ``ipu`` that make or
    touch it (an op's scratch memory is made and dropped by the op)."""
    out: Dict[Tuple[int, int], List[int]] = {}
    position = {node: pos for pos, node in enumerate(values.nodes)}
    for pos, node in enumerate(values.nodes):
        ipu = place.ipus.get(node, 0)
        for key in values.touches.get(node, ()):
            out.setdefault((key, ipu), []).append(pos)
    for key, info in values.storages.items():
        if info.node in position:
            ipu = place.ipus.get(info.node, 0)
            out.setdefault((key, ipu), []).append(position[info.node])
    return out


def kept_for_backward(values: GraphValues, place: NodePlacement
                      ) -> Dict[int, torch.fx.Node]:
    """Saved storages the backward finds in memory (not recomputed)."""
    checkpointed = checkpointed_stages(place)
    kept = {}
    for key, saver in values.saved.items():
        if place.stage_of.get(saver) not in checkpointed:
            kept[key] = saver
            continue
        maker = values.storages[key].node
        if maker is None or _is_checkpoint(maker) or \
                place.stage_of.get(maker) != place.stage_of.get(saver):
            kept[key] = saver  # a checkpoint or one of the stage's inputs
    return kept


def _sweep(intervals: List[Tuple[int, int, int, int]]
           ) -> Tuple[int, Set[int]]:
    """Peak of ``(start, end, bytes, key)`` intervals and who is live."""
    events = sorted([(s, 0, b, k) for s, _, b, k in intervals] +
                    [(e, 1, b, k) for _, e, b, k in intervals])
    live, peak, peak_set, current = 0, 0, set(), set()
    for _, closing, size, key in events:
        if closing:
            live -= size
            current.discard(key)
            continue
        live += size
        current.add(key)
        if live > peak:
            peak, peak_set = live, set(current)
    return peak, peak_set


def _intervals(values: GraphValues, place: NodePlacement, training: bool
               ) -> Dict[int, List[Tuple[int, int, int, int]]]:
    end = len(values.nodes)
    kept = kept_for_backward(values, place) if training else {}
    by_ipu: Dict[int, List[Tuple[int, int, int, int]]] = {}
    inputs = set(values.placeholders.values())
    for (key, ipu), positions in _ranges(values, place).items():
        if key in inputs:
            continue
        stop = max(positions) + 0.5
        if key in values.outputs or (key in kept and
                                     place.ipus.get(kept[key]) == ipu):
            stop = end
        size = values.storages[key].nbytes
        by_ipu.setdefault(ipu, []).append((min(positions), stop, size, key))
    return by_ipu


def _segments(values: GraphValues, place: NodePlacement
              ) -> Dict[torch.fx.Node, Tuple[int, int]]:
    """node -> (stage, checkpoint segment): what is recomputed together."""
    index, segment = {}, 0
    for node in values.nodes:
        segment += _is_checkpoint(node)
        index[node] = (place.stage_of.get(node, 0), segment)
    return index


def _backward_intervals(values: GraphValues, place: NodePlacement,
                        kept: Dict[int, torch.fx.Node]
                        ) -> Dict[int, List[Tuple[int, int, int, int]]]:
    """Live ranges on the backward's timeline (ops in reverse order): kept
    values until their op's backward, recomputed ones from the start of
    their segment's backward, and each computed value's gradient from its
    last consumer's backward to its producer's."""
    end = len(values.nodes)
    back = {node: end - 1 - pos for pos, node in enumerate(values.nodes)}
    segments = _segments(values, place)
    segment_start: Dict[Tuple[int, int], int] = {}
    for node, slot in segments.items():
        segment_start[slot] = min(segment_start.get(slot, end), back[node])
    last_use: Dict[int, int] = {}
    for node in values.nodes:
        for key in values.touches.get(node, ()):
            last_use[key] = min(last_use.get(key, end), back[node])
    inputs = set(values.placeholders.values())
    by_ipu: Dict[int, List[Tuple[int, int, int, int]]] = {}

    def add(node, start, key, size):
        by_ipu.setdefault(place.ipus.get(node, 0), []).append(
            (start, back[node] + 0.5, size, key))

    for key, saver in values.saved.items():
        if key in inputs:
            continue
        start = 0 if key in kept else segment_start[segments[saver]]
        add(saver, start, key, values.storages[key].nbytes)
    for key in values.grad_keys - inputs:
        producer = values.storages[key].node
        if producer in back:
            # Gradients are keyed apart from the values they belong to.
            add(producer, last_use.get(key, back[producer]), -1 - key,
                values.storages[key].nbytes)
    return by_ipu


def activation_peaks(values: GraphValues, place: NodePlacement,
                     training: bool, pipelined: bool = False
                     ) -> Dict[int, IpuActivations]:
    """Peak activation memory of each IPU used."""
    forward = _intervals(values, place, training)
    kept = kept_for_backward(values, place) if training else {}
    backward = _backward_intervals(values, place, kept) if training else {}
    result = {}
    for ipu in place.ipu_ids:
        peak, live = _sweep(forward.get(ipu, []))
        back_peak, back_live = _sweep(backward.get(ipu, []))
        if back_peak > peak:
            peak, live = back_peak, {k for k in back_live if k >= 0}
        result[ipu] = IpuActivations(peak, live)
    if training and pipelined and len(place.stages) > 1:
        for ipu, stash in stash_bytes(values, place, kept).items():
            result[ipu].stash += stash
    return result


def stash_bytes(values: GraphValues, place: NodePlacement,
                kept: Dict[int, torch.fx.Node]) -> Dict[int, int]:
    """Per IPU: kept values of each stage times the other micro-batches in
    flight between its forward and its backward."""
    stages = len(place.stages)
    params = set(values.placeholders.values()) - _input_keys(values)
    per_stage: Dict[int, int] = {}
    for key, saver in kept.items():
        if key in params:
            continue
        stage = place.stage_of.get(saver, 0)
        per_stage[stage] = per_stage.get(stage, 0) + \
            values.storages[key].nbytes
    out: Dict[int, int] = {}
    for stage, size in per_stage.items():
        in_flight = 2 * (stages - 1 - stage)
        ipu = place.stages[stage].ipu
        out[ipu] = out.get(ipu, 0) + in_flight * size
    return out


def _input_keys(values: GraphValues) -> Set[int]:
    """Storages of the micro-batch inputs (not weights or buffers)."""
    return {key for node, key in values.placeholders.items()
            if node.meta.get("poptorch_kind", "input") == "input"}
