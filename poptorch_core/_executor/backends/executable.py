"""How a captured graph is run: the ``interpret`` and ``compile`` backends.

``interpret`` calls the traced ``GraphModule`` directly (its generated Python
code calls the ATen ops, without ``nn.Module`` dispatch), in a copy whose
dead temporaries are written in place (``passes.in_place_temporaries``).
``compile`` hands the same graph to inductor (``compile_fx``) on the first
call, and compiles exactly once. A training micro-batch on the CPU
(:meth:`Executable.run_training`) is traced with its loss seed and its
gradients into one graph, which inductor compiles as one
(``passes.training_step``), with the optimizer's Adam update in it where the
step allows (:meth:`Executable.training_with_adam`, ``passes.fused_adam``);
other graphs that need gradients are split into a
forward and a backward graph by AOTAutograd. On the CPU, row scatter-adds
(message-passing sums, gather gradients) stay ATen ops and ``relu``'s
backward saves no boolean mask, two things inductor's generated CPU code
does slowly (``inductor.cpu``). On every device, a ``cat`` input that
inductor updates in place (a scatter's result) is copied into the cat, not
made a view of it: inductor let a later buffer take the cat's memory while
that input was still read (``passes.cat_copies``).

Why not ``torch.compile``: the captured graph is already an ATen graph with
static shapes, so dynamo would only re-trace its Python code (adding to
the first step) and check its guards before every call (adding to every
step). What those guards protect is kept another way:

* shapes and strides: the executor only feeds micro-batches of the
  compile-time input signature (``InputSignature``), made contiguous
  (``Program.device_inputs``); inductor's generated code still asserts the
  size and stride of every input, so a mismatch raises instead of computing
  on misread memory;
* dtypes, ``requires_grad`` and grad mode, which decide the kernels and
  whether AOTAutograd builds a backward graph: the compiled form is kept
  per combination of them (:func:`_variant`), and a call with a new one
  compiles again, as a failed guard would. The executor keeps them fixed
  (a training program always runs with grad enabled, an inference program
  without), so a model compiles once.
"""
import contextlib
import dataclasses
import time
from typing import (Any, Callable, Dict, Hashable, Iterator, List,
                    Optional, Sequence, Tuple)

import torch
import torch.fx
from torch._guards import TracingContext, tracing
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from .passes.fused_adam import (
    FusedAdamKey,
    FusedAdamState,
    FusedAdamStep,
    step_inputs,
    trace_fused_adam_step)
from .passes.in_place_temporaries import write_temporaries_in_place
from .inductor.isa_probe import start_vec_isa_probe
from .passes.training_step import TrainingStepGraph, trace_training_step

__all__ = ["BACKENDS", "Form", "compilation_count", "prepare_backend"]

#: The runnable forms of a graph (the ``auto`` option runs the first, then
#: the second: ``_executor.tiered``).
BACKENDS = ("interpret", "compile")


def prepare_backend(backend: str, host_device: str) -> None:
    """Starts what a backend can do before the first compilation: for
    ``compile`` on the CPU, inductor's vector-ISA check
    (``inductor.isa_probe``), which then runs while the model is traced.
    (``auto`` starts it with its background build, not while the first step's
    tracing runs.)"""
    if backend == "compile" and torch.device(host_device).type == "cpu":
        start_vec_isa_probe()


_compilations = 0

#: Inductor settings every compiled graph gets. A cast to float16 or
#: bfloat16 rounds, as it does eagerly and on the IPU: by default inductor
#: drops a down-cast followed by an up-cast inside a fused kernel, which
#: kept, for example, float32 values that a ``.half()`` should have rounded
#: (``index_add_`` of a float16 source into a float32 tensor was off by
#: up to 4e-4 relative). Random ops call ATen's kernels on the device
#: generator (``fallback_random``), as ``interpret`` does: inductor's own
#: generator would draw another stream, so a model calling ``torch.rand``
#: would compute other numbers under ``compile``, and change them when
#: ``auto`` switches.
EAGER_NUMERICS = {"emulate_precision_casts": True, "fallback_random": True}


def compilation_count() -> int:
    """Number of graphs the ``compile`` backend has compiled in this
    process."""
    return _compilations


@contextlib.contextmanager
def _without_placeholder_values(gm: torch.fx.GraphModule) -> Iterator[None]:
    """Hides the example values of ``gm``'s placeholders: ``compile_fx``
    would take those (fake tensors of the capture's own fake mode) for the
    inputs of an exported graph."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = [n.meta.pop("val", None) for n in placeholders]
    try:
        yield
    finally:
        for node, value in zip(placeholders, values):
            if value is not None:
                node.meta["val"] = value


def _compile_with_inductor(gm: torch.fx.GraphModule,
                           tensors: Sequence[torch.Tensor],
                           generated: Callable[[], None] = lambda: None
                           ) -> Callable:
    """Inductor's compiled form of ``gm`` for inputs like ``tensors``,
    ready to run: ``generated()`` is called once inductor has generated
    its code, and the C++ libraries it builds in the background are
    waited for before this returns.

    It gets what ``torch.compile`` would give it: static fake inputs of one
    fake mode with a shape environment (without one, inductor's and
    AOTAutograd's caches stand aside: every run compiles afresh), inside a
    tracing context that makes that mode the one both use."""
    global _compilations
    _compilations += 1
    from torch._inductor.compile_fx import compile_fx

    from .passes.cat_copies import copied_cat_inputs
    options: Dict[str, Any] = {}
    builds: contextlib.AbstractContextManager = contextlib.nullcontext()
    scatters: contextlib.AbstractContextManager = contextlib.nullcontext()
    if all(t.device.type == "cpu" for t in tensors):
        from .inductor.background_builds import background_cpp_builds
        from .inductor.cpu import compile_fx_options
        from .inductor.row_scatter import fast_row_scatters
        options = compile_fx_options()
        builds = background_cpp_builds()
        scatters = fast_row_scatters()
        # No wait for the ISA probe here: inductor's first request for its
        # ISA list waits for it (``inductor.isa_probe``).
    options["config_patches"] = {**EAGER_NUMERICS,
                                 **options.get("config_patches", {})}
    fake_mode = FakeTensorMode(shape_env=ShapeEnv())
    fakes = [fake_mode.from_tensor(t, static_shapes=True) for t in tensors]
    with tracing(TracingContext(fake_mode)), \
            _without_placeholder_values(gm), scatters, copied_cat_inputs(), \
            builds as libraries:
        compiled = compile_fx(gm, fakes, **options)
    generated()
    for library in libraries or ():
        library.load()
    return compiled


def _like(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor with ``tensor``'s metadata (dtype, device, size, stride,
    storage offset, ``requires_grad``) on zeroed memory of its own: an
    example that compiles to the same form, which another thread can use
    while ``tensor`` changes."""
    span = 1 + sum((size - 1) * stride for size, stride in
                   zip(tensor.shape, tensor.stride())) \
        if tensor.numel() else 0
    storage = torch.zeros(tensor.storage_offset() + span, dtype=tensor.dtype,
                          device=tensor.device).untyped_storage()
    like = torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(
        storage, tensor.storage_offset(), tensor.shape, tensor.stride())
    return like.requires_grad_(tensor.requires_grad)


@dataclasses.dataclass
class Form:
    """What one step needs compiled: :meth:`Executable.prepare_form`
    compiles it, :meth:`Executable.has_form` says whether it is.

    ``kind`` is ``"graph"`` (:meth:`Executable.prepare`), ``"training"``
    (:meth:`Executable.prepare_training`) or ``"adam"``
    (:meth:`Executable.training_with_adam`, or ``"training"`` where that
    says None); ``grad`` is the grad mode the step runs in."""
    kind: str
    tensors: List[torch.Tensor]
    grad: bool
    loss_index: int = 0
    key: Optional[FusedAdamKey] = None
    state: Optional[FusedAdamState] = None

    def like(self) -> "Form":
        """The same form on example tensors (:func:`_like`), so that
        another thread can compile it while the step's own tensors
        change."""
        state = None if self.state is None else FusedAdamState(*(
            _like(getattr(self.state, field.name))
            for field in dataclasses.fields(self.state)))
        return dataclasses.replace(
            self, tensors=[_like(t) for t in self.tensors], state=state)


def _variant(tensors: Sequence[torch.Tensor]) -> Hashable:
    """What a compiled form is specific to, besides the shapes and strides
    that the executor keeps fixed."""
    return (torch.is_grad_enabled(),
            tuple((t.dtype, t.requires_grad) for t in tensors))


class Executable:
    """A runnable form of a captured graph.

    ``run(tensors)`` takes the flat placeholder values (parameters, buffers,
    inputs) and returns the graph's outputs as a list.

    The ``compile`` backend compiles a form on its first call, or ahead
    of it (:meth:`prepare`, :meth:`prepare_training`): :attr:`compilations`
    counts the compilations, :attr:`compile_seconds` adds up their time
    (tracing the training step, inductor, and the wait for its C++ build),
    and :attr:`on_compiled`, when set, is called each time inductor has
    generated a form's code (its build may still be running).
    """

    def __init__(self, graph_module: torch.fx.GraphModule, backend: str):
        if backend not in BACKENDS:
            raise ValueError(f"Unknown simulator backend {backend!r}: "
                             f"expected one of {BACKENDS}")
        self.backend = backend
        self.graph_module = graph_module
        self._interpreted = write_temporaries_in_place(graph_module) \
            if backend == "interpret" else graph_module
        self.compilations = 0
        self.compile_seconds = 0.0
        self.on_compiled: Optional[Callable[[], None]] = None
        self._compiled: Dict[Hashable, Callable] = {}
        self._steps: Dict[Hashable, Tuple[TrainingStepGraph, Callable]] = {}
        self._adam_steps: Dict[Hashable,
                               Optional[Tuple[FusedAdamStep, Callable]]] = {}

    def run(self, tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """The graph's outputs, as a list, for ``tensors`` (parameters,
        buffers, then inputs). The ``compile`` backend compiles on the first
        call."""
        if self.backend == "interpret":
            return list(self._interpreted(*tensors))
        return list(self.prepare(tensors)(*tensors))

    def prepare(self, tensors: Sequence[torch.Tensor]) -> Callable:
        """The compiled form :meth:`run` uses for ``tensors`` (and the grad
        mode), compiled now if need be."""
        variant = _variant(tensors)
        compiled = self._compiled.get(variant)
        if compiled is None:
            start = time.perf_counter()
            compiled = self._compiled[variant] = _compile_with_inductor(
                self.graph_module, tensors, self._generated)
            self._count(start)
        return compiled

    def prepare_form(self, form: Form) -> None:
        """Compiles what a step of ``form`` runs, unless it is compiled."""
        with torch.set_grad_enabled(form.grad):
            if form.kind == "adam" and self.training_with_adam(
                    form.tensors, form.loss_index, form.key,
                    form.state) is not None:
                return
            if form.kind == "graph":
                self.prepare(form.tensors)
            else:
                self.prepare_training(form.tensors, form.loss_index)

    def has_form(self, form: Form) -> bool:
        """Whether a step of ``form`` would run without compiling."""
        with torch.set_grad_enabled(form.grad):
            variant = _variant(form.tensors)
        if form.kind == "adam":
            found = self._adam_steps.get((variant, form.key), False)
            if found is not None:
                return found is not False
        if form.kind == "graph":
            return variant in self._compiled
        return variant in self._steps

    def _generated(self) -> None:
        if self.on_compiled is not None:
            self.on_compiled()

    def _count(self, start: float) -> None:
        """Counts a compilation that began at ``start``."""
        self.compilations += 1
        self.compile_seconds += time.perf_counter() - start

    def trains_in_one_graph(self, device: torch.device) -> bool:
        """Whether :meth:`run_training` applies to tensors on ``device``:
        the ``compile`` backend on the CPU (``passes.training_step``)."""
        return self.backend == "compile" and device.type == "cpu"

    def run_training(self, tensors: Sequence[torch.Tensor], loss_index: int,
                     scale: float
                     ) -> Tuple[List[torch.Tensor],
                                List[Tuple[int, torch.Tensor]]]:
        """One micro-batch's forward and backward pass as one compiled
        graph (``passes.training_step``): the graph's outputs (not requiring
        gradients) and ``(position, gradient)`` of each placeholder of
        ``tensors`` that requires a gradient and that the loss (output
        ``loss_index``, summed, times ``scale``) depends on. Compiles on
        the first call for these dtypes and ``requires_grad`` flags."""
        step, compiled = self.prepare_training(tensors, loss_index)
        with torch.no_grad():
            flat = list(compiled(*[t.detach() for t in tensors],
                                 torch.tensor(scale, dtype=torch.float32)))
        outputs = flat[:step.num_outputs]
        return outputs, list(zip(step.grad_positions,
                                 flat[step.num_outputs:]))

    def prepare_training(self, tensors: Sequence[torch.Tensor],
                         loss_index: int
                         ) -> Tuple[TrainingStepGraph, Callable]:
        """The traced and compiled step :meth:`run_training` uses for
        ``tensors``, made now if need be."""
        variant = _variant(tensors)
        found = self._steps.get(variant)
        if found is None:
            start = time.perf_counter()
            step = trace_training_step(self.graph_module, tensors,
                                       loss_index)
            with torch.no_grad():
                compiled = _compile_with_inductor(
                    step.graph_module,
                    [t.detach() for t in tensors] + [torch.ones(())],
                    self._generated)
            found = self._steps[variant] = (step, compiled)
            self._count(start)
        return found

    def training_with_adam(self, tensors: Sequence[torch.Tensor],
                           loss_index: int, key: FusedAdamKey,
                           state: FusedAdamState
                           ) -> Optional[Callable[..., List[torch.Tensor]]]:
        """A micro-batch's forward and backward pass with the Adam update
        of the packed parameters at ``key.positions`` as one compiled
        graph (``passes.fused_adam``), compiled on the first request: call it
        as ``run(tensors, state, coefficients, scale)`` for the graph's
        outputs (the flat buffers of ``state`` are updated in place).
        None, now and for later requests, when some packed parameter gets
        no gradient (the optimizer must then skip it)."""
        cache_key = (_variant(tensors), key)
        if cache_key not in self._adam_steps:
            start = time.perf_counter()
            step = trace_fused_adam_step(self.graph_module, tensors,
                                         loss_index, key, state)
            found = None
            if step is not None:
                with torch.no_grad():
                    compiled = _compile_with_inductor(
                        step.graph_module,
                        step_inputs(tensors, step.other_positions, state),
                        self._generated)
                found = (step, compiled)
                self._count(start)
            else:
                self.compile_seconds += time.perf_counter() - start
            self._adam_steps[cache_key] = found
        found = self._adam_steps[cache_key]
        if found is None:
            return None
        step, compiled = found
        others = step.other_positions

        def run(step_tensors: Sequence[torch.Tensor],
                step_state: FusedAdamState, coefficients: torch.Tensor,
                scale: float) -> List[torch.Tensor]:
            with torch.no_grad():
                return list(compiled(*step_inputs(
                    step_tensors, others, step_state, coefficients, scale)))
        return run
