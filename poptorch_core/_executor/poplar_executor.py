"""``PoplarExecutor``: a model wrapped to run on the simulated IPU.

The executor keeps its own copy of the weights (the "device"), compiles the
model on the first call (dispatch tracing, rule checks), and runs each call
with PopTorch's batching, output-mode and training semantics. Weights are
synchronised exactly when PopTorch synchronises them: after a training
call the host copy is stale until it is read (``host_sync``).

Everything the wrapper knows lives in one :class:`~._state.ExecutorState`;
this class is the public facade over it.
"""
import contextlib
import copy
import datetime
import functools
import time
from typing import Any, Callable, Dict, List, Optional

import torch

from .. import _impl
from .._logging import logger
from .._module_repr import module_repr
from ..annotations import PipelinedExecution, ShardedExecution
from ..enums import ConnectionType, OutputMode
from ..errors import createPoptorchError, public_class
from .._ir import Ir
from ..optim import SGD
from ..options import Options
from . import anchors, host_sync, saved_class, serialization
from .arguments import ArgsBinder, BoundArgs
from .compile import build_program
from .compile_progress import CompilationProgress
from .interrupts import StepCount
from .mode_check import warn_once_on_mode_mismatch
from .optimizer_link import OptimizerLink
from .param_proxy import ParameterProxy
from .perf import PerfCounters
from .state import ExecutorState
from .backends import prepare_backend

__all__ = ["PoplarExecutor"]

_OFFLINE_CALL_MSG = (
    "Trying to run a model on an offline device (ConnectionType.Never): use "
    "model.compile(inputs) instead of model(inputs)")
_INFERENCE_ACCUMULATION_MSG = (
    "You must set poptorch.Options().Training.gradientAccumulation to 1 or "
    "leave it as its default value (1) when running a "
    "poptorch.inferenceModel().")


def _serialised(method: Callable) -> Callable:
    """Runs ``method`` under the model's lock (see
    ``ExecutorState.serialised``)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._state.serialised():
            return method(self, *args, **kwargs)
    return locked


def _checked_options(options: Optional[Options]) -> Options:
    options = options if options is not None else Options()
    if not isinstance(options, Options):
        raise createPoptorchError(
            f"Invalid type: 'options' is of type {type(options)} "
            "(Expected poptorch.Options)")
    _check_batching(options)
    options.freeze()
    return options.clone()


def _check_batching(options: Options) -> None:
    """Settings that are each valid but do not fit together."""
    replicas, group = options.replication_factor, options.input_group_size
    if replicas % group:
        raise createPoptorchError(
            f"inputReplicaGrouping's group size ({group}) does not divide "
            f"replicationFactor ({replicas}): each input group must be the "
            f"same number of replicas. Use a group size that divides "
            f"{replicas}, or set replicationFactor to a multiple of {group}.")
    period = options.output_return_period
    steps = options.device_iterations * options.Training.gradient_accumulation
    if OutputMode(options.output_mode) == OutputMode.EveryN and steps % period:
        raise createPoptorchError(
            f"outputMode(EveryN, {period}) returns one result every {period} "
            f"micro-batches, and a call has {steps} (deviceIterations x "
            f"gradientAccumulation), which {period} does not divide: use a "
            f"period that divides {steps}.")


def _check_inference_options(options: Options) -> None:
    if options.Training.gradient_accumulation == 1:
        return
    msg = _INFERENCE_ACCUMULATION_MSG
    strategy = options.execution_strategy
    if isinstance(strategy, PipelinedExecution) and \
            not isinstance(strategy, ShardedExecution):
        msg += (" Use poptorch.Options().deviceIterations to process a "
                "sufficient number of batches each run for pipelined "
                "execution instead.")
    raise createPoptorchError(msg)


@public_class
class PoplarExecutor:
    """A model wrapped by :func:`trainingModel` or :func:`inferenceModel`.

    Call it like the model. Attribute reads are forwarded to the user model,
    so ``executor.fc.weight`` and ``executor.state_dict()`` work.

    Example::

        >>> ipu_model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
        >>> ipu_model(torch.randn(8, 4)).shape
        torch.Size([8, 2])
        >>> ipu_model.isCompiled(), ipu_model.isAttachedToDevice()
        (True, True)
    """

    def __init__(self, model: torch.nn.Module, options: Optional[Options],
                 training: bool, poptorch_version: str,
                 optimizer: Optional[torch.optim.Optimizer] = None,
                 user_model: Optional[torch.nn.Module] = None):
        options = _checked_options(options)
        state = ExecutorState(model, user_model if user_model is not None
                              else model, options, training)
        state.copy_to_host = lambda: self.copyWeightsToHost()
        self._state = state
        self._poptorch_version = poptorch_version
        self._perf = PerfCounters()
        self._binder = ArgsBinder(model)
        if training:
            if options.defaultOutputMode():
                options.outputMode(OutputMode.Final)
            if not any(True for _ in state.user_model.parameters()):
                raise createPoptorchError(
                    "poptorch.trainingModel needs a model with parameters "
                    f"to train, and this {type(state.user_model).__name__} "
                    "has none. Run it with poptorch.inferenceModel, or check "
                    "that its layers are registered as submodules (module "
                    "attributes, nn.ModuleList or nn.ModuleDict, not a "
                    "Python list).")
            if optimizer is None:
                optimizer = SGD(state.user_model.parameters(), lr=0.01)
            state.optimizer_link = OptimizerLink(state, optimizer)
        else:
            if options.defaultOutputMode():
                options.outputMode(OutputMode.All)
            _check_inference_options(options)
            if optimizer is not None:
                raise AssertionError("Optimizer should be None for inference")
        options.freeze()
        prepare_backend(options.Simulator.execution_backend,
                        options.Simulator.host_device)
        if training:
            host_sync.wrap(state.user_model,
                            sync=state.copy_weights_to_host_if_needed,
                            destroy=self.destroy)

    # --- Attribute passthrough --------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_state":
            raise AttributeError(name)
        value = getattr(self._state.user_model, name)
        if isinstance(value, torch.nn.Parameter):
            return ParameterProxy(self._state, name, value)
        return value

    def __repr__(self) -> str:
        return module_repr(self._state.user_model)

    def __reduce__(self):
        # torch.save / pickle: the model (with the device's latest weights,
        # as a plain module), the options and the optimizer; loading gives a
        # new wrapper that compiles on its first call, like the original
        # before it was compiled. The executable itself is not saved: use
        # save() / poptorch.load() for that.
        state = self._state
        optimizer = state.optimizer_link.optimizer if state.training else None
        return (_unpickle_executor, (state.training, state.user_model,
                                     state.options, optimizer,
                                     self._poptorch_version))

    @property
    def model(self) -> torch.nn.Module:
        """The user's model (its weights sync from the device on access)."""
        return self._state.user_model

    @property
    def options(self) -> Options:
        """This wrapper's own (frozen) copy of the options."""
        return self._state.options

    @property
    def per_replica_params(self) -> Dict[str, Any]:
        """Parameters given per-replica values with ``replicaGrouping``."""
        return self._state.per_replica_params

    @property
    def ir(self) -> Ir:
        """The :class:`~poptorch_core.Ir` holding the compiled graph."""
        return self._state.ir

    # --- Compilation --------------------------------------------------------
    @_serialised
    def compile(self, *args, **kwargs) -> None:
        """Traces and compiles the model for these (full-batch) inputs,
        without running it."""
        if self._state.compiled:
            logger.warning("Call to compile() ignored: the executable is "
                           "already compiled")
            return
        state = self._state
        # An offline target never runs: nothing to compile for.
        ahead = state.options.connection_type != ConnectionType.Never.value
        bound = self._binder.bind(args, kwargs)
        with CompilationProgress(state, tracing=True,
                                 backend=ahead) as progress:
            self._compile(bound)
            progress.traced()
            if ahead:
                state.program.prepare(bound)

    def _compile(self, bound: BoundArgs) -> None:
        state = self._state
        if state.training:
            self._rewrap_after_destroy()
        start = time.perf_counter()
        state.program = build_program(state, bound)
        state.compilation_time = datetime.timedelta(
            seconds=time.perf_counter() - start)
        if state.options.connection_type != ConnectionType.Never.value:
            self._attach()

    def _rewrap_after_destroy(self) -> None:
        """A destroyed training wrapper that compiles again instruments its
        model again, so that the model keeps seeing the trained weights; if
        another wrapper now owns the model, training here would update a
        private copy nobody sees, so that is an error."""
        state = self._state
        sync = state.copy_weights_to_host_if_needed
        if host_sync.wrapped_for(state.user_model, sync):
            return
        if host_sync.is_wrapped(state.user_model):
            raise createPoptorchError(
                "This trainingModel was destroyed and its model is now "
                "wrapped by another poptorch.trainingModel: call that "
                "wrapper instead (this one would train a copy of the weights "
                "that the model never sees).")
        host_sync.wrap(state.user_model, sync=sync, destroy=self.destroy)

    def compileAndExport(self, filename: str, *args, export_model: bool = True,
                         **kwargs) -> None:
        """Compiles the model for these inputs and saves it to
        ``filename`` (see :meth:`save`)."""
        self.compile(*args, **kwargs)
        self.save(filename, export_model)

    @_serialised
    def save(self, filename: str, export_model: bool = True,
             save_rng_state: bool = True) -> None:
        """Saves the compiled model to one self-describing file. With
        ``export_model`` the file also holds the model and its optimizer,
        so that :func:`poptorch.load` can rebuild the wrapper."""
        serialization.save_executor(self._state, filename, export_model,
                                     save_rng_state)

    @_serialised
    def loadExecutable(self, filename: str) -> None:
        """Loads an executable saved by :meth:`save` for this model: the
        model is compiled for the inputs stored in the file."""
        data = serialization.read_metadata(filename)
        saved_class.warn_if_other_model(filename, data.get("model_class"),
                                         self._state.user_model)
        positional, named = data["executable_inputs"]
        self._state.program, self._state.attached = None, False
        self.compile(*positional, **named)
        if "rng_state" in data:
            self.rng_state = data["rng_state"]

    # --- Running ------------------------------------------------------------
    @_serialised
    def __call__(self, *args, **kwargs) -> Any:
        state = self._state
        if state.options.connection_type == ConnectionType.Never.value:
            raise AssertionError(_OFFLINE_CALL_MSG)
        bound = self._binder.bind(args, kwargs)
        warn_once_on_mode_mismatch(state)
        tracing = not state.compiled
        with CompilationProgress(state, tracing) as progress:
            if tracing:
                self._compile(bound)
                progress.traced()
            return self._run(bound)

    def _run(self, bound: BoundArgs) -> Any:
        """One call of the compiled model (``__call__`` after tracing)."""
        state = self._state
        if not state.attached:
            self.attachToDevice()
        if not state.training:
            self._follow_trained_weights()
        program = state.program
        program.state.warn_if_host_edited()
        bound = program.signature.validate(bound)
        if state.options.popartOption("instrumentWithHardwareCycleCounter"):
            # PopTorch's backend: no cycle counters without hardware.
            raise _impl.cpp_error(_CYCLE_COUNT_HW_ONLY)
        if state.training:
            state.optimizer_link.before_run()
            self._mark_trained()
        steps = StepCount(program.layout.device_iterations) \
            if state.training else None
        try:
            with steps if steps is not None else contextlib.nullcontext():
                self._perf.start_call()
                outputs = program.run(bound, steps)
                self._perf.end_call(program.layout)
                if state.options.anchored_tensors:
                    state.anchor_memory.update(
                        anchors.read_anchors(state.options, program))
        except KeyboardInterrupt:
            if steps is None:
                raise
            raise steps.interrupted() from None
        except BaseException as error:
            if steps is not None:
                steps.note(error)
            raise
        finally:
            if state.training:
                self._mark_trained()
        return outputs

    def _mark_trained(self) -> None:
        """The host copies of the weights and of the optimizer state are
        stale: a training call ran, or is about to. Marked before the run
        too, so that an exception cannot come between the steps a call
        applied and the marking; and after it, in case a read during the
        run copied the weights back."""
        self._state.host_weights_stale = True
        self._state.optimizer_link.after_run()

    def _follow_trained_weights(self) -> None:
        """An inference model picks up weights trained by a training model
        wrapping the same user model, or a model that holds it (a wrapper
        adding the loss, as ``poptorch_geometric.with_loss`` makes)."""
        state = self._state
        version = host_sync.current_weights_version(state.user_model)
        if version != state.followed_weights_version:
            self.copyWeightsToDevice()
            state.followed_weights_version = version

    # --- Weights ------------------------------------------------------------
    @_serialised
    def copyWeightsToHost(self) -> None:
        """Copies the device weights and buffers to the host model."""
        self._state.copy_weights_to_host()

    @_serialised
    def copyWeightsToDevice(self) -> None:
        """Copies the host model's weights and buffers to the device."""
        self._state.copy_weights_to_device()

    @_serialised
    def copyNamedBuffersToDevice(self) -> None:
        """Copies only the buffers listed by
        ``Options.updatableNamedBuffers`` to the device."""
        program = self._state.require_program()
        names = self._state.options.popartOption("updatableNamedBuffers")
        if not names:
            raise createPoptorchError(
                "No named buffers marked as updatable via "
                "updatableNamedBuffers option")
        indices = [i for i, aliases in enumerate(program.captured.buffer_names)
                   if any(a in names for a in aliases)]
        program.state.copy_to_device(indices)

    @_serialised
    def load_state_dict(self, state_dict: Dict[str, Any],
                        strict: bool = True):
        """Loads ``state_dict`` into the host model and, once attached, the
        device."""
        result = self._state.user_model.load_state_dict(state_dict, strict)
        if self.isAttachedToDevice():
            self.copyWeightsToDevice()
        return result

    # --- Optimizer ----------------------------------------------------------
    @_serialised
    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Sets the optimizer (or updates its hyper-parameters on the
        device). Call it after changing the optimizer's attributes, e.g.
        after an LR scheduler step."""
        if not self._state.training:
            raise AssertionError("Optimizer should be None for inference")
        self._state.optimizer_link.set_optimizer(optimizer)

    # --- Device attachment --------------------------------------------------
    def _attach(self) -> None:
        state = self._state
        state.attached = True
        if state.optimizer_link is not None:
            state.optimizer_link.on_attach()
        if state.cached_rng_state is not None:
            state.program.rng.set_state(state.cached_rng_state)
            state.cached_rng_state = None

    @_serialised
    def attachToDevice(self) -> None:
        """Attaches to the device again after :meth:`detachFromDevice`
        (the host weights are copied to the device)."""
        program = self._state.require_program()
        if self._state.options.connection_type == \
                ConnectionType.Never.value:
            raise AssertionError(
                "Trying to attach to an offline device (ConnectionType.Never)")
        if self._state.attached:
            raise createPoptorchError("Device is already attached")
        program.state.copy_to_device()
        self._attach()

    @_serialised
    def detachFromDevice(self) -> None:
        """Detaches from the device; the weights and optimizer state are
        copied to the host first."""
        state = self._state
        program = state.require_program()
        if not state.attached:
            raise createPoptorchError("Device is not attached")
        state.cached_rng_state = program.rng.get_state()
        state.sync_to_host()
        state.attached = False
        logger.debug("Detached from device")

    def isAttachedToDevice(self) -> bool:
        """Whether the model is compiled and attached to its device."""
        return self._state.attached

    def isCompiled(self) -> bool:
        """Whether the model has been compiled."""
        return self._state.compiled

    @_serialised
    def destroy(self) -> None:
        """Drops the executable; a training wrapper also unwraps the user
        model so that it can be wrapped again."""
        state = self._state
        if state.compiled:
            state.sync_to_host()
            if state.program.tiers is not None:
                state.program.tiers.cancel()
            state.program = None
            state.attached = False
            state.ir = Ir()
        if state.training and host_sync.is_wrapped(state.user_model):
            host_sync.unwrap(state.user_model)

    # --- RNG ----------------------------------------------------------------
    @property
    def rng_state(self) -> List[int]:
        """The device RNG state, ``[seed] + state`` as PopTorch returns
        it; assign a saved one to replay random ops."""
        return self._state.require_program().rng.get_state()

    @rng_state.setter
    def rng_state(self, rng_state: List[int]) -> None:
        state = self._state
        program = state.require_program()
        if state.attached:
            program.rng.set_state(rng_state)
        else:
            state.cached_rng_state = list(rng_state)

    # --- Introspection ------------------------------------------------------
    def getAnchoredTensor(self, short_name: str) -> torch.Tensor:
        """The value of the tensor anchored as ``short_name`` with
        ``Options.anchorTensor`` after the last call."""
        memory = self._state.anchor_memory
        if short_name not in memory:
            raise AssertionError(f"No tensor with name {short_name} found.")
        return memory[short_name]

    def getTensorNames(self) -> List[str]:
        """Names of the tensors of the compiled model that can be
        anchored."""
        if not self._state.compiled:
            raise AssertionError(
                "Model must be compiled before calling getTensorNames")
        return anchors.tensor_names(self._state.program)

    def getPerfCounters(self) -> Dict[str, List[List[float]]]:
        """Host timestamps of each device iteration's input transfer,
        compute and output transfer, per input or output."""
        return self._perf.counters()

    def getHostIpuLatency(self):
        """(min, max, mean) seconds of the host-to-device transfers."""
        return self._perf.host_ipu_latency()

    def getComputeLatency(self):
        """(min, max, mean) seconds of the device computations."""
        return self._perf.compute_latency()

    def getIpuHostLatency(self):
        """(min, max, mean) seconds of the device-to-host transfers."""
        return self._perf.ipu_host_latency()

    def getLatency(self):
        """(min, max, mean) seconds from input transfer to output."""
        return self._perf.latency()

    def compilationTime(self) -> datetime.timedelta:
        """How long the compilation took: tracing, and with the
        ``compile`` backend, inductor's compilation too (in ``compile()``
        or the first call; ``compile_progress``). The ``auto`` backend's
        compilation runs in the background, which no call waits for: it
        is not counted."""
        state = self._state
        if not state.compiled:
            raise createPoptorchError(
                "Please compile the model before obtaining compilation time.")
        if not state.options.show_compilation_progress_bar:
            raise createPoptorchError(
                "Please set showCompilationProgressBar option to obtain "
                "compilation time.")
        return state.compilation_time

    def cycleCount(self) -> int:
        """Cycle count of the last run: only available on IPU hardware,
        so this always raises on the simulator."""
        if not self._state.options.popartOption(
                "instrumentWithHardwareCycleCounter", False):
            raise createPoptorchError(
                "Cycle count logging is disabled. Please set option "
                "logCycleCount to True to enable.")
        if not self._state.compiled:
            raise createPoptorchError(
                "Please run the model at least once before obtaining cycle "
                "count.")
        raise _impl.cpp_error(_CYCLE_COUNT_HW_ONLY)

    def simulationReport(self) -> Any:
        """The simulated IPU's estimate for this compiled model: memory per
        IPU, time per pipeline stage, the step's schedule and throughput
        (a ``poptorch_core.device.SimulationReport``; ``str()`` it,
        ``to_dict()`` it or ``plot(path)`` it)."""
        return self._state.require_program().estimate.report()

    def compilations(self) -> int:
        """How many times the ``compile`` backend compiled this model's
        graph (0 for the ``interpret`` backend, and for ``auto`` until it
        runs its compiled step)."""
        program = self._state.program
        return program.executable.compilations if program else 0


_CYCLE_COUNT_HW_ONLY = ("Cycle count logging is only supported on actual "
                        "IPU hardware.")


def _unpickle_executor(training: bool, model: torch.nn.Module,
                       options: Options,
                       optimizer: Optional[torch.optim.Optimizer],
                       poptorch_version: str) -> PoplarExecutor:
    """Rebuilds a pickled :class:`PoplarExecutor` (see ``__reduce__``)."""
    return PoplarExecutor(copy.copy(model), options.clone(), training,
                          poptorch_version, optimizer, user_model=model)
