"""``poptorch.Options``: how a model is batched, replicated and executed.

Example::

    >>> opts = poptorch.Options().deviceIterations(4).replicationFactor(2)
    >>> opts.Training.gradientAccumulation(8).gradient_accumulation
    8
    >>> opts.outputMode(poptorch.OutputMode.All).output_mode == \\
    ...     poptorch.OutputMode.All
    True
    >>> opts.device_iterations, opts.replication_factor
    (4, 2)
"""
import copy
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import torch

from .. import enums
from ._strategies import PipelinedExecution, _IExecutionStrategy
from .._logging import logger
from ..errors import public_class
from ._config import ConfigFileError, apply_json, load_from_file
from ._dict import OptionsDict, _PopartOptions
from ._progress import CompilationProgressBar
from ._simulator import SimulatorOptions, check_ipu_version
from ._namespaces import (TensorLocationSettings, assert_type,
                           check_positive, _DistributedOptions, _JitOptions,
                           _PrecisionOptions, _TensorLocationOptions,
                           _TrainingOptions)

__all__ = ["Options", "ConfigFileError", "TensorLocationSettings"]


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class AnchorSpec(NamedTuple):
    """An anchored tensor as the executor reads it (``Options.anchors``)."""
    #: The internal tensor's name, e.g. ``Gradient___fc.weight``.
    long_name: str
    output_mode: enums.OutputMode
    output_return_period: int

_DEFAULT_SOURCE_LOCATION_EXCLUDES = [
    "install/poptorch", "site-packages/torch", "site-packages/poptorch"
]
# Options whose value counts something and so must be at least 1.
_POSITIVE_OPTIONS = ("replication_factor", "input_group_size",
                     "device_iterations", "output_return_period")
_MAX_REPEAT_LOGS_UNLIMITED = 2**64 - 1
#: The sub-namespaces, in the order ``repr`` shows them.
_NAMESPACES = ("Distributed", "Jit", "Precision", "Simulator",
               "TensorLocations", "Training", "_Popart")

PathLike = Union[str, "os.PathLike[str]"]


@public_class
class Options(OptionsDict):
    """Options of a PopTorch model (``trainingModel``/``inferenceModel``).

    Setters return the options, so calls chain. Sub-namespaces:
    ``Training``, ``Precision``, ``TensorLocations``, ``Distributed``,
    ``Jit``, ``_Popart`` and ``Simulator`` (settings of the simulated IPU,
    which PopTorch does not have).

    The constructor reads these environment variables, in this order:

    - ``POPTORCH_CACHE_DIR``: ``enableExecutableCaching(path)``;
    - ``POPTORCH_SIM_BACKEND``: ``Simulator.backend(name)``, to switch a
      whole PopTorch script to the ``interpret``, ``compile`` or ``auto``
      backend without editing it;
    - ``POPTORCH_DEFAULT_OPTIONS``: JSON applied with :meth:`from_json`,
      e.g. ``{"deviceIterations": 4, "Simulator.backend": "compile"}``.

    ``Distributed`` reads ``OMPI_COMM_WORLD_SIZE``/``OMPI_COMM_WORLD_RANK``,
    or torchrun's ``WORLD_SIZE``/``RANK`` when those are unset.

    Example::

        >>> opts = poptorch.Options()
        >>> opts.deviceIterations(2).Simulator.backend("compile")
        SimulatorOptions(execution_backend='compile', ...)
        >>> model = poptorch.inferenceModel(torch.nn.Linear(4, 2), opts)
        >>> model.options.device_iterations
        2
    """

    def __init__(self):
        self._popart = _PopartOptions()
        self._training = _TrainingOptions(self._popart)
        self._precision = _PrecisionOptions(self._popart)
        self._tensor_locations = _TensorLocationOptions()
        self._distributed = _DistributedOptions()
        self._jit = _JitOptions()
        self._simulator = SimulatorOptions()
        self._execution_strategy: _IExecutionStrategy = PipelinedExecution(
            enums.AutoStage.SameAsIpu)
        self._relax_optimizer_checks = False
        self._show_compilation_progress_bar = True
        self._module_namescope_enabled = True
        self._source_location_excludes = list(
            _DEFAULT_SOURCE_LOCATION_EXCLUDES)
        self._progress_bar = CompilationProgressBar()
        super().__init__(
            replication_factor=1,
            input_group_size=1,
            input_cgt=enums.CommGroupType.Consecutive,
            broadcast_buffers=True,
            device_iterations=1,
            log_dir=".",
            max_repeat_logs=4,
            auto_round_num_ipus=False,
            anchored_tensors={},
            output_mode=enums.OutputMode.Default.value,
            output_return_period=1,
            connection_type=enums.ConnectionType.Always.value,
            sync_pattern=enums.SyncPattern.Full.value,
            available_memory_proportion={})
        self._applyEnvironment()

    def _applyEnvironment(self) -> None:
        path = os.environ.get("POPTORCH_CACHE_DIR", "")
        if path:
            logger.info("POPTORCH_CACHE_DIR is set: setting cache path to %s",
                        path)
            self.enableExecutableCaching(path)
        backend = os.environ.get("POPTORCH_SIM_BACKEND", "")
        if backend:
            try:
                self.Simulator.backend(backend)
            except ValueError as err:
                raise ValueError(f"Environment variable POPTORCH_SIM_BACKEND:"
                                 f" {err}") from None
        defaults = os.environ.get("POPTORCH_DEFAULT_OPTIONS", "")
        if defaults.strip():
            try:
                self.from_json(defaults)
            except (ValueError, TypeError, AttributeError,
                    AssertionError) as err:
                detail = str(err).rstrip(". ")
                raise type(err)(
                    f"Environment variable POPTORCH_DEFAULT_OPTIONS="
                    f"{defaults!r}: {detail}. Fix the variable or unset it."
                    ) from None

    def _checkValue(self, option: str, value: Any) -> None:
        if option in _POSITIVE_OPTIONS:
            check_positive(option, value)

    # Read access for the simulator's modules ------------------------------
    # PopTorch keeps these private; the executor, the tracer and the
    # optimizer link read them through these properties instead.

    @property
    def execution_strategy(self) -> _IExecutionStrategy:
        """The strategy set by :meth:`setExecutionStrategy`."""
        return self._execution_strategy

    @property
    def source_location_excludes(self) -> Tuple[str, ...]:
        """Path fragments never reported as the user's source line."""
        return tuple(self._source_location_excludes)

    @property
    def show_compilation_progress_bar(self) -> bool:
        """Whether compiling shows a progress bar
        (:meth:`showCompilationProgressBar`)."""
        return self._show_compilation_progress_bar

    @property
    def relax_optimizer_checks(self) -> bool:
        """Whether unexpected optimizer attributes are only logged at debug
        level (:meth:`relaxOptimizerAttributesChecks`)."""
        return self._relax_optimizer_checks

    def popartOption(self, key: str, default: Any = None) -> Any:
        """The backend (``_Popart``) option ``key``, or ``default``."""
        return self._popart.options.get(key, default)

    @property
    def anchors(self) -> Dict[str, AnchorSpec]:
        """The anchored tensors by short name, with the output mode that
        applies: an anchor set without one follows the model's."""
        specs = {}
        for short, (long_name, follows_model, mode, period) in \
                self.anchored_tensors.items():
            if follows_model:
                mode, period = self.output_mode, self.output_return_period
            specs[short] = AnchorSpec(long_name, enums.OutputMode(mode),
                                      period)
        return specs

    # Sub-namespaces -------------------------------------------------------

    @property
    def Training(self) -> _TrainingOptions:
        """Training options (gradient accumulation, reductions)."""
        return self._training

    @property
    def Precision(self) -> _PrecisionOptions:
        """Numerical precision options."""
        return self._precision

    @property
    def TensorLocations(self) -> _TensorLocationOptions:
        """Tensor placement options."""
        return self._tensor_locations

    @property
    def Distributed(self) -> _DistributedOptions:
        """Multi-process replication options."""
        return self._distributed

    @property
    def Jit(self) -> _JitOptions:
        """Deprecated TorchScript options."""
        return self._jit

    @property
    def _Popart(self) -> _PopartOptions:
        """Free-form backend (PopART) options."""
        return self._popart

    @property
    def Simulator(self) -> SimulatorOptions:
        """Settings of the simulated IPU (backend, host device, version)."""
        return self._simulator

    # Batching and replication ---------------------------------------------

    def deviceIterations(self, device_iterations: int) -> "Options":
        """Number of batches each call of the model processes."""
        return self.set(device_iterations=device_iterations)

    def replicationFactor(self, replication_factor: int) -> "Options":
        """Number of replicas of the model in this process (the global
        count is this times ``Distributed.numProcesses``)."""
        return self.set(replication_factor=replication_factor)

    def inputReplicaGrouping(self, input_group_size: int,
                             input_group_type: enums.CommGroupType
                             ) -> "Options":
        """Replicas in a group of ``input_group_size`` receive the same
        input data; ``input_group_type`` says how groups are formed."""
        assert_type(input_group_type, enums.CommGroupType,
                     "input_group_type")
        if input_group_type == enums.CommGroupType.NoGrouping:
            input_group_size = 1
            input_group_type = enums.CommGroupType.Consecutive
        if input_group_type == enums.CommGroupType.All:
            raise ValueError("input_group_type cannot be All")
        assert_type(input_group_size, int, "input_group_size")
        check_positive("input_group_size", input_group_size)
        if input_group_size > self.replication_factor:
            raise ValueError(
                "input_group_size cannot be larger than replication_factor "
                f"(got {input_group_size} for replicationFactor "
                f"{self.replication_factor}): set replicationFactor first, "
                "then inputReplicaGrouping.")
        if self.replication_factor % input_group_size != 0:
            raise ValueError(
                "input_group_size must be a factor of replication_factor "
                f"(got {input_group_size} for replicationFactor "
                f"{self.replication_factor}): use one of "
                f"{_divisors(self.replication_factor)}.")
        return self.set(input_group_size=input_group_size,
                        input_cgt=input_group_type)

    def broadcastBuffers(self, broadcast_buffers: bool = True) -> "Options":
        """Broadcast buffers from replica 0 to the others before each
        run."""
        return self.set(broadcast_buffers=broadcast_buffers)

    def outputMode(self,
                   output_mode: enums.OutputMode,
                   output_return_period: Optional[int] = None) -> "Options":
        """Which micro-batch outputs are returned; ``EveryN`` needs a
        positive ``output_return_period``."""
        if not isinstance(output_mode, enums.OutputMode):
            raise AssertionError(
                f"output_mode must be a poptorch.OutputMode (got "
                f"{output_mode!r})")
        _check_return_period(output_mode, output_return_period)
        if (output_mode != enums.OutputMode.EveryN
                and output_return_period is not None):
            logger.info(
                "Output return period argument ignored with output_mode "
                "set to %s", output_mode.name)
            output_return_period = None
        return self.set(output_mode=output_mode.value,
                        output_return_period=output_return_period or 1)

    def defaultOutputMode(self) -> bool:
        """True while the output mode is still ``OutputMode.Default``."""
        return self.output_mode == enums.OutputMode.Default

    def anchorTensor(self,
                     short_name: str,
                     long_name: str,
                     output_mode: Optional[enums.OutputMode] = None,
                     output_return_period: int = 1) -> "Options":
        """Also returns the internal tensor ``long_name`` as ``short_name``
        (read with ``getAnchoredTensor``). Without an output mode it
        inherits the model's. Returns the options (upstream returned None).
        """
        self.checkIsFrozen()
        assert_type(short_name, str, "short_name")
        assert_type(long_name, str, "long_name")
        if output_mode is not None:
            if not isinstance(output_mode, enums.OutputMode):
                raise AssertionError(
                    f"output_mode must be a poptorch.OutputMode or None (got "
                    f"{output_mode!r})")
            _check_return_period(output_mode, output_return_period)
        mode = (enums.OutputMode.Default
                if output_mode is None else output_mode).value
        if output_mode != enums.OutputMode.EveryN:
            output_return_period = 1
        self.anchored_tensors[short_name] = [
            long_name, output_mode is None, mode, output_return_period
        ]
        return self

    # Device and connection ------------------------------------------------

    def connectionType(self,
                       connection_type: enums.ConnectionType) -> "Options":
        """When to attach to the device (``Never``: compile only)."""
        assert_type(connection_type, enums.ConnectionType, "connection_type")
        return self.set(connection_type=connection_type.value)

    def syncPattern(self, sync_pattern: enums.SyncPattern) -> "Options":
        """Host synchronisation pattern (metadata on the simulator)."""
        assert_type(sync_pattern, enums.SyncPattern, "sync_pattern")
        return self.set(sync_pattern=sync_pattern.value)

    def useIpuId(self, ipu_id: int) -> "Options":
        """Runs on the IPU (or multi-IPU) with this id."""
        assert_type(ipu_id, int, "ipu_id")
        return self.createOrSet(ipu_id=ipu_id)

    def useIpuModel(self, use_model: bool) -> "Options":
        """Runs on the IPU Model (takes precedence over
        ``POPTORCH_IPU_MODEL``)."""
        assert_type(use_model, bool, "use_model")
        return self.createOrSet(use_model=use_model)

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> "Options":
        """Compiles for an IPU of ``ipu_version`` (1, 2 or 21) without
        attaching: the model can be compiled and saved but not run."""
        assert_type(ipu_version, int, "ipu_version")
        check_ipu_version(ipu_version)
        self.connectionType(enums.ConnectionType.Never)
        return self.createOrSet(ipu_version=ipu_version)

    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> "Options":
        """Round a number of IPUs that is not a power of 2 up instead of
        failing."""
        return self.set(auto_round_num_ipus=auto_round_num_ipus)

    def setAvailableMemoryProportion(
            self, available_memory_proportion: Dict[str, float]) -> "Options":
        """Proportion of tile memory available for temporary values, per
        IPU: ``{"IPU0": 0.5, "IPU1": 0.3}``."""
        assert_type(available_memory_proportion, dict,
                     "available_memory_proportion")
        proportions = {}
        for key, proportion in available_memory_proportion.items():
            if not (isinstance(key, str) and key.startswith("IPU")
                    and key[3:].isdigit()):
                raise AssertionError(
                    "Available memory proportions are expected to be in "
                    "a dictionary of {\"IPU0\": 0.5} where the 0 in IPU "
                    f"is the index of the IPU. Invalid key: {key}")
            assert_type(proportion, (float, int), f"proportion of {key}")
            if not 0 < proportion <= 1:
                raise ValueError(f"Available memory proportion of {key} must "
                                 f"be in (0, 1] (got {proportion})")
            proportions[int(key[3:])] = float(proportion)
        return self.set(available_memory_proportion=proportions)

    def setExecutionStrategy(self,
                             strategy: _IExecutionStrategy) -> "Options":
        """How blocks are placed: a ``PipelinedExecution`` (default),
        ``ShardedExecution``, ``SerialPhasedExecution`` or
        ``ParallelPhasedExecution``."""
        if not isinstance(strategy, _IExecutionStrategy):
            raise AssertionError(
                "strategy must be a poptorch.PipelinedExecution, "
                "ShardedExecution, SerialPhasedExecution or "
                f"ParallelPhasedExecution (got {type(strategy).__name__})")
        self._execution_strategy = strategy
        return self

    # Randomness -----------------------------------------------------------

    def randomSeed(self, random_seed: int) -> "Options":
        """Seeds the device's random generator; also calls
        ``torch.manual_seed(random_seed)``. The seed is a 64-bit integer
        (as torch takes it: from ``-2**63`` to ``2**64 - 1``)."""
        assert_type(random_seed, int, "random_seed")
        if not -2**63 <= random_seed < 2**64:
            raise ValueError(
                f"random_seed ({random_seed}) does not fit 64 bits: use a "
                "seed from -2**63 to 2**64 - 1.")
        torch.manual_seed(random_seed)
        return self.createOrSet(random_seed=random_seed)

    # Backend options --------------------------------------------------------

    def enableExecutableCaching(self, path: Optional[PathLike]) -> "Options":
        """Caches compiled executables under ``path`` (None disables)."""
        if path is None:
            self._Popart.set("enableEngineCaching", False)
            return self
        assert_type(path, (str, os.PathLike), "path")
        self._Popart.set("cachePath", os.fspath(path))
        self._Popart.set("enableEngineCaching", True)
        return self

    def enableStableNorm(self, enabled: bool) -> "Options":
        """Numerically stable (slower) normalisation statistics."""
        assert_type(enabled, bool, "enabled")
        self._Popart.set("enableStableNorm", enabled)
        return self

    def enableSyntheticData(self, enabled: bool) -> "Options":
        """Replaces host IO with synthetic data (benchmarking)."""
        assert_type(enabled, bool, "enabled")
        self._Popart.set("syntheticDataMode", 2 if enabled else 0)
        return self

    def logCycleCount(self, log_cycle_count: bool) -> "Options":
        """Instruments the program with a cycle counter (hardware only)."""
        assert_type(log_cycle_count, bool, "log_cycle_count")
        self._Popart.set("instrumentWithHardwareCycleCounter",
                         log_cycle_count)
        return self

    def enableProfiling(self,
                        profile_dir: Optional[PathLike] = None) -> "Options":
        """Writes a profiling report under ``profile_dir`` (default
        ``.``)."""
        if "autoReport" in os.environ.get("POPLAR_ENGINE_OPTIONS", ""):
            logger.warning("POPLAR_ENGINE_OPTIONS already sets profiling "
                           "options: they override enableProfiling()")
        engine_options = dict(self._Popart.options.get("engineOptions", {}))
        engine_options.update({
            "debug.allowOutOfMemory": "true",
            "autoReport.directory": os.fspath(profile_dir or "."),
            "autoReport.all": "true",
        })
        self._Popart.setEngineOptions(engine_options)
        return self

    def updatableNamedBuffers(self, buffers: List[str]) -> "Options":
        """Buffers that ``copyNamedBuffersToDevice()`` may update."""
        if not (isinstance(buffers, list) and all(
                isinstance(b, str) for b in buffers)):
            raise AssertionError(
                "updatableNamedBuffers expects a list of buffer names")
        self._Popart.set("updatableNamedBuffers", list(buffers))
        return self

    # Logging and debug info -----------------------------------------------

    def logDir(self, log_dir: PathLike) -> "Options":
        """Directory for logs and reports."""
        assert_type(log_dir, (str, os.PathLike), "log_dir")
        return self.set(log_dir=os.fspath(log_dir))

    def maxRepeatLogs(self, max_lines: Optional[int]) -> "Options":
        """Most repeats of one log message (None: unlimited)."""
        if max_lines is None:
            max_lines = _MAX_REPEAT_LOGS_UNLIMITED
        return self.set(max_repeat_logs=max_lines)

    def modelName(self, name: str) -> "Options":
        """Name of the model in reports (default "inference"/"training")."""
        assert_type(name, str, "name")
        return self.createOrSet(model_name=name)

    def sourceLocationExcludes(self, excludes: List[str]) -> "Options":
        """Path fragments skipped when attributing ops to source lines."""
        if not (isinstance(excludes, list) and all(
                isinstance(e, str) for e in excludes)):
            raise AssertionError(
                "sourceLocationExcludes expects a list of strings")
        self._source_location_excludes = list(excludes)
        return self

    def appendToLocationExcludes(self, *excludes: str) -> "Options":
        """Adds path fragments to :meth:`sourceLocationExcludes`."""
        if not all(isinstance(e, str) for e in excludes):
            raise AssertionError("appendToLocationExcludes expects strings")
        self._source_location_excludes = (self._source_location_excludes +
                                          list(excludes))
        return self

    def showCompilationProgressBar(self, show: bool = True) -> "Options":
        """Shows a progress bar while compiling (needed by
        ``compilationTime()``)."""
        assert_type(show, bool, "show")
        self._show_compilation_progress_bar = show
        return self

    def relaxOptimizerAttributesChecks(self, relax: bool = True) -> "Options":
        """Unexpected optimizer attributes are logged at debug level
        instead of warning."""
        assert_type(relax, bool, "relax")
        self._relax_optimizer_checks = relax
        return self

    def disableModuleNamescope(self) -> "Options":
        """Op names no longer get module-path prefixes."""
        self._module_namescope_enabled = False
        return self

    # Serialisation ----------------------------------------------------------

    def loadFromFile(self, filepath: PathLike) -> "Options":
        """Applies a config file of setter calls, one per line, written as
        they would follow ``options.``; ``#`` starts a comment.

        Example::

            >>> import os, tempfile
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     path = os.path.join(folder, "ipu.conf")
            ...     with open(path, "w") as f:
            ...         _ = f.write("deviceIterations(4)  # 4 per call\\n"
            ...                     "Training.gradientAccumulation(2)\\n")
            ...     opts = poptorch.Options().loadFromFile(path)
            >>> opts.device_iterations, opts.Training.gradient_accumulation
            (4, 2)
        """
        load_from_file(self, os.fspath(filepath))
        return self

    def from_json(self, string: str) -> "Options":
        """Applies ``{"dotted.setter": value}`` from JSON; a list value is
        spread over the setter's arguments, ``"EnumName.Member"`` strings
        become ``poptorch`` enums and ``"torch.half"``-style strings torch
        dtypes.

        Example::

            >>> opts = poptorch.Options()
            >>> opts = opts.from_json(
            ...     '{"outputMode": ["OutputMode.EveryN", 2]}')
            >>> mode = poptorch.OutputMode(opts.output_mode)
            >>> mode, opts.output_return_period
            (<OutputMode.EveryN: 1>, 2)
        """
        apply_json(self, string)
        return self

    def toDict(self) -> Dict[str, Any]:
        """Every option as one flat dict (the backend's view); the output
        mode must have been resolved."""
        if self.output_mode == enums.OutputMode.Default:
            raise AssertionError(
                "An output mode must be picked before serialisation")
        out = self._execution_strategy.backendOptions()
        out.update(self._popart.options)
        out = self.update(out)
        for child in (self._training, self._distributed,
                      self._tensor_locations, self._simulator):
            out = child.update(out)
        if self._show_compilation_progress_bar:
            out["compilation_progress_bar_fn"] = self._progress_bar
        return out

    def clone(self) -> "Options":
        """An unfrozen deep copy."""
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        items = [f"{k}={v!r}" for k, v in self._values.items()]
        items += [f"{k}={getattr(self, k)!r}" for k in _NAMESPACES]
        return f"Options({', '.join(items)})"


def _check_return_period(output_mode: enums.OutputMode,
                         period: Optional[int]) -> None:
    if output_mode == enums.OutputMode.EveryN:
        if not (isinstance(period, int) and not isinstance(period, bool)
                and period > 0):
            raise AssertionError(
                "EveryN anchor must have "
                "output_return_period set to valid "
                "positive integer")
