"""The PopTorch sub-namespaces of ``poptorch.Options``.

``Options.Training``, ``.Precision``, ``.TensorLocations`` (with
:class:`TensorLocationSettings`), ``.Distributed`` and ``.Jit``. Every setter
returns its namespace so that calls chain.

Example::

    >>> opts = poptorch.Options()
    >>> training = opts.Training.gradientAccumulation(4) \\
    ...     .accumulationAndReplicationReductionType(
    ...         poptorch.ReductionType.Sum)
    >>> training is opts.Training, opts.Training.gradient_accumulation
    (True, 4)
"""
import os
from typing import Any, Optional, Tuple, Type, Union

import torch

from .. import enums
from .._logging import logger
from ..errors import public_class
from ._dict import OptionsDict, _PopartOptions

__all__ = ["TensorLocationSettings"]


def assert_type(value: Any, expected: Union[Type, Tuple[Type, ...]],
                 what: str) -> None:
    """Asserts ``value`` has the ``expected`` type (bools are not ints)."""
    types = expected if isinstance(expected, tuple) else (expected, )
    ok = isinstance(value, types) and not (isinstance(value, bool)
                                           and bool not in types)
    names = " or ".join(t.__name__ for t in types)
    if not ok:
        raise AssertionError(
            f"{what} must be of type {names} (got {type(value).__name__})")


#: The largest count of device iterations, accumulation steps, replicas or
#: an output period: the IPU's programs count them in 32-bit integers
#: (PopART's batchesPerStep and accumulationFactor, Poplar's loop counts),
#: so a larger count cannot run.
MAX_COUNT = 2**31 - 1


def check_positive(option: str, value: Any) -> None:
    if value < 1:
        raise ValueError(f"{option} must be a positive integer (got {value})")
    if value > MAX_COUNT:
        raise ValueError(
            f"{option} must be at most 2**31 - 1 = {MAX_COUNT} (got "
            f"{value}): the IPU counts a call's device iterations, "
            "accumulation steps and replicas in 32-bit integers, and each "
            "call would need an input with at least that many rows. Use a "
            "smaller count.")


@public_class
class _TrainingOptions(OptionsDict):
    """Options specific to ``poptorch.trainingModel``.

    Example::

        >>> opts = poptorch.Options()
        >>> opts.Training.gradientAccumulation(8).gradient_accumulation
        8
    """

    def __init__(self, popart_options: _PopartOptions):
        self._popart_options = popart_options
        super().__init__(
            gradient_accumulation=1,
            accumulation_and_replication_reduction_type=enums.ReductionType.
            Mean,
            meanAccumulationAndReplicationReductionStrategy=enums.
            MeanReductionStrategy.Post)

    def _checkValue(self, option: str, value: Any) -> None:
        if option == "gradient_accumulation":
            check_positive(option, value)

    def gradientAccumulation(self,
                             gradient_accumulation: int) -> "_TrainingOptions":
        """Number of micro-batches whose gradients are accumulated before
        each weight update (must stay 1 for inference models)."""
        return self.set(gradient_accumulation=gradient_accumulation)

    def accumulationAndReplicationReductionType(
            self, reduction_type: enums.ReductionType) -> "_TrainingOptions":
        """Whether gradients are summed or averaged over accumulation steps
        and replicas (``ReductionType.Mean`` or ``ReductionType.Sum``)."""
        if (not isinstance(reduction_type, enums.ReductionType)
                or reduction_type == enums.ReductionType.NoReduction):
            raise ValueError(
                "accumulationAndReplicationReductionType must be set to "
                "poptorch.ReductionType.Mean or poptorch.ReductionType.Sum")
        return self.set(
            accumulation_and_replication_reduction_type=reduction_type)

    def setMeanAccumulationAndReplicationReductionStrategy(
            self, mean_reduction_strategy: enums.MeanReductionStrategy
    ) -> "_TrainingOptions":
        """When a Mean reduction divides: ``Running`` or ``Post``
        (``PostAndLoss`` is deprecated). Only affects numerics."""
        assert_type(mean_reduction_strategy, enums.MeanReductionStrategy,
                     "mean_reduction_strategy")
        return self.set(meanAccumulationAndReplicationReductionStrategy=
                        mean_reduction_strategy)

    def setAutomaticLossScaling(self, enabled: bool) -> "_TrainingOptions":
        """Enables automatic loss scaling (backend metadata)."""
        assert_type(enabled, bool, "enabled")
        self._popart_options.set("automaticLossScalingSettings.enabled",
                                 enabled)
        return self

    def setConvolutionDithering(self, enabled: bool) -> "_TrainingOptions":
        """Enables convolution dithering (backend metadata)."""
        assert_type(enabled, bool, "enabled")
        _merge_convolution_option(self._popart_options, "enableConvDithering",
                                  enabled)
        return self


def _merge_convolution_option(popart: _PopartOptions, key: str,
                              value: Any) -> None:
    # Upstream replaces the whole dict, so dithering and the partials type
    # overwrite each other; both are kept here.
    conv = dict(popart.options.get("convolutionOptions", {}))
    conv[key] = value
    popart.set("convolutionOptions", conv)


@public_class
class _PrecisionOptions(OptionsDict):
    """Numerical precision options (metadata on the simulator, which
    computes in the model's own dtypes).

    Example::

        >>> opts = poptorch.Options()
        >>> opts.Precision.setPartialsType(torch.half)
        _PrecisionOptions()
        >>> opts.popartOption("partialsTypeMatMuls")
        'half'
    """

    def __init__(self, popart_options: _PopartOptions):
        self._popart_options = popart_options
        super().__init__()

    def halfFloatCasting(self, half_float_casting: Any) -> "_PrecisionOptions":
        """Deprecated: only warns."""
        del half_float_casting
        logger.warning("Precision.halfFloatCasting() is deprecated and has "
                       "no effect: float16/float32 operands follow PyTorch's "
                       "type promotion, and matrix products and "
                       "convolutions run in their input's dtype.")
        return self

    def runningStatisticsAlwaysFloat(self, value: bool) -> "_PrecisionOptions":
        """Deprecated: only warns (after checking ``value`` is a bool)."""
        logger.warning("Precision.runningStatisticsAlwaysFloat() is "
                       "deprecated and has no effect.")
        if not isinstance(value, bool):
            raise ValueError(
                "runningStatisticsAlwaysFloat needs to be set to a bool")
        return self

    def enableFloatingPointExceptions(self,
                                      enabled: bool) -> "_PrecisionOptions":
        """Raise on floating point errors on hardware (metadata here)."""
        assert_type(enabled, bool, "enabled")
        self._popart_options.set("enableFloatingPointChecks", enabled)
        return self

    def enableStochasticRounding(self, enabled: bool) -> "_PrecisionOptions":
        """Stochastic rounding of half values on hardware (metadata here)."""
        assert_type(enabled, bool, "enabled")
        self._popart_options.set("enableStochasticRounding", enabled)
        return self

    def setPartialsType(self, dtype: torch.dtype) -> "_PrecisionOptions":
        """Accumulator type of matmuls and convolutions: ``torch.float`` or
        ``torch.half``."""
        if dtype == torch.float:
            type_str = "float"
        elif dtype == torch.half:
            type_str = "half"
        else:
            # Upstream's message really lacks the space in "eithertorch".
            raise ValueError("parameter to setPartialsType should be either"
                             "torch.float or torch.half")
        self._popart_options.set("partialsTypeMatMuls", type_str)
        _merge_convolution_option(self._popart_options, "partialsType",
                                  type_str)
        return self


@public_class
class TensorLocationSettings(OptionsDict):
    """Where one class of tensors (activations, weights, optimizer state,
    accumulators) lives. Metadata only on the simulator.

    Example::

        >>> settings = poptorch.TensorLocationSettings() \\
        ...     .useOnChipStorage(False).minElementsForOffChip(128)
        >>> settings
        TensorLocationSettings(onChip=0, minElementsForOffChip=128)
        >>> opts = poptorch.Options()
        >>> opts.TensorLocations.setWeightLocation(settings).location_weight
        {'onChip': 0, 'minElementsForOffChip': 128}
    """

    def __init__(self):
        super().__init__()

    def minElementsForOffChip(self,
                              min_elements: int) -> "TensorLocationSettings":
        """Tensors with fewer elements always stay on chip."""
        assert_type(min_elements, int, "min_elements")
        if min_elements < 0:
            raise AssertionError("min_elements must be >= 0")
        return self.createOrSet(minElementsForOffChip=min_elements)

    def minElementsForReplicatedTensorSharding(
            self, min_elements: int) -> "TensorLocationSettings":
        """Tensors with fewer elements are never sharded across replicas."""
        assert_type(min_elements, int, "min_elements")
        if min_elements < 0:
            raise AssertionError("min_elements must be >= 0")
        return self.createOrSet(
            minElementsForReplicatedTensorSharding=min_elements)

    def useOnChipStorage(
            self, use: Optional[bool] = True) -> "TensorLocationSettings":
        """On-chip (True) or streaming-memory (False) storage; ``None``
        restores the default."""
        if use is None:
            return self.deleteIfExists("onChip")
        assert_type(use, bool, "use")
        return self.createOrSet(onChip=int(use))

    def useReplicatedTensorSharding(
            self, use: bool = True) -> "TensorLocationSettings":
        """Shard these tensors across replicas."""
        assert_type(use, bool, "use")
        return self.createOrSet(useReplicatedTensorSharding=int(use))

    def useIOTilesToLoad(self, use: bool = True) -> "TensorLocationSettings":
        """Load these tensors through the IO tiles."""
        assert_type(use, bool, "use")
        return self.createOrSet(useIOTilesToLoad=int(use))

    def useIOTilesToStore(self, use: bool = True) -> "TensorLocationSettings":
        """Store these tensors through the IO tiles."""
        assert_type(use, bool, "use")
        return self.createOrSet(useIOTilesToStore=int(use))


@public_class
class _TensorLocationOptions(OptionsDict):
    """Tensor placement options (metadata only on the simulator).

    Example::

        >>> opts = poptorch.Options()
        >>> opts.TensorLocations.numIOTiles(32)
        _TensorLocationOptions(numIOTiles=32)
    """

    def __init__(self):
        super().__init__()

    def numIOTiles(self, num_tiles: int) -> "_TensorLocationOptions":
        """Number of tiles reserved for IO: even, between 32 and 192."""
        assert_type(num_tiles, int, "num_tiles")
        if not (32 <= num_tiles <= 192 and num_tiles % 2 == 0):
            raise AssertionError(
                "numIOTiles must be an even number between 32 and 192.")
        return self.createOrSet(numIOTiles=num_tiles)

    def _setLocation(self, key: str, location: TensorLocationSettings
                     ) -> "_TensorLocationOptions":
        if not isinstance(location, TensorLocationSettings):
            raise AssertionError(
                f"location must be a poptorch.TensorLocationSettings (got "
                f"{type(location).__name__})")
        return self.createOrSet(**{key: location.toDict()})

    def setActivationLocation(self, location: TensorLocationSettings
                              ) -> "_TensorLocationOptions":
        """Placement of activations."""
        return self._setLocation("location_activation", location)

    def setWeightLocation(self, location: TensorLocationSettings
                          ) -> "_TensorLocationOptions":
        """Placement of weights."""
        return self._setLocation("location_weight", location)

    def setOptimizerLocation(self, location: TensorLocationSettings
                             ) -> "_TensorLocationOptions":
        """Placement of optimizer state."""
        return self._setLocation("location_optimizer", location)

    def setAccumulatorLocation(self, location: TensorLocationSettings
                               ) -> "_TensorLocationOptions":
        """Placement of gradient accumulators."""
        return self._setLocation("location_accumulator", location)


def _int_from_env(var: str, default: int) -> int:
    text = os.environ.get(var)
    if text is None or text.strip() == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"Environment variable {var}={text!r} must be an "
                         "integer") from None


@public_class
class _DistributedOptions(OptionsDict):
    """Multi-process (multi-instance) replication.

    The process id and count come from ``OMPI_COMM_WORLD_RANK`` /
    ``OMPI_COMM_WORLD_SIZE`` (as set by ``poprun``/``mpirun``) or, when
    those are unset, from ``RANK`` / ``WORLD_SIZE`` as set by ``torchrun``.
    ``replicationFactor`` counts the replicas of *this* process.

    Example::

        >>> opts = poptorch.Options()
        >>> opts.Distributed.configureProcessId(0, 2).numProcesses
        2
    """

    def __init__(self):
        super().__init__(num_distributed_processes=1,
                         distributed_process_id=0,
                         ipuof_configs={})
        if ("OMPI_COMM_WORLD_SIZE" not in os.environ
                and "WORLD_SIZE" in os.environ):
            self.setEnvVarNames("WORLD_SIZE", "RANK")
        else:
            self.setEnvVarNames("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")

    def disable(self) -> "_DistributedOptions":
        """Back to a single process (id 0)."""
        return self.configureProcessId(0, 1)

    def setEnvVarNames(self, var_num_processes: str,
                       var_process_id: str) -> "_DistributedOptions":
        """Reads the process count and id from these environment variables
        (1 and 0 when they are unset)."""
        process_id = _int_from_env(var_process_id, 0)
        num_processes = _int_from_env(var_num_processes, 1)
        if num_processes < 1:
            raise ValueError(
                f"Environment variable {var_num_processes}="
                f"{os.environ.get(var_num_processes)!r} must be the number "
                "of processes of the run, at least 1: fix or unset it.")
        if not 0 <= process_id < num_processes:
            size = os.environ.get(var_num_processes)
            size = f"{var_num_processes}={size!r}" if size is not None else \
                f"{var_num_processes} unset (1 process)"
            raise ValueError(
                f"Environment variable {var_process_id}="
                f"{os.environ.get(var_process_id)!r} is not the rank of a "
                f"process of the run ({size}): each process needs its own "
                "rank from 0 to the process count - 1. Launch with torchrun "
                "or poprun, which set both, or fix the variables.")
        return self.configureProcessId(process_id, num_processes)

    def configureProcessId(self, process_id: int,
                           num_processes: int) -> "_DistributedOptions":
        """Sets this process's id and the number of processes."""
        assert_type(process_id, int, "process_id")
        assert_type(num_processes, int, "num_processes")
        if num_processes < 1:
            raise ValueError(
                f"num_processes must be at least 1 (got {num_processes})")
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id must be in [0, {num_processes}) "
                             f"for {num_processes} processes (got "
                             f"{process_id})")
        return self.set(distributed_process_id=process_id,
                        num_distributed_processes=num_processes)

    @property
    def processId(self) -> int:
        """Id of this process, in ``[0, numProcesses)``."""
        return self.distributed_process_id

    @property
    def numProcesses(self) -> int:
        """Total number of processes."""
        return self.num_distributed_processes


@public_class
class _JitOptions(OptionsDict):
    """Deprecated TorchScript options (tracing is always by dispatch)."""

    def __init__(self):
        super().__init__()

    def traceModel(self, trace_model: bool) -> "_JitOptions":
        """Deprecated: ``True`` is refused, ``False`` is the only mode."""
        logger.warning("Setting Jit.traceModel is deprecated: models are "
                       "always captured by the dispatcher.")
        if trace_model:
            raise ValueError(
                "options.Jit.traceModel(True) is no longer supported")
        return self
