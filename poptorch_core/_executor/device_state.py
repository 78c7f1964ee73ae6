"""The simulated device's own copy of a model's weights, buffers and RNG.

The device never shares storage with the host model: weights move host to
device on attach / ``copyWeightsToDevice`` and device to host on
``copyWeightsToHost``, with the IPU dtype rules applied (float64 is held as
float32, int64 as int32). Per-replica buffers exist when buffers are not
broadcast between replicas.
"""
import contextlib
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from .. import _dtypes
from .._logging import logger


def _device_copy(host: torch.Tensor, device: torch.device,
                 what: str) -> torch.Tensor:
    host = host.detach()
    dtype = _dtypes.ipu_dtype(host.dtype)
    if host.dtype == torch.int64:
        _dtypes.check_fits_int32(host, what)
    return host.to(device=device, dtype=dtype, copy=True)


def _copy_into(device_tensor: torch.Tensor, host: torch.Tensor,
               what: str) -> None:
    """Host -> existing device tensor (``copy_`` converts the dtype)."""
    host = host.detach()
    if host.dtype == torch.int64:
        _dtypes.check_fits_int32(host, what)
    device_tensor.copy_(host)


class DeviceState:
    """Device tensors for the unique parameters and buffers of a model.

    Args:
        host_params, host_buffers: the host tensors, in placeholder order.
        names: one name per parameter then per buffer (for messages).
        device: the host device that simulates the IPU.
        replicas: how many per-replica buffer copies to keep (1 when
            buffers are broadcast).
    """

    def __init__(self, host_params: Sequence[torch.Tensor],
                 host_buffers: Sequence[torch.Tensor], names: Sequence[str],
                 device: torch.device, replicas: int = 1):
        self.device = device
        self.host_params = list(host_params)
        self.host_buffers = list(host_buffers)
        self._names = list(names)
        num_p = len(self.host_params)
        self.params: List[torch.Tensor] = [
            _device_copy(p, device, n).requires_grad_(p.requires_grad)
            for p, n in zip(self.host_params, names)]
        self.replica_buffers: List[List[torch.Tensor]] = [
            [_device_copy(b, device, n) for b, n in
             zip(self.host_buffers, names[num_p:])] for _ in range(replicas)]
        #: Parameter index -> its replica grouping (``replica_weights``):
        #: the device tensor holds one copy per group.
        self.grouped: Dict[int, Any] = {}
        self._host_marks = self._marks()
        self._edit_warned = False

    def group_weights(self, grouped: Dict[int, Any]) -> None:
        """Holds the parameters of ``grouped`` as one copy per group."""
        self.grouped = dict(grouped)
        for index, weight in grouped.items():
            param = self.params[index]
            self.params[index] = weight.device_value(param).requires_grad_(
                param.requires_grad)

    def replica_params(self, replica: int) -> List[torch.Tensor]:
        """The parameters replica ``replica`` runs with."""
        if not self.grouped:
            return self.params
        return [self.grouped[i].select(p, replica) if i in self.grouped
                else p for i, p in enumerate(self.params)]

    def make_per_replica(self, replicas: int) -> None:
        """Gives each replica its own copy of the buffers (buffers are not
        broadcast, so replicas may drift apart)."""
        first = self.replica_buffers[0]
        self.replica_buffers = [first] + [
            [b.clone() for b in first] for _ in range(replicas - 1)]

    def buffers(self, replica: int = 0) -> List[torch.Tensor]:
        return self.replica_buffers[min(replica, len(self.replica_buffers) - 1)]

    def copy_to_device(self, buffer_indices: Optional[Sequence[int]] = None
                       ) -> None:
        """Host -> device. ``buffer_indices`` limits the copy to those
        buffers (and skips the parameters)."""
        logger.debug("Writing weights from host to IPU memory")
        num_p = len(self.params)
        with torch.no_grad():
            if buffer_indices is None:
                for i, (dev, host) in enumerate(zip(self.params,
                                                    self.host_params)):
                    if i in self.grouped:
                        self.grouped[i].to_device(dev, host)
                    else:
                        _copy_into(dev, host, self._names[i])
                buffer_indices = range(len(self.host_buffers))
            for i in buffer_indices:
                for buffers in self.replica_buffers:
                    _copy_into(buffers[i], self.host_buffers[i],
                               self._names[num_p + i])
        self._host_marks = self._marks()

    def copy_to_host(self) -> None:
        """Device -> host (the first replica's buffers)."""
        logger.debug("Writing weights from IPU to host")
        with torch.no_grad():
            for i, (dev, host) in enumerate(zip(
                    self.params + self.replica_buffers[0],
                    self.host_params + self.host_buffers)):
                if i in self.grouped:
                    self.grouped[i].to_host(dev, host)
                else:
                    host.data.copy_(dev.detach())
        self._host_marks = self._marks()

    # --- Host edits ---------------------------------------------------------
    def _marks(self) -> List[Tuple[int, int]]:
        # In-place edits bump a tensor's version and assigning .data moves
        # its storage; an edit through .data (p.data.fill_) shows in neither.
        # Reading them must not sync a training model's stale host weights.
        with torch._C.DisableTorchFunctionSubclass():
            return [(t.data_ptr(), t._version)
                    for t in self.host_params + self.host_buffers]

    def warn_if_host_edited(self) -> None:
        """Warns once when the host weights changed since they were last
        copied either way: PopTorch sends them to the device only when
        asked to, so the device keeps computing with its own copy."""
        if self._edit_warned:
            return
        marks = self._marks()
        if marks == self._host_marks:
            return
        self._edit_warned = True
        edited = [name for name, old, new in zip(
            self._names, self._host_marks, marks) if old != new]
        logger.warning(
            "The host copy of %s changed after the model was compiled (or "
            "its weights were last copied): PopTorch does not send host "
            "edits to the IPU by itself, so this call uses the weights on "
            "the device. Call model.copyWeightsToDevice() to apply the "
            "edits.", ", ".join(edited[:3]) +
            (f" and {len(edited) - 3} more" if len(edited) > 3 else ""))


class DeviceRng:
    """The device's random number generator, kept apart from the host's.

    Random ops in the graph (dropout, rand, ...) draw from it; the host RNG
    is swapped out for the duration of each run, so running a model does not
    change the host's random stream, and a seed gives a reproducible device
    stream.
    """

    def __init__(self, device: torch.device, seed: Optional[int] = None):
        self._device = device
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.seed = seed
        logger.debug("Setting random seed to %d", seed)
        self._state = self._seeded_state(seed)

    def _generator_state(self) -> torch.Tensor:
        if self._device.type == "cuda":
            return torch.cuda.get_rng_state(self._device)
        return torch.get_rng_state()

    def _set_generator_state(self, state: torch.Tensor) -> None:
        if self._device.type == "cuda":
            torch.cuda.set_rng_state(state, self._device)
        else:
            torch.set_rng_state(state)

    def _seeded_state(self, seed: int) -> torch.Tensor:
        saved = self._generator_state()
        try:
            if self._device.type == "cuda":
                torch.cuda.manual_seed(seed)
            else:
                torch.manual_seed(seed)
            return self._generator_state()
        finally:
            self._set_generator_state(saved)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Runs the body with the device RNG as the generator."""
        saved = self._generator_state()
        self._set_generator_state(self._state)
        try:
            yield
        finally:
            self._state = self._generator_state()
            self._set_generator_state(saved)

    def get_state(self) -> List[int]:
        """``[seed] + state`` as PopTorch's ``rng_state`` returns it."""
        logger.debug("Reading RNG state")
        return [self.seed] + self._state.tolist()

    def set_state(self, state: Sequence[int]) -> None:
        logger.debug("Setting RNG state")
        self.seed = int(state[0])
        self._state = torch.tensor(list(state[1:]), dtype=torch.uint8)
