"""``Options.Simulator``: settings of the simulated IPU itself.

These have no PopTorch counterpart, so they live in their own namespace and
are serialised under ``simulator.*`` keys that cannot collide with PopTorch
or PopART option names.

Example::

    >>> opts = poptorch.Options()
    >>> simulator = opts.Simulator.backend("compile").ipuVersion(21)
    >>> opts.Simulator.execution_backend, opts.Simulator.ipu_version
    ('compile', 21)
"""
from typing import Any, Dict, Tuple

import torch

from ..errors import public_class
from ._dict import OptionsDict

#: Execution backends of the simulator: ``interpret`` runs the traced graph
#: as is, ``compile`` compiles it with inductor once per executable, and
#: ``auto`` (the default) runs ``interpret`` while ``compile``'s step builds
#: in the background, then switches to it between two calls.
BACKENDS: Tuple[str, ...] = ("interpret", "compile", "auto")
DEFAULT_BACKEND = "auto"
#: Host devices the simulated IPU computes on.
HOST_DEVICES: Tuple[str, ...] = ("cpu", "cuda")
#: IPU generations: 1 (Mk1), 2 (Mk2) and 21 (Bow).
IPU_VERSIONS: Tuple[int, ...] = (1, 2, 21)
#: What a model that does not fit the simulated IPU's memory does.
MEMORY_CHECKS: Tuple[str, ...] = ("error", "warn", "off")

#: Seconds a distributed run waits for a process before it gives up.
DEFAULT_DISTRIBUTED_TIMEOUT = 60.0

#: Prefix of the Simulator keys in ``Options.toDict()``.
KEY_PREFIX = "simulator."


def check_ipu_version(version: Any, what: str = "ipu_version") -> None:
    """Raises ``ValueError`` unless ``version`` is a known IPU version."""
    if isinstance(version, bool) or version not in IPU_VERSIONS:
        raise ValueError(f"Invalid {what} {version!r}: valid IPU versions "
                         f"are {', '.join(map(str, IPU_VERSIONS))} "
                         "(21 is Bow)")


def _check_choice(option: str, value: str, valid: Tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"Invalid Simulator {option} {value!r}: valid "
                         f"values are {', '.join(map(repr, valid))}")


@public_class
class SimulatorOptions(OptionsDict):
    """Simulator settings: execution backend, host device, IPU version,
    memory check, host memory and the distributed timeout.

    - ``execution_backend``: ``"auto"`` (default), ``"interpret"`` or
      ``"compile"`` (see :meth:`backend`);
    - ``host_device``: ``"cpu"`` (default) or ``"cuda"``;
    - ``ipu_version``: 2 (default), 1 or 21 (Bow); drives the simulated
      device model (memory per IPU, throughput; see
      ``poptorch_model.simulationReport()``). An offline target's
      ``useOfflineIpuTarget(ipu_version)`` takes precedence;
    - ``memory_check``: ``"warn"`` (default), ``"error"`` or ``"off"``:
      what a model whose memory estimate exceeds an IPU's memory does
      (see :meth:`memoryCheck`);
    - ``host_memory_pool``: True (default) to keep freed host memory for
      reuse between steps (see :meth:`hostMemoryPool`);
    - ``distributed_timeout``: seconds (default 60) after which the processes
      of a distributed run give up on one that died or hangs
      (see :meth:`distributedTimeout`).

    Example::

        >>> opts = poptorch.Options()
        >>> opts.Simulator.backend("compile").hostDevice("cpu")
        SimulatorOptions(execution_backend='compile', host_device='cpu', ...)
    """

    def __init__(self):
        super().__init__(execution_backend=DEFAULT_BACKEND,
                         host_device=HOST_DEVICES[0],
                         ipu_version=2, memory_check="warn",
                         host_memory_pool=True,
                         distributed_timeout=DEFAULT_DISTRIBUTED_TIMEOUT)

    def _checkValue(self, option: str, value: Any) -> None:
        if option == "execution_backend":
            _check_choice("backend", value, BACKENDS)
        elif option == "host_device":
            _check_choice("host device", value, HOST_DEVICES)
            if value == "cuda" and not torch.cuda.is_available():
                raise ValueError(
                    "Simulator.hostDevice('cuda') needs a CUDA device, but "
                    "torch.cuda.is_available() is False: run on a machine "
                    "with a GPU and a CUDA build of torch, or use "
                    "Simulator.hostDevice('cpu')")
        elif option == "ipu_version":
            check_ipu_version(value)
        elif option == "memory_check":
            _check_choice("memory check", value, MEMORY_CHECKS)
        elif option == "host_memory_pool" and not isinstance(value, bool):
            raise ValueError(f"Simulator.hostMemoryPool takes a bool, got "
                             f"{value!r}")
        elif option == "distributed_timeout" and not value > 0:
            raise ValueError("Simulator.distributedTimeout takes a positive "
                             f"number of seconds, got {value!r}")

    def backend(self, name: str) -> "SimulatorOptions":
        """Execution backend: ``"interpret"`` runs the traced graph op by
        op (starts at once), ``"compile"`` compiles it with inductor on the
        first call (seconds to start, faster steps), and ``"auto"`` (the
        default) runs ``interpret`` while ``compile``'s step builds in the
        background, then switches to it between two calls, keeping the
        weights, optimizer state and RNG stream as they are."""
        return self.set(execution_backend=name)

    def hostDevice(self, device: str) -> "SimulatorOptions":
        """Host device the simulated IPU computes on: ``"cpu"`` or
        ``"cuda"``."""
        return self.set(host_device=device)

    def ipuVersion(self, version: int) -> "SimulatorOptions":
        """Simulated IPU generation: 1, 2 or 21 (Bow)."""
        return self.set(ipu_version=version)

    def memoryCheck(self, mode: str) -> "SimulatorOptions":
        """What compiling a model that does not fit the simulated IPU does:
        ``"error"`` raises ``poptorch.Error`` naming the IPU, the memory
        needed and available and the largest consumers, as an IPU
        compilation would fail; ``"warn"`` (default) logs that message and
        runs the model on the host anyway; ``"off"`` says nothing."""
        return self.set(memory_check=mode)

    def hostMemoryPool(self, enabled: bool = True) -> "SimulatorOptions":
        """Keep freed host memory for reuse instead of returning it to the
        OS after every step, as the IPU reserves its memory once (default:
        on). With glibc's ``malloc`` (Linux) a training step otherwise
        faults its activations' pages back in each time, which can cost a
        fifth of a small model's step.

        The setting is process-wide: the first model compiled with it
        configures ``malloc`` for the rest of the process; ``False`` leaves
        the allocator alone. Settings made through ``MALLOC_*_`` variables
        or ``GLIBC_TUNABLES`` always win.
        """
        return self.set(host_memory_pool=enabled)

    def distributedTimeout(self, seconds: float) -> "SimulatorOptions":
        """How long the processes of a distributed run
        (``Options.Distributed``) wait for each other, in seconds (default
        60). When a process dies or hangs, the others raise
        ``poptorch.Error`` naming it after at most about this long instead
        of waiting for ever. The first model compiled for several
        processes sets it for the whole process."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ValueError("Simulator.distributedTimeout takes a number of "
                             f"seconds, got {seconds!r}")
        return self.set(distributed_timeout=float(seconds))

    def _serialised(self) -> Dict[str, Any]:
        return {KEY_PREFIX + k: v for k, v in self._values.items()}
