"""Where this process stands in a distributed run, read from its options and
its launcher's environment.

The process id and count come from ``options.Distributed``, which reads
``torchrun``'s ``RANK``/``WORLD_SIZE`` or PopRun's
``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``, or takes them from
``configureProcessId``. The processes meet at ``MASTER_ADDR:MASTER_PORT``
(``torchrun`` sets both; other launchers must export them). The host device
decides the backend: gloo on the CPU, NCCL on CUDA, each process on the GPU
of its local rank (``LOCAL_RANK`` or ``OMPI_COMM_WORLD_LOCAL_RANK``).

Example::

    >>> opts = poptorch.Options()
    >>> _ = opts.Distributed.configureProcessId(1, 2)
    >>> env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    >>> launch = Launch.of(opts, env)
    >>> launch.rank, launch.world_size, launch.backend
    (1, 2, 'gloo')
"""
import dataclasses
import os
from typing import Any, Mapping, Optional

import torch
import torch.distributed as dist

from .._logging import logger
from ..errors import createPoptorchError

_LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")


def _local_rank(env: Mapping[str, str], rank: int) -> int:
    for var in _LOCAL_RANK_VARS:
        text = env.get(var, "").strip()
        if text:
            try:
                return int(text)
            except ValueError:
                raise createPoptorchError(
                    f"Environment variable {var}={text!r} must be an "
                    "integer") from None
    # configureProcessId on one host: processes take the GPUs in turn.
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return rank % count if count else 0


def _meeting_point(env: Mapping[str, str], rank: int,
                   world_size: int) -> tuple:
    addr = env.get("MASTER_ADDR", "").strip()
    port = env.get("MASTER_PORT", "").strip()
    if not addr or not port:
        raise createPoptorchError(
            f"A distributed run (options.Distributed: process {rank} of "
            f"{world_size}) needs MASTER_ADDR and MASTER_PORT, the address "
            "of process 0's host and a free port on it, where the processes "
            "meet. torchrun sets them; with poprun/mpirun or "
            "configureProcessId, export both in every process.")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise createPoptorchError(
            f"MASTER_PORT={port!r} is not a port number (1-65535).")
    return addr, int(port)


def _backend(device: str) -> str:
    if device != "cuda":
        return "gloo"
    if dist.is_nccl_available():
        return "nccl"
    logger.warning("NCCL is not available in this build of torch: the "
                   "processes exchange CUDA gradients through gloo.")
    return "gloo"


@dataclasses.dataclass(frozen=True)
class Launch:
    """This process's place in the run and how it reaches the others."""
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    #: ``"gloo"`` or ``"nccl"``.
    backend: str
    #: The host device that simulates the IPU: ``"cpu"`` or ``"cuda"``.
    device: str
    #: Seconds to wait for another process before giving up on it.
    timeout: float
    #: Whether ``torchrun``'s agent hosts the store (it outlives the
    #: workers) rather than process 0.
    agent_store: bool

    @classmethod
    def of(cls, options: Any,
           env: Optional[Mapping[str, str]] = None) -> "Launch":
        """The launch described by ``options`` (a ``poptorch.Options``)
        and the environment (default ``os.environ``)."""
        env = os.environ if env is None else env
        rank = options.Distributed.processId
        world_size = options.Distributed.numProcesses
        addr, port = _meeting_point(env, rank, world_size)
        device = options.Simulator.host_device
        return cls(rank=rank, world_size=world_size,
                   local_rank=_local_rank(env, rank), master_addr=addr,
                   master_port=port, backend=_backend(device), device=device,
                   timeout=float(options.Simulator.distributed_timeout),
                   agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE",
                                       "").lower() == "true")

    def same_run(self, other: "Launch") -> bool:
        """Whether ``other`` describes the same run (the timeout aside)."""
        return dataclasses.replace(other, timeout=self.timeout) == self
