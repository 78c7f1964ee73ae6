"""Training steps whose compiled graph applies the Adam update itself.

``backends._fused_adam`` traces a micro-batch's forward and backward pass
with the Adam update of the optimizer's packed group; :func:`adam_in_graph`
decides whether a training step may use it, and keeps what it needs from
one step to the next. It applies when the step is one micro-batch and the
update is the plain packed one:

* no gradient accumulation, one replica, one process (nothing to sum or
  average), weights not grouped across replicas;
* the ``compile`` backend on the CPU (``Executable.trains_in_one_graph``);
* no ``Gradient___`` anchors (the graph keeps no gradient);
* the optimizer is one Adam or AdamW group packed for torch's fused kernel,
  without gradient clipping, automatic loss scaling or float16
  accumulation (``DeviceOptimizer.fusable_adam``);
* exactly the packed parameters of that group require gradients.

Every other step runs the optimizer after the graph, and so does a model
whose loss leaves a packed parameter without gradient (the optimizer skips
such a parameter; the graph cannot). A ``compile`` step that uses it saves the
gradient copies and the separate update (``docs/design/compile_backend.rst``).
"""
import dataclasses
from typing import Any, Dict, Optional, Tuple

from ..optim._types import _OptimizerType
from ._scale_out import GradientReducer
from .backends._fused_adam import FusedAdamKey, FusedAdamState

__all__: list = []


@dataclasses.dataclass
class AdamInGraph:
    """The packed group the graph was last planned for, with its
    parameters' positions and its flat buffers (a new group, after
    ``setOptimizer`` or a state write, is planned again), and this step's
    key. The graph compiles again only when the key changes: Adam to AdamW
    or back, weight decay to or from zero."""
    packed: Any = None
    positions: Tuple[int, ...] = ()
    state: Optional[FusedAdamState] = None
    key: Optional[FusedAdamKey] = None


def _single_micro_batch(program: Any, executable: Any) -> bool:
    layout = program.layout
    return layout.gradient_accumulation == 1 and layout.replicas == 1 and \
        not program.keep_gradients and not program.state.grouped and \
        type(program.gradient_reducer) is GradientReducer and \
        executable.trains_in_one_graph(program.state.device)


def adam_in_graph(program: Any, executable: Any = None,
                  plan: Optional[AdamInGraph] = None
                  ) -> Optional[Tuple[Any, Dict[str, Any], AdamInGraph]]:
    """``(packed group, hyper-parameters, plan)`` when ``program``'s next
    training step may apply its Adam update in the compiled graph (see the
    module docstring), else None.

    By default it asks ``program``'s own executable and keeps the plan in
    ``program.adam_plan``. Given another ``executable`` (the ``auto``
    backend's compiled one, before the switch) and a fresh ``plan``, it
    answers for the step that executable would run once the optimizer's
    update is fused, without changing the program: ``plan.state`` then
    holds the current buffers, laid out as the fused ones will be."""
    if not _single_micro_batch(program, executable or program.executable):
        return None
    found = program.device_optimizer.fusable_adam(
        assume_fused=executable is not None)
    if found is None:
        return None
    packed, hp = found
    plan = program.adam_plan if plan is None else plan
    if plan.packed is not packed:
        index = {id(p): i for i, p in enumerate(program.state.params)}
        if any(id(p) not in index for p in packed.params):
            return None
        plan.packed = packed
        plan.positions = tuple(index[id(p)] for p in packed.params)
        plan.state = FusedAdamState(packed.param, packed.moments["exp_avg"],
                                    packed.moments["exp_avg_sq"],
                                    packed.steps)
    plan.key = FusedAdamKey(plan.positions,
                            packed.kind == _OptimizerType.ADAMW,
                            hp["weight_decay"] != 0)
    if not all(p.requires_grad for p in packed.params) or \
            any(p.requires_grad for p in packed.frozen):
        return None
    return packed, hp, plan
