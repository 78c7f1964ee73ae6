"""``PoplarExecutor``: a model wrapped to run on the simulated IPU (spec 4).

The executor keeps its own copy of the weights (the "device"), compiles the
model on the first call (dispatch tracing, rule checks), and runs each call
with PopTorch's batching, output-mode and training semantics. Weights are
synchronised exactly when PopTorch synchronises them (spec 4.4).
"""
import datetime
import time
from typing import Any, Dict, List, Optional

import torch

from .. import _impl
from .._logging import logger
from .._printing import module_repr
from ..enums import ConnectionType, OutputMode
from ..errors import NO_EXECUTABLE_ERR, createPoptorchError
from ..options import Options
from ..tracing.ir import Ir
from . import _host_sync
from ._args import ArgsBinder, BoundArgs
from ._batching import BatchLayout
from ._optimizer_link import OptimizerLink
from ._perf import PerfCounters
from ._program import Program

__all__ = ["PoplarExecutor"]

_OFFLINE_CALL_MSG = (
    "Trying to run a model on an offline device (ConnectionType.Never): use "
    "model.compile(inputs) instead of model(inputs)")


class PoplarExecutor:
    """A model wrapped by :func:`trainingModel` or :func:`inferenceModel`.

    Call it like the model. Attribute reads are forwarded to the user model,
    so ``executor.fc.weight`` and ``executor.state_dict()`` work.
    """

    def __init__(self, model: torch.nn.Module, options: Optional[Options],
                 training: bool, poptorch_version: str,
                 optimizer: Optional[torch.optim.Optimizer] = None,
                 user_model: Optional[torch.nn.Module] = None):
        options = options if options is not None else Options()
        if not isinstance(options, Options):
            raise createPoptorchError(
                f"Invalid type: 'options' is of type {type(options)} "
                "(Expected poptorch.Options)")
        options._freeze()
        options = options.clone()
        self._user_model = user_model if user_model is not None else model
        self._model = model
        self._training = training
        self._poptorch_version = poptorch_version
        self._options = options
        self._program: Optional[Program] = None
        self._is_attached = False
        self._dirty_host_weights = False
        self._trained_weights_version = None
        self._cached_rng_state: Optional[List[int]] = None
        self._anchor_memory: Dict[str, torch.Tensor] = {}
        self._perf = PerfCounters()
        self._compilation_time: Optional[datetime.timedelta] = None
        self._ir = Ir()
        self.per_replica_params: Dict[str, Any] = {}
        self._binder = ArgsBinder(self._model)
        self._optimizer_link: Optional[OptimizerLink] = None

        if training:
            if options.defaultOutputMode():
                options.outputMode(OutputMode.Final)
            if optimizer is None:
                from .. import optim
                optimizer = optim.SGD(self._user_model.parameters(), lr=0.01)
            self._optimizer_link = OptimizerLink(self, optimizer)
        else:
            if options.defaultOutputMode():
                options.outputMode(OutputMode.All)
            if options.Training.gradient_accumulation != 1:
                msg = ("You must set poptorch.Options().Training."
                       "gradientAccumulation to 1 or leave it as its default "
                       "value (1) when running a poptorch.inferenceModel().")
                from ..annotations import PipelinedExecution, ShardedExecution
                strategy = options._execution_strategy
                if isinstance(strategy, PipelinedExecution) and \
                        not isinstance(strategy, ShardedExecution):
                    msg += (" Use poptorch.Options().deviceIterations to "
                            "process a sufficient number of batches each run "
                            "for pipelined execution instead.")
                raise createPoptorchError(msg)
            assert optimizer is None, "Optimizer should be None for inference"
        self._inherit_anchor_modes()
        options._freeze()
        if training:
            _host_sync.wrap(self._user_model, self)

    def _inherit_anchor_modes(self) -> None:
        for anchor in self._options.anchored_tensors.values():
            if anchor[1]:  # no mode given: follow the model's
                anchor[2] = self._options.output_mode
                anchor[3] = self._options.output_return_period

    # --- Attribute passthrough --------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_user_model", "_model"):
            raise AttributeError(name)
        value = getattr(self._user_model, name)
        if isinstance(value, torch.nn.Parameter):
            from ._param_proxy import ParameterProxy
            return ParameterProxy(self, name, value)
        return value

    def __repr__(self) -> str:
        return module_repr(self._user_model)

    @property
    def model(self) -> torch.nn.Module:
        return self._user_model

    @property
    def options(self) -> Options:
        return self._options

    @property
    def ir(self) -> Ir:
        """The :class:`~poptorch_core.Ir` holding the compiled graph."""
        return self._ir

    # --- Compilation --------------------------------------------------------
    def compile(self, *args, **kwargs) -> None:
        """Traces and compiles the model for these (full-batch) inputs."""
        if self._program is not None:
            logger.warning("Call to compile() ignored: the executable is "
                           "already compiled")
            return
        self._compile(self._binder.bind(args, kwargs))

    def _layout(self) -> BatchLayout:
        opts = self._options
        return BatchLayout(opts.device_iterations,
                           opts.Training.gradient_accumulation,
                           opts.replication_factor, opts.input_group_size,
                           opts.input_cgt)

    def _compile(self, bound: BoundArgs) -> None:
        from ._compile import build_program
        start = time.perf_counter()
        self._program = build_program(self, bound)
        self._compilation_time = datetime.timedelta(
            seconds=time.perf_counter() - start)
        if self._options.connection_type != ConnectionType.Never.value:
            self._attach()

    def compileAndExport(self, filename: str, *args, export_model: bool = True,
                         **kwargs) -> None:
        self.compile(*args, **kwargs)
        self.save(filename, export_model)

    def save(self, filename: str, export_model: bool = True,
             save_rng_state: bool = True) -> None:
        """Saves the compiled model to one self-describing file."""
        self._require_program()
        from ._serialization import save_executor
        save_executor(self, filename, export_model, save_rng_state)

    def loadExecutable(self, filename: str) -> None:
        """Loads an executable saved by :meth:`save` for this model."""
        from ._serialization import load_executable
        load_executable(self, filename)

    # --- Running ------------------------------------------------------------
    def __call__(self, *args, **kwargs) -> Any:
        assert self._options.connection_type != ConnectionType.Never.value, \
            _OFFLINE_CALL_MSG
        bound = self._binder.bind(args, kwargs)
        if self._program is None:
            self._compile(bound)
        if not self._is_attached:
            self.attachToDevice()
        if not self._training:
            self._follow_trained_weights()
        program = self._program
        program.signature.validate(bound)
        if self._optimizer_link is not None:
            self._optimizer_link.before_run()
        self._perf.start_call()
        outputs = program.run(bound)
        self._perf.end_call(program.layout)
        if self._training:
            self._dirty_host_weights = True
            self._optimizer_link.after_run()
        self._store_anchors(program)
        return outputs

    def _follow_trained_weights(self) -> None:
        """An inference model picks up weights trained by a training model
        wrapping the same user model (spec 4.2 step 5)."""
        user = self._user_model
        sync = getattr(type(user), "copyWeightsToHostIfNeeded", None)
        if sync is None:
            return
        user.copyWeightsToHostIfNeeded()
        version = user.__dict__.get("_host_weights_version")
        if version != self._trained_weights_version:
            self.copyWeightsToDevice()
            self._trained_weights_version = version

    def _store_anchors(self, program: Program) -> None:
        if not self._options.anchored_tensors:
            return
        from ._anchors import read_anchors
        self._anchor_memory.update(read_anchors(self, program))

    # --- Weights ------------------------------------------------------------
    def _require_program(self) -> Program:
        if self._program is None:
            raise createPoptorchError(NO_EXECUTABLE_ERR)
        return self._program

    def copyWeightsToHost(self) -> None:
        """Copies the device weights and buffers to the host model."""
        program = self._require_program()
        self._dirty_host_weights = False
        program.state.copy_to_host()
        user = self._user_model
        if "_host_weights_version" in user.__dict__:
            user.__dict__["_host_weights_version"] += 1

    def _copy_weights_to_host_if_needed(self) -> bool:
        if not self._dirty_host_weights:
            return False
        self._dirty_host_weights = False
        logger.debug("Implicit copyWeightsToHost()")
        self.copyWeightsToHost()
        return True

    def copyWeightsToDevice(self) -> None:
        """Copies the host model's weights and buffers to the device."""
        program = self._require_program()
        if self._optimizer_link is not None:
            self._optimizer_link.sync_state_to_host()
        program.state.copy_to_device()

    def copyNamedBuffersToDevice(self) -> None:
        """Copies only the buffers listed by
        ``Options.updatableNamedBuffers`` to the device."""
        program = self._require_program()
        names = self._options._Popart.options.get("updatableNamedBuffers")
        if not names:
            raise createPoptorchError(
                "No named buffers marked as updatable via "
                "updatableNamedBuffers option")
        indices = [i for i, aliases in enumerate(program.captured.buffer_names)
                   if any(a in names for a in aliases)]
        program.state.copy_to_device(indices)

    def load_state_dict(self, state_dict: Dict[str, Any],
                        strict: bool = True):
        result = self._user_model.load_state_dict(state_dict, strict)
        if self.isAttachedToDevice():
            self.copyWeightsToDevice()
        return result

    # --- Optimizer ----------------------------------------------------------
    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Sets the optimizer (or updates its hyper-parameters on the
        device). Call it after changing the optimizer's attributes, e.g.
        after an LR scheduler step."""
        assert self._training, "Optimizer should be None for inference"
        self._optimizer_link.set_optimizer(optimizer)

    # --- Device attachment --------------------------------------------------
    def _attach(self) -> None:
        self._is_attached = True
        program = self._program
        if self._optimizer_link is not None:
            self._optimizer_link.on_attach()
        if self._cached_rng_state is not None:
            program.rng.set_state(self._cached_rng_state)
            self._cached_rng_state = None

    def attachToDevice(self) -> None:
        program = self._require_program()
        assert self._options.connection_type != ConnectionType.Never.value, \
            "Trying to attach to an offline device (ConnectionType.Never)"
        if self._is_attached:
            raise createPoptorchError("Device is already attached")
        program.state.copy_to_device()
        self._attach()

    def detachFromDevice(self) -> None:
        program = self._require_program()
        if not self._is_attached:
            raise createPoptorchError("Device is not attached")
        self._cached_rng_state = program.rng.get_state()
        if self._training:
            self._copy_weights_to_host_if_needed()
            self._optimizer_link.sync_state_to_host()
        self._is_attached = False
        logger.debug("Detached from device")

    def isAttachedToDevice(self) -> bool:
        return self._program is not None and self._is_attached

    def isCompiled(self) -> bool:
        return self._program is not None

    def destroy(self) -> None:
        """Drops the executable; a training wrapper also unwraps the user
        model so that it can be wrapped again."""
        if self._program is not None:
            if self._training:
                self._copy_weights_to_host_if_needed()
                self._optimizer_link.sync_state_to_host()
            self._program = None
            self._is_attached = False
            self._ir = Ir()
        if self._training and _host_sync.is_wrapped(self._user_model):
            _host_sync.unwrap(self._user_model)

    # --- RNG ----------------------------------------------------------------
    @property
    def rng_state(self) -> List[int]:
        return self._require_program().rng.get_state()

    @rng_state.setter
    def rng_state(self, state: List[int]) -> None:
        program = self._require_program()
        if self._is_attached:
            program.rng.set_state(state)
        else:
            self._cached_rng_state = list(state)

    # --- Introspection ------------------------------------------------------
    def getAnchoredTensor(self, short_name: str) -> torch.Tensor:
        assert short_name in self._anchor_memory, \
            f"No tensor with name {short_name} found."
        return self._anchor_memory[short_name]

    def getTensorNames(self) -> List[str]:
        assert self._program is not None, \
            "Model must be compiled before calling getTensorNames"
        from ._anchors import tensor_names
        return tensor_names(self._program)

    def getPerfCounters(self) -> Dict[str, List[List[float]]]:
        return self._perf.counters()

    def getHostIpuLatency(self):
        return self._perf.host_ipu_latency()

    def getComputeLatency(self):
        return self._perf.compute_latency()

    def getIpuHostLatency(self):
        return self._perf.ipu_host_latency()

    def getLatency(self):
        return self._perf.latency()

    def compilationTime(self) -> datetime.timedelta:
        if self._program is None:
            raise createPoptorchError(
                "Please compile the model before obtaining compilation time.")
        if not self._options._show_compilation_progress_bar:
            raise createPoptorchError(
                "Please set showCompilationProgressBar option to obtain "
                "compilation time.")
        return self._compilation_time

    def cycleCount(self) -> int:
        if not self._options._Popart.options.get(
                "instrumentWithHardwareCycleCounter", False):
            raise createPoptorchError(
                "Cycle count logging is disabled. Please set option "
                "logCycleCount to True to enable.")
        if self._program is None:
            raise createPoptorchError(
                "Please run the model at least once before obtaining cycle "
                "count.")
        raise _impl._cpp_error("Cycle count logging is only supported on "
                               "actual IPU hardware.")

    def simulationReport(self) -> Any:
        """The simulated IPU's estimate for this compiled model: memory per
        IPU, time per pipeline stage, the step's schedule and throughput
        (a ``poptorch_core.device.SimulationReport``; ``str()`` it,
        ``to_dict()`` it or ``plot(path)`` it)."""
        return self._require_program().estimate.report()

    def compilations(self) -> int:
        """How many times the ``compile`` backend compiled this model's
        graph (0 for the ``interpret`` backend)."""
        return self._program.executable.compilations if self._program else 0
