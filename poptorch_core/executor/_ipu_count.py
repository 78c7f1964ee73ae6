"""How many IPUs a model reserves.

PopTorch reserves ``(#distinct IPUs the model uses) * replication_factor``
IPUs per process, which must be a power of two and at most 64. The check
only applies when a device is acquired: offline targets
(``ConnectionType.Never``) skip it.

Example::

    >>> opts = poptorch.Options().replicationFactor(2)
    >>> _ipus_to_reserve(2, opts)
    4
"""
from typing import Any

from .. import enums
from .._impl import _cpp_error
from .._logging import logger

__all__ = []

#: Most IPUs one process can reserve.
MAX_IPUS_PER_PROCESS = 64


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _ipus_to_reserve(num_model_ipus: int, options: Any) -> int:
    """The number of IPUs to reserve for a model using ``num_model_ipus``
    distinct IPUs under ``options`` (a ``poptorch.Options``).

    Raises the backend's error for too many IPUs, or for a count that is
    not a power of two unless ``options.autoRoundNumIPUs(True)`` was set
    (then it warns and rounds up).
    """
    if num_model_ipus < 1:
        raise ValueError(
            f"num_model_ipus must be at least 1 (got {num_model_ipus})")
    num_ipus = num_model_ipus * options.replication_factor
    if options.connection_type == enums.ConnectionType.Never:
        return num_ipus
    if num_ipus > MAX_IPUS_PER_PROCESS:
        raise _cpp_error(
            f"Too many IPUs requested ({num_ipus}). PopTorch can reserve at "
            f"most {MAX_IPUS_PER_PROCESS} IPUs per process: reduce "
            "replicationFactor or the number of IPUs the model uses, or "
            "spread the replicas over several processes "
            "(poptorch.Options().Distributed).")
    rounded = _next_power_of_two(num_ipus)
    if rounded == num_ipus:
        return num_ipus
    if options.auto_round_num_ipus:
        logger.warning(
            "The model specifies the use of %d IPUs, however PopTorch must "
            "reserve a power of 2: reserving %d IPUs instead.", num_ipus,
            rounded)
        return rounded
    raise _cpp_error(
        f"The model specifies the use of {num_ipus} IPUs, however PopTorch "
        f"must reserve a minimum of {rounded} in order to allow the model to "
        "run, because PopTorch must reserve a power of 2 or maximum of 64 "
        "IPUs per process. Please reconfigure your model to use a different "
        "number of IPUs or set poptorch.Options().autoRoundNumIPUs(True).")
