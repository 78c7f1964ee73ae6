"""The compile-time check that every process of a run compiled the same
thing.

Processes that disagree on the replication factor, the batching, the input
shapes or the model would exchange gradients of different sizes or
meanings, or wait for ever on a collective the others never make. So at
compile time every process describes what it compiled, the descriptions
are gathered on every process, and all of them raise the same error naming
the first difference, with the values on each side.

Example::

    >>> check_same([{"replication factor": "2"}, {"replication factor": "1"}])
    Traceback (most recent call last):
    ...
    poptorch_core.errors.Error: Distributed run: the processes compiled \
different things: replication factor: 2 on rank 0, but 1 on rank 1. ...
"""
import hashlib
from typing import Any, Dict, Sequence

import torch

from .._impl import cpp_error
from .._executor.program import Program
from .._executor.state import ExecutorState

Description = Dict[str, Any]


def _graph_digest(graph_module: torch.fx.GraphModule) -> str:
    """A digest of the graph's ops (what the model computes)."""
    ops = "\n".join(f"{node.op} {node.target}"
                    for node in graph_module.graph.nodes)
    return hashlib.sha256(ops.encode()).hexdigest()[:16]


def describe(state: ExecutorState, program: Program,
             ordinal: int) -> Description:
    """What this process compiled: ``ordinal`` counts the distributed
    training models it compiled before this one."""
    layout = program.layout
    captured = program.captured
    device = program.state
    return {
        "model number": str(ordinal),
        "replication factor": str(layout.replicas),
        "gradient accumulation": str(layout.gradient_accumulation),
        "device iterations": str(layout.device_iterations),
        "input replica grouping": f"{layout.input_group_size} "
                                  f"{state.options.input_cgt}",
        "reduction type": str(program.reduction),
        "optimizer": str(program.device_optimizer.optimizer_type),
        "inputs": [f"{name}: {value!r}" for name, value in
                   zip(program.signature.names, program.signature.positional)]
                  + [f"{k}: {v!r}" for k, v in
                     sorted(program.signature.named.items())],
        "parameters": [
            f"{names[0]}: {tuple(p.shape)} {p.dtype} "
            f"requires_grad={p.requires_grad}"
            for names, p in zip(captured.param_names, device.params)],
        "buffers": [f"{names[0]}: {tuple(b.shape)} {b.dtype}" for names, b in
                    zip(captured.buffer_names, device.buffers())],
        "graph": _graph_digest(captured.graph_module),
    }


def _first_difference(mine: Any, theirs: Any) -> tuple:
    """``(mine, theirs)`` narrowed to the first differing list entry."""
    if isinstance(mine, list) and isinstance(theirs, list):
        for a, b in zip(mine, theirs):
            if a != b:
                return a, b
        return (f"{len(mine)} entries", f"{len(theirs)} entries")
    return mine, theirs


def check_same(descriptions: Sequence[Description]) -> None:
    """Raises ``poptorch.Error`` unless every process's description equals
    process 0's."""
    reference = descriptions[0]
    for rank, other in enumerate(descriptions[1:], start=1):
        for key in reference:
            if other.get(key) == reference[key]:
                continue
            ours, theirs = _first_difference(reference[key], other.get(key))
            raise cpp_error(
                "Distributed run: the processes compiled different things: "
                f"{key}: {ours} on rank 0, but {theirs} on rank {rank}. "
                "Every process must compile the same model, with the same "
                "options and input shapes, in the same order (the total "
                "replication factor is replicationFactor x processes).")

