"""Which IPU, pipeline stage and phase each node of a traced step runs on.

Ops take the IPU of the block they were traced in (ops before the
first block run on IPU 0); a parameter, buffer or input lives on the IPU of
its first consumer. As PopTorch counts pipeline stages, a new stage starts
each time the IPU changes between consecutive ops (or, with phased
execution, the phase).

Example::

    >>> gm = torch.fx.symbolic_trace(lambda x: x.relu() + 1)
    >>> placement = NodePlacement.of(gm, blocks={})
    >>> [(s.ipu, len(s.nodes)) for s in placement.stages]
    [(0, 2)]
"""
import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import torch.fx

from ._stamps import node_block


@dataclasses.dataclass
class Stage:
    """A run of consecutive ops on one IPU (one forward pipeline stage)."""
    index: int
    ipu: int
    nodes: List[torch.fx.Node]
    phase: int = 0


@dataclasses.dataclass
class NodePlacement:
    """The IPU of every node and the forward stages, in order."""
    ipus: Dict[torch.fx.Node, int]
    stages: List[Stage]
    stage_of: Dict[torch.fx.Node, int]

    @classmethod
    def of(cls, gm: torch.fx.GraphModule,
           blocks: Dict[str, Tuple[int, int]],
           phase_of: Optional[Any] = None) -> "NodePlacement":
        """Places ``gm``'s nodes.

        Args:
            blocks: block id -> ``(stage, ipu)`` as the execution strategy
                resolved them.
            phase_of: block id -> phase (phased strategies), or None.
        """
        ipus: Dict[torch.fx.Node, int] = {}
        phases: Dict[torch.fx.Node, int] = {}
        ops = [n for n in gm.graph.nodes
               if n.op not in ("placeholder", "output")]
        for node in ops:
            block = node_block(node)
            ipus[node] = blocks[block][1] if block in blocks else 0
            phases[node] = phase_of(block) if phase_of and block in blocks \
                else 0
        position = {node: i for i, node in enumerate(ops)}
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                first = min((position[u] for u in node.users
                             if u in position), default=None)
                ipus[node] = ipus[ops[first]] if first is not None else 0
        stages: List[Stage] = []
        stage_of: Dict[torch.fx.Node, int] = {}
        for node in ops:
            if not stages or (stages[-1].ipu, stages[-1].phase) != \
                    (ipus[node], phases[node]):
                stages.append(Stage(len(stages), ipus[node], [],
                                    phases[node]))
            stages[-1].nodes.append(node)
            stage_of[node] = stages[-1].index
        if not stages:
            stages.append(Stage(0, 0, []))
        return cls(ipus, stages, stage_of)

    @property
    def ipu_ids(self) -> List[int]:
        """The IPUs used, in increasing order."""
        return sorted(set(self.ipus.values()) | {s.ipu for s in self.stages})
