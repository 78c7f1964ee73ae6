"""A compiled model and one call's execution on the simulated IPU.

A :class:`Program` is what ``compile`` produces: the captured graph, its
runnable form, the device state and the batch layout. :meth:`Program.run`
executes one call: for each device iteration, each accumulation
step and each replica, the graph runs on that replica's micro-batch; a
training call back-propagates the final loss of each micro-batch (times the
loss scaling), reduces the gradients over ``G x R`` by mean or sum and
applies one optimizer step per device iteration.

A micro-batch known to hold padding only (its inputs' padding masks,
``ICustomArgParser.paddingMask``, mark no real entry) still runs forward,
for its outputs, but adds no gradient and does not count: ``Mean`` divides
by the number of real micro-batches, and a device iteration without one
takes no optimizer step, as an eager loop that never saw those batches.
"""
import contextlib
import dataclasses
from typing import (Any, Callable, Dict, FrozenSet, List, Optional,
                    Sequence, Set, Tuple)

import torch

from .. import _dtypes
from .._args_parser import flattenTensors, rebuildStructure
from ..enums import OutputMode, ReductionType
from ..optim._types import OptimizerType
from ..errors import createPoptorchError
from .._tracing.capture import CapturedModel
from .arguments import BoundArgs, InputSignature
from .backends.executable import Executable, Form
from .backends.passes.fused_adam import (FusedAdamKey, FusedAdamState,
                                         adam_coefficients)
from .micro_batches import BatchLayout, OutputCollector
from .device_state import DeviceRng, DeviceState
from .interrupts import BufferCheckpoint, StepCount
from .replica_weights import reduce_within_groups
from .scale_out import GradientReducer

_BACKWARD_ERROR = (
    "backward() cannot be called explicitly on outputs of a PopTorch model. "
    "If you're using a trainingModel, the backwards pass is performed "
    "automatically when invoking the model. If you're using an "
    "inferenceModel, you should use a trainingModel instead.")


def _no_backward(*args, **kwargs):
    raise createPoptorchError(_BACKWARD_ERROR)


def _accumulate_grad(param: torch.Tensor, grad: torch.Tensor) -> None:
    """Adds ``grad`` to ``param.grad`` as autograd's ``AccumulateGrad``
    does: the first gradient becomes ``.grad`` (laid out like ``param``),
    later ones are added to it in place."""
    if param.grad is None:
        if grad.stride() != param.stride():
            grad = torch.empty_like(param).copy_(grad)
        param.grad = grad
    else:
        param.grad.add_(grad)



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

@dataclasses.dataclass
class Program:
    """Everything needed to run a compiled model."""
    captured: CapturedModel
    executable: Executable
    state: DeviceState
    rng: DeviceRng
    layout: BatchLayout
    signature: InputSignature
    output_mode: OutputMode
    output_period: int
    training: bool
    reduction: ReductionType = ReductionType.Mean
    device_optimizer: Any = None
    #: Graph outputs that may alias a placeholder (returned input, weight,
    #: or a view of one): copied before they are returned.
    output_aliases: Sequence[bool] = ()
    #: Whether the graph draws random numbers (the device RNG is swapped
    #: in only then).
    uses_rng: bool = True
    #: The full-batch inputs of the compilation, ``(positional, named)``.
    saved_inputs: Any = None
    #: The forward's name for each input tensor (``flat_input_names``).
    input_names: List[str] = dataclasses.field(default_factory=list)
    #: Inputs already warned about for float64 values beyond float32.
    overflow_warned: Set[str] = dataclasses.field(default_factory=set)
    #: Keep the reduced gradients of the last optimizer step (for
    #: ``Gradient___<name>`` anchors).
    keep_gradients: bool = False
    last_gradients: Dict[int, torch.Tensor] = dataclasses.field(
        default_factory=dict)
    #: Inputs given as int64 whose graph placeholder only widens them back
    #: to int64: they skip the int32 round trip (``passes.wide_inputs``).
    wide_inputs: FrozenSet[int] = frozenset()
    #: The device model's estimate (``_executor.simulation``).
    estimate: Any = None
    #: Reduces each device iteration's gradients over the replicas (of
    #: other processes too, in a distributed run).
    gradient_reducer: GradientReducer = dataclasses.field(
        default_factory=GradientReducer)
    #: What a step that applies its Adam update in the compiled graph
    #: needs (:meth:`Program.adam_in_graph`).
    adam_plan: AdamInGraph = dataclasses.field(default_factory=AdamInGraph)
    #: The ``auto`` backend: runs ``interpret`` until the ``compile``
    #: backend's step, built in the background, takes over
    #: (``tiered.TieredBackend``); None for the other backends.
    tiers: Any = None
    #: The buffers a training step writes, as they were before it (put
    #: back when the step is dropped).
    _buffers_before: BufferCheckpoint = dataclasses.field(init=False,
                                                          repr=False)

    def __post_init__(self) -> None:
        self._buffers_before = BufferCheckpoint(
            self.captured.mutated_buffers if self.training else ())

    # --- Inputs -------------------------------------------------------------
    def device_inputs(self, flat: List[torch.Tensor]) -> List[torch.Tensor]:
        """The call's input tensors with IPU dtypes on the host device
        (int64 inputs the graph only widens stay int64, range-checked)."""
        out = []
        for i, tensor in enumerate(flat):
            self.layout.check_divisible(tensor)
            out.append(_dtypes.to_ipu(tensor.detach(), f"Input {i}",
                                      self.state.device,
                                      keep_int64=i in self.wide_inputs
                                      ).contiguous())
            if tensor.dtype == torch.float64:
                _dtypes.warn_if_overflowed(tensor, out[-1], repr(
                    self.input_names[i]) if i < len(self.input_names) else
                    str(i), self.overflow_warned)
        return out

    # --- Running ------------------------------------------------------------
    def run(self, bound: BoundArgs, steps: Optional[StepCount] = None
            ) -> Any:
        """One call; a training call counts its optimizer steps in
        ``steps`` (for the exception that stops it, ``interrupts``)."""
        if self.tiers is not None:
            self.tiers.before_call(self, bound)
        masks: Optional[List[torch.Tensor]] = [] if self.training else None
        host_inputs = flattenTensors(bound.as_structure(),
                                     padding_masks=masks)
        inputs = self.device_inputs(host_inputs)
        splits = [self.layout.split(t) for t in inputs]
        collectors = [OutputCollector(self.layout, self.output_mode,
                                      self.output_period)
                      for _ in range(self.captured.num_user_outputs)]
        with self.rng.active() if self.uses_rng else contextlib.nullcontext():
            if self.training:
                padding = self.layout.padding_only(masks)
                # The device trains whatever the host's grad mode (and the
                # compiled graph was built for grad mode on).
                with torch.enable_grad():
                    self._run_training(splits, collectors, steps or StepCount(
                        self.layout.device_iterations), padding)
            else:
                with torch.no_grad():
                    self._run_inference(splits, collectors)
        self._write_back_inputs(host_inputs, inputs)
        return self._build_outputs(collectors)

    def prepare(self, bound: BoundArgs) -> None:
        """Compiles, without running anything, what the first run of
        ``bound`` would compile: the ``compile`` backend's form of the
        step (``model.compile()``, as PopTorch compiles everything there;
        the ``auto`` backend starts its background build instead)."""
        if self.tiers is not None:
            self.tiers.start(self, bound)
        elif self.executable.backend == "compile":
            self.executable.prepare_form(
                self.step_form(bound, self.executable))

    def step_form(self, bound: BoundArgs, executable: Executable) -> Form:
        """What ``executable``, a ``compile`` one, compiles for a step of
        ``bound``'s first micro-batch. For another executable than the
        program's own (``auto`` before its switch), the step as it will
        run after the switch, the optimizer's update fused."""
        inputs = self.device_inputs(flattenTensors(bound.as_structure()))
        splits = [self.layout.split(t) for t in inputs]
        tensors = self._step_tensors(splits, 0, 0, 0)
        if not self.training:
            return Form("graph", tensors, grad=False)
        loss_index = self.captured.loss_index
        ahead = executable is not self.executable
        found = self.adam_in_graph(executable if ahead else None,
                                   AdamInGraph() if ahead else None)
        if found is not None:
            plan = found[2]
            return Form("adam", self._adam_tensors(splits, 0), True,
                        loss_index, plan.key, plan.state)
        return Form("training" if self._trains_in_one_graph(executable)
                    else "graph", tensors, True, loss_index)

    def _step_tensors(self, splits, iteration, step, replica
                      ) -> List[torch.Tensor]:
        """The graph's placeholder values for one micro-batch: a replica's
        parameters and buffers, then its inputs."""
        return (self.state.replica_params(replica) +
                self.state.buffers(replica) +
                self._micro_inputs(splits, iteration, step, replica))

    def _trains_in_one_graph(self, executable: Optional[Executable] = None
                             ) -> bool:
        # Replica-grouped weights run as views of one tensor per group,
        # whose gradients only autograd routes to it.
        return not self.state.grouped and (
            executable or self.executable).trains_in_one_graph(
                self.state.device)

    def _adam_tensors(self, splits, iteration: int) -> List[torch.Tensor]:
        """The placeholders of a step whose graph applies the Adam update
        (one replica, weights not grouped)."""
        return (self.state.params + self.state.buffers(0) +
                self._micro_inputs(splits, iteration, 0, 0))

    def _micro_inputs(self, splits, iteration, step, replica):
        index = self.layout.micro_index(iteration, step, replica)
        micro = [split[index] for split in splits]
        if self.captured.mutated_inputs and \
                not self.layout.is_last_reader(replica):
            # Replicas of one input group must all see the unmodified data:
            # all but the last to run modify copies, and the last one's
            # changes reach the caller.
            micro = [m.clone() for m in micro]
        return micro

    def _collect(self, collectors, outputs, iteration, step, replica):
        for collector, out in zip(collectors, outputs):
            if collector.wants(iteration, step):
                collector.add(replica, out.detach())

    def _run_inference(self, splits, collectors) -> None:
        layout = self.layout
        for iteration in range(layout.device_iterations):
            for replica in range(layout.replicas):
                outputs = self.executable.run(
                    self._step_tensors(splits, iteration, 0, replica))
                self._collect(collectors, outputs, iteration, 0, replica)

    def _run_training(self, splits, collectors, steps: StepCount,
                      padding: Optional[List[bool]] = None) -> None:
        """One optimizer step per device iteration. An exception (Ctrl-C,
        any signal handler's, the model's) stops the call between steps: a
        step is applied whole or not at all (``interrupts``). ``padding``:
        which micro-batches hold padding only (``BatchLayout.padding_only``),
        None when none is known to."""
        try:
            for iteration in range(self.layout.device_iterations):
                real = self._real_replicas(padding, iteration)
                # Automatic loss scaling may change the scale after a step.
                scale = float(self.device_optimizer.loss_scaling)
                step = self._adam_in_graph_step(splits, iteration, scale) \
                    if all(all(r) for r in real) else None
                if step is not None:
                    outputs = steps.apply(step)
                    self._collect(collectors, outputs, iteration, 0, 0)
                    continue
                self._buffers_before.save(self.state)
                self._accumulate(splits, collectors, iteration, scale, real)
                divisor = self._reduce(real)
                steps.apply(lambda: self._apply(divisor, scale),
                            self._buffers_before)
        except BaseException:
            steps.whole(self._drop_partial_step)
            raise

    def _drop_partial_step(self) -> None:
        """Undoes what a step that stopped before its update did: its
        gradients, and the buffers its forward passes wrote."""
        for param in self.state.params:
            param.grad = None
        self._buffers_before.restore(self.state)

    def adam_in_graph(self, executable: Optional[Executable] = None,
                      plan: Optional[AdamInGraph] = None
                      ) -> Optional[Tuple[Any, Dict[str, Any], AdamInGraph]]:
        """``(packed group, hyper-parameters, plan)`` when the next training
        step may apply its Adam update in the compiled graph
        (``backends/passes/fused_adam.py``), else None. It may when the
        step is one micro-batch and the update is the plain packed one:

        * no gradient accumulation, one replica, one process (nothing to
          sum or average), weights not grouped across replicas;
        * the ``compile`` backend on the CPU
          (``Executable.trains_in_one_graph``);
        * no ``Gradient___`` anchors (the graph keeps no gradient);
        * the optimizer is one Adam or AdamW group packed for torch's fused
          kernel, without gradient clipping, automatic loss scaling or
          float16 accumulation (``DeviceOptimizer.fusable_adam``);
        * exactly the packed parameters of that group require gradients
          (the optimizer skips a parameter without gradient; the graph
          cannot).

        By default it asks the program's own executable and keeps the plan
        in ``adam_plan``. Given another ``executable`` (the ``auto``
        backend's compiled one, before the switch) and a fresh ``plan``, it
        answers for the step that executable would run once the
        optimizer's update is fused, without changing the program:
        ``plan.state`` then holds the current buffers, laid out as the
        fused ones will be."""
        layout = self.layout
        # A distributed run's reducer (a subclass) sums over processes:
        # only the plain one has nothing to reduce.
        if layout.gradient_accumulation != 1 or layout.replicas != 1 or \
                self.keep_gradients or \
                type(self.gradient_reducer) is not GradientReducer or \
                not self._trains_in_one_graph(executable):
            return None
        found = self.device_optimizer.fusable_adam(
            assume_fused=executable is not None)
        if found is None:
            return None
        packed, hp = found
        plan = self.adam_plan if plan is None else plan
        if plan.packed is not packed:
            index = {id(p): i for i, p in enumerate(self.state.params)}
            if any(id(p) not in index for p in packed.params):
                return None
            plan.packed = packed
            plan.positions = tuple(index[id(p)] for p in packed.params)
            plan.state = FusedAdamState(
                packed.param, packed.moments["exp_avg"],
                packed.moments["exp_avg_sq"], packed.steps)
        plan.key = FusedAdamKey(plan.positions,
                                packed.kind == OptimizerType.ADAMW,
                                hp["weight_decay"] != 0)
        if not all(p.requires_grad for p in packed.params) or \
                any(p.requires_grad for p in packed.frozen):
            return None
        return packed, hp, plan

    def _adam_in_graph_step(self, splits, iteration: int, scale: float
                            ) -> Optional[Callable[[], List[torch.Tensor]]]:
        """One device iteration as one compiled graph, the Adam update
        included (:meth:`Program.adam_in_graph`), compiled if need be: a
        function that runs it and returns the graph's outputs; None when the
        step needs the optimizer."""
        found = self.adam_in_graph()
        if found is None:
            return None
        packed, hp, plan = found
        tensors = self._adam_tensors(splits, iteration)
        run = self.executable.training_with_adam(
            tensors, self.captured.loss_index, plan.key, plan.state)
        if run is None:
            return None
        coefficients = adam_coefficients(
            hp["lr"], hp["betas"], hp["eps"], hp["weight_decay"],
            packed.step_count + 1, scale)

        def step() -> List[torch.Tensor]:
            outputs = run(tensors, plan.state, coefficients, scale)
            self.device_optimizer.record_fused_step(packed)
            return outputs
        return step

    def _real_replicas(self, padding: Optional[List[bool]],
                       iteration: int) -> List[List[bool]]:
        """``[step][replica]``: whether that micro-batch of ``iteration``
        is real (not padding only)."""
        layout = self.layout
        return [[padding is None or
                 not padding[layout.micro_index(iteration, step, replica)]
                 for replica in range(layout.replicas)]
                for step in range(layout.gradient_accumulation)]

    def _accumulate(self, splits, collectors, iteration: int,
                    scale: float, real: List[List[bool]]) -> None:
        """Forward of every micro-batch of one iteration, and backward of
        the real ones (``real[step][replica]``)."""
        layout = self.layout
        for step in range(layout.gradient_accumulation):
            for replica in range(layout.replicas):
                outputs = self._forward_backward(
                    self._step_tensors(splits, iteration, step, replica),
                    scale, real[step][replica])
                self._collect(collectors, outputs, iteration, step, replica)

    def _forward_backward(self, tensors: List[torch.Tensor], scale: float,
                          real: bool = True) -> List[torch.Tensor]:
        """Runs one micro-batch and, when it is ``real``, adds its
        gradients (of the final loss, summed, times ``scale``) to the
        parameters' ``.grad``; returns the graph's outputs."""
        loss_index = self.captured.loss_index
        if self._trains_in_one_graph():
            # A padding-only micro-batch runs the same compiled step (a
            # forward-only form would be one more compilation) and its
            # gradients are dropped.
            outputs, grads = self.executable.run_training(
                tensors, loss_index, scale)
            for position, grad in grads if real else ():
                _accumulate_grad(tensors[position], grad)
            return outputs
        outputs = self.executable.run(tensors)
        if not real:
            return outputs
        loss = outputs[loss_index]
        # A "none"-reduced final loss back-propagates ones.
        seed = loss if loss.dim() == 0 else loss.sum()
        if seed.requires_grad:
            (seed * scale if scale != 1.0 else seed).backward()
        return outputs

    def _reduce(self, real: List[List[bool]]) -> Optional[float]:
        """Reduces the accumulated gradients of the real micro-batches
        (``real[step][replica]``, over replica groups and processes);
        returns what the optimizer divides their sum by, None when no
        micro-batch was real. Left interruptible: a collective that hangs
        must not hold Ctrl-C."""
        params, layout = self.state.params, self.layout
        per_replica = [sum(column) for column in zip(*real)]
        if self.state.grouped and self.reduction == ReductionType.Mean:
            reduce_within_groups(params, self.state.grouped, per_replica)
        return self.gradient_reducer.reduce(params, layout, self.reduction,
                                            sum(per_replica))

    def _apply(self, divisor: Optional[float], scale: float) -> None:
        """One optimizer update from the reduced gradients; none when
        ``divisor`` is None (no real micro-batch: the step is skipped
        whole, no weight decay, momentum or step count)."""
        params = self.state.params
        if divisor is None:
            for param in params:
                param.grad = None
            return
        self.last_gradients = {
            i: p.grad.detach().clone() / (divisor * scale)
            for i, p in enumerate(params) if p.grad is not None} \
            if self.keep_gradients else {}
        self.device_optimizer.step(float(divisor))

    def _write_back_inputs(self, host_inputs, inputs) -> None:
        for i in self.captured.mutated_inputs:
            if inputs[i] is not host_inputs[i]:
                with torch.no_grad():
                    host_inputs[i].copy_(inputs[i].to(host_inputs[i].dtype))

    # --- Outputs ------------------------------------------------------------
    def _build_outputs(self, collectors: List[OutputCollector]) -> Any:
        captured = self.captured
        values = []
        for k, slot in enumerate(captured.output_slots):
            if slot is None:
                values.append(captured.constants[k])
                continue
            out = collectors[slot].combine(self.output_aliases[slot])
            out = _dtypes.output_to_host(out, f"Output {k}")
            out.backward = _no_backward
            values.append(out)
        if captured.output_template is None:
            return None
        return rebuildStructure(captured.output_template, iter(values))
