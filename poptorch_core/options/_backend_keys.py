"""The backend (PopART) session options that ``opts._Popart.set`` knows.

PopTorch passes ``_Popart`` options to PopART, which refuses an unknown name
or a value of a type it cannot represent when the model is compiled. The
simulator checks both when the option is set, so that the error points at
the line that set it: a name close to a known one is a misspelling and is
refused with the known name; another unknown name is stored with a warning
(PopART has options this list may lack); a value that is not a bool,
number, string, enum, dtype, or a list or string-keyed dict of them is
refused.

Example::

    >>> check_backend_option("enableStableNorm", True)
    >>> check_backend_option("enableStableNorn", True)
    Traceback (most recent call last):
    ...
    poptorch_core.errors.Error: Unknown backend option 'enableStableNorn': did you mean 'enableStableNorm'? ...
"""
import difflib
import enum
from typing import Any, Optional, Set

import torch

from .._impl import cpp_error
from .._logging import logger

#: PopART SessionOptions names (and the ones PopTorch's setters use).
KNOWN_OPTIONS = frozenset("""
accumulateOuterFragmentSettings accumulationAndReplicationReductionType
accumulationFactor accumulatorTensorLocationSettings
activationTensorLocationSettings aliasZeroCopy autoRecomputation
autodiffSettings automaticLossScalingSettings batchSerializationSettings
bufferingDepthMap cachePath compilationProgressLogger
compilationProgressTotal constantWeights convolutionOptions
createImplicitPipeliningFwdOnlyProgram customCodeletCompileFlags
customCodelets decomposeGradSum defaultBufferingDepth
defaultPrefetchBufferingDepth delayVarUpdates developerSettings
disableGradAccumulationTensorStreams disableOptimizerStateTensorStreams
dotChecks dotOpNames enableConstantFoldingOfMultipleConsumers
enableDistributedReplicatedGraphs enableEfficientOverlapIOTopoCons
enableEngineCaching enableExplicitIR enableExplicitMainLoops
enableFloatingPointChecks enableFullyConnectedPass
enableGradientAccumulation enableInplaceAmbiguityChecking
enableLoadAndOffloadRNGState enableMergeExchange enableNonStableSoftmax
enableOutlining enableOutliningCopyCostPruning enablePipelining
enablePrefetchDatastreams enableReplicatedGraphs enableSerializedMatmuls
enableStableNorm enableStochasticRounding enableSupportedDataTypeCasting
enableVariablesCaching engineOptions ensureFp32LossScaleTensor
executionPhaseSettings experimentalSettings explicitRecomputation
exportPoplarComputationGraph exportPoplarVertexGraph finalDotOp firstDotOp
gclOptions globalReplicaOffset globalReplicationFactor groupHostSync
groupNormStridedChannelGrouping hardwareInstrumentations hostAllReduce
hostAllReduceRemoteBuffer hostWeightUpdate
instrumentWithHardwareCycleCounter kahnTieBreaker logDir matmulOptions
meanAccumulationAndReplicationReductionStrategy mergeVarUpdate
mergeVarUpdateMemThreshold numIOTiles opxAliasChecking opxModifyChecking
optimizerStateTensorLocationSettings outlineSequenceBreakCost
outlineThreshold partialsTypeMatMuls patterns patternsLevel
rearrangeAnchorsOnHost rearrangeStreamsOnHost replicatedCollectivesSettings
replicatedGraphCount scheduleNonWeightUpdateGradientConsumersEarly
separateCallOpPdfs serializedPoprithmsShiftGraphsDir strictOpVersions
subgraphCopyingStrategy swapLimitScheduler syntheticDataMode
tensorLocationSettingsOverride throwIfLog2ScaleTensorNotInRange
timeLimitScheduler transitiveClosureOptimizationThreshold
updatableNamedBuffers useHostCopyOps virtualGraphMode
weightTensorLocationSettings
""".split())

#: How alike an unknown name must be to a known one to count as its
#: misspelling (``difflib``'s ratio).
_MISSPELLING_CUTOFF = 0.85
_LEAVES = (bool, int, float, str, enum.Enum, torch.dtype)
_warned: Set[str] = set()


def unknown_type(value: Any) -> Optional[type]:
    """The type in ``value`` the backend cannot take, or None."""
    if isinstance(value, _LEAVES):
        return None
    if isinstance(value, (list, tuple, set)):
        return next((t for t in map(unknown_type, value) if t), None)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return dict
        return next((t for t in map(unknown_type, value.values()) if t),
                    None)
    return type(value)


def unknown_type_error(key: str, bad: type) -> Exception:
    """PopART's error for a value it cannot represent, with the fix."""
    return cpp_error(
        f"Unknown value type {bad.__name__} for option {key}: backend "
        "options take bools, numbers, strings, enums and torch dtypes, or "
        "lists and string-keyed dicts of them. Pass the value in one of "
        "those forms.")


def check_backend_option(key: str, value: Any) -> None:
    """Refuses a misspelt name or a value the backend cannot take; warns
    once about another unknown name (see the module docstring)."""
    bad = unknown_type(value)
    if bad is not None:
        raise unknown_type_error(key, bad)
    # Dotted names set one field of a structured option.
    if key.split(".")[0] in KNOWN_OPTIONS:
        return
    close = difflib.get_close_matches(key, KNOWN_OPTIONS, n=1,
                                      cutoff=_MISSPELLING_CUTOFF)
    if close:
        raise cpp_error(
            f"Unknown backend option {key!r}: did you mean {close[0]!r}? "
            f"Use opts._Popart.set({close[0]!r}, ...).")
    if key not in _warned:
        _warned.add(key)
        logger.warning(
            "opts._Popart.set(%r, ...): %r is not a PopART session option "
            "that the simulator knows; it is stored and ignored. Check the "
            "name against PopART's SessionOptions.", key, key)
