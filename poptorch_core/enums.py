"""Enumerations of the PopTorch API, with PopTorch's values."""
import enum

__all__ = [
    "AnchorMode", "AutoStage", "CommGroupType", "ConnectionType",
    "DataLoaderMode", "HalfFloatCastingBehavior", "Liveness",
    "MatMulSerializationMode", "MeanReductionStrategy", "MultiConvPlanType",
    "OutputMode", "OverlapMode", "ReductionType", "SharingStrategy",
    "SyncPattern", "VariableRetrievalMode"
]


class DataLoaderMode(enum.IntEnum):
    """How :class:`poptorch.DataLoader` fetches data.

    - ``Sync``: in the calling process.
    - ``Async``: in a worker process, ahead of the consumer.
    - ``AsyncRebatched``: like Async, with the torch loader using a smaller
      batch size that is re-batched to the combined batch size.
    """
    Sync = 0
    Async = 1
    AsyncRebatched = 2


class SharingStrategy(enum.IntEnum):
    """How the asynchronous worker process is created and shares memory."""
    SharedMemory = 0
    FileSystem = 1
    Fork = 2
    ForkServer = 3


class OverlapMode(enum.Enum):
    """Overlap of host IO with compute (metadata only in the simulator)."""
    NoOverlap = "no_overlap"
    OverlapAccumulationLoop = "overlap_accumulation_loop"
    OverlapDeviceIterationLoop = "overlap_device_iteration_loop"


class MatMulSerializationMode(enum.Enum):
    """Dimension along which ``serializedMatMul`` splits the work."""
    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class OutputMode(enum.IntEnum):
    """Which micro-batch results are returned to the host.

    - ``Final``: the last micro-batch of each replica.
    - ``EveryN``: every N-th micro-batch (``output_return_period``).
    - ``All``: every micro-batch.
    - ``Sum``: the sum over the micro-batches of each replica.
    - ``Default``: ``All`` for inference, ``Final`` for training.
    """
    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


#: Deprecated name of :class:`OutputMode`.
AnchorMode = OutputMode


class ConnectionType(enum.IntEnum):
    """When to attach to the device: ``Always``, ``OnDemand`` or ``Never``
    (offline compilation only)."""
    Always = 0
    OnDemand = 1
    Never = 2


class HalfFloatCastingBehavior(enum.IntEnum):
    """Deprecated: kept so that old scripts import."""
    FloatDowncastToHalf = 0
    HalfUpcastToFloat = 1


class ReductionType(enum.IntEnum):
    """Reduction of gradients over accumulation steps and replicas."""
    Sum = 0
    Mean = 1
    NoReduction = 2


class SyncPattern(enum.IntEnum):
    """Host synchronisation pattern (metadata only in the simulator)."""
    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class MeanReductionStrategy(enum.IntEnum):
    """When the mean reduction divides: per step (``Running``) or once at the
    end (``Post``). ``PostAndLoss`` is deprecated."""
    Running = 0
    Post = 1
    PostAndLoss = 2


class CommGroupType(enum.IntEnum):
    """How replicas are grouped.

    For R replicas and groups of size k: ``Consecutive`` groups are
    ``{0..k-1}, {k..2k-1}, ...``; ``Orthogonal`` groups are
    ``{0, m, 2m, ...}, {1, m+1, ...}`` with ``m = R / k``; ``NoGrouping``
    puts every replica in its own group; ``All`` puts them all in one.
    """
    All = 0
    Consecutive = 1
    Orthogonal = 2
    NoGrouping = 3


class VariableRetrievalMode(enum.IntEnum):
    """Which replicas' values of a grouped variable come back to the host."""
    OnePerGroup = 0
    AllReplicas = 2


class Liveness(enum.IntEnum):
    """Tensor liveness between execution phases."""
    AlwaysLive = 0
    OffChipAfterFwd = 1
    OffChipAfterFwdNoOverlap = 2
    OffChipAfterEachPhase = 3


class AutoStage(enum.IntEnum):
    """How pipeline stage ids are assigned to blocks."""
    SameAsIpu = 0
    AutoIncrement = 1


class MultiConvPlanType(enum.IntEnum):
    """Planning of the convolutions of a ``MultiConv``."""
    Parallel = 0
    Serial = 1
