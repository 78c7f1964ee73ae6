"""The link between a training model's host optimizer and its device copy.

The host optimizer (a ``poptorch.optim`` or native ``torch.optim``
optimizer over the user's parameters) never steps: it describes the
algorithm and hyper-parameters. The device optimizer updates the device's
weights. Hyper-parameters go host to device on ``setOptimizer`` and on
attach; the optimizer state (moments, ...) is read back lazily through the
host optimizer's ``state_dict()`` and written to the device after
``load_state_dict``.
"""
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

import torch

from .._logging import logger
from ..optim import Optimizer
from ..optim._attributes import OptimizerAttrTracker, convertOptimizerToDict
from ..optim._constants import check_constant_attributes
from ..optim._device import DeviceOptimizer
from ..optim._loss_scaling import loss_scaling_settings
from ..options import Options


def _is_poptorch_optimizer(optimizer: Any) -> bool:
    return isinstance(optimizer, Optimizer)


def _hyper_parameters(optimizer: torch.optim.Optimizer) -> List[Dict[str, Any]]:
    """Each parameter group's settings, comparable with ``==``."""
    def comparable(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return tuple(value.detach().flatten().tolist())
        return value
    return [{key: comparable(value) for key, value in group.items()
             if key != "params"} for group in optimizer.param_groups]


class LinkOwner(Protocol):
    """What the link needs from the wrapper that owns it."""
    options: Options
    attached: bool

    @property
    def compiled(self) -> bool:
        """Whether the model is compiled (the device optimizer exists)."""

    def copy_weights_to_host_if_needed(self) -> bool:
        """Copies the device weights to the host if they are newer."""


class OptimizerLink:
    """Keeps one executor's host optimizer and device optimizer in step."""

    def __init__(self, owner: LinkOwner, optimizer: torch.optim.Optimizer):
        self._owner = owner
        self._tracker = OptimizerAttrTracker(owner.options)
        self.optimizer = optimizer
        self.device_optimizer: Optional[DeviceOptimizer] = None
        #: The description the executable was compiled with.
        self._compiled_description: Optional[dict] = None
        self._description = convertOptimizerToDict(
            optimizer, self._tracker, owner.options, False)
        self._tracker.enableChecks()
        self._instrument(optimizer)
        #: The groups' settings the device last received (``_uploaded``).
        self._uploaded: Optional[List[Dict[str, Any]]] = None
        self._edit_warned = False

    @property
    def _compiled(self) -> bool:
        return self._owner.compiled

    def _instrument(self, optimizer: Any) -> None:
        if _is_poptorch_optimizer(optimizer):
            optimizer._device_state_source = self._read_device_state

    def _read_device_state(self) -> dict:
        if self.device_optimizer is None:
            return {"ipu_state": None, "ipu_param": None}
        return self.device_optimizer.read_state()

    # --- Compile / attach ---------------------------------------------------
    def build(self, host_params: Sequence[torch.Tensor],
              params: Sequence[torch.Tensor],
              names: Sequence[Tuple[str, ...]]) -> DeviceOptimizer:
        """Creates the device optimizer over the device parameters
        ``params``, the copies of ``host_params`` (named ``names``, each
        a parameter's names, first the one it is reported under)."""
        device_params = {id(host): dev for host, dev in
                         zip(host_params, params)}
        param_names = {id(host): name[0] for host, name in
                       zip(host_params, names)}
        self.device_optimizer = DeviceOptimizer(
            self.optimizer, device_params, param_names,
            auto_loss_scaling=loss_scaling_settings(self._owner.options))
        self._compiled_description = self._description
        # A state the host optimizer holds in torch's format (trained on
        # the CPU before wrapping, or loaded from a CPU checkpoint) is the
        # device's starting state.
        self._write_torch_state()
        return self.device_optimizer

    def on_attach(self) -> None:
        """Uploads the hyper-parameters, and the state if the host optimizer
        holds one (e.g. from a checkpoint)."""
        optimizer = self.optimizer
        self._upload(optimizer)
        if not _is_poptorch_optimizer(optimizer):
            return
        if optimizer.has_state():
            self._write_state()
        else:
            optimizer.host_state_is_dirty = True

    def _upload(self, optimizer: torch.optim.Optimizer) -> None:
        self.device_optimizer.update_from_host(optimizer)
        self._uploaded = _hyper_parameters(optimizer)

    def _warn_if_edited(self) -> None:
        """Warns once when a group's settings changed since the device
        received them: PopTorch reads them only in ``setOptimizer``."""
        if self._edit_warned or self._uploaded is None:
            return
        now = _hyper_parameters(self.optimizer)
        if now == self._uploaded:
            return
        self._edit_warned = True
        index, key, old, new = next(
            (i, k, before.get(k), after.get(k))
            for i, (before, after) in enumerate(zip(self._uploaded, now))
            for k in {**before, **after} if before.get(k) != after.get(k)) \
            if len(now) == len(self._uploaded) else \
            (0, "groups", len(self._uploaded), len(now))
        logger.warning(
            "optimizer.param_groups[%d][%r] changed from %r to %r after the "
            "optimizer was given to the model: PopTorch sends optimizer "
            "changes (an LR scheduler's step too) to the IPU only in "
            "training_model.setOptimizer(optimizer), so this call still "
            "uses %r. Call setOptimizer after each change.", index, key, old,
            new, old)

    # --- Runs ---------------------------------------------------------------
    def before_run(self) -> None:
        self._warn_if_edited()
        optimizer = self.optimizer
        if _is_poptorch_optimizer(optimizer) and optimizer.ipu_state_is_dirty:
            # The weights the state belongs to must reach the host first.
            self._owner.copy_weights_to_host_if_needed()
            self._write_state()

    def after_run(self) -> None:
        # The device stepped this optimizer: LR schedulers must see that it
        # did (torch warns about a scheduler step before any optimizer step).
        self.optimizer._opt_called = True
        if _is_poptorch_optimizer(self.optimizer):
            self.optimizer.host_state_is_dirty = True

    def _write_state(self) -> None:
        optimizer = self.optimizer
        state = optimizer._state_dict.get("ipu_state")
        if state is not None:
            logger.debug("Writing optimiser state tensors from host to IPU "
                         "memory")
            self.device_optimizer.write_state(state)
        self._write_torch_state()
        optimizer.ipu_state_is_dirty = False

    def _write_torch_state(self) -> None:
        """Writes a torch-format state (``optimizer.state``) to the device.
        A PopTorch optimizer's copy is then dropped: its ``state_dict()``
        reads the device's state from then on."""
        optimizer = self.optimizer
        if not optimizer.state:
            return
        logger.debug("Writing optimiser state tensors from host to IPU "
                     "memory")
        self.device_optimizer.write_torch_state(optimizer.state)
        if _is_poptorch_optimizer(optimizer):
            optimizer.state.clear()
            optimizer.host_state_is_dirty = True

    def sync_state_to_host(self) -> None:
        """Reads the device state into the host optimizer (if it can hold
        one)."""
        if _is_poptorch_optimizer(self.optimizer) and self._compiled:
            self.optimizer.state_dict()

    # --- setOptimizer -------------------------------------------------------
    def set_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        old = self.optimizer
        description = convertOptimizerToDict(
            optimizer, self._tracker, self._owner.options, self._compiled)
        if self._compiled_description is not None:
            check_constant_attributes(self._compiled_description, description)
        if optimizer is not old:
            if self._compiled and _is_poptorch_optimizer(old):
                old.state_dict()  # keep the final device state on the host
            if _is_poptorch_optimizer(old):
                old._device_state_source = None
            if _is_poptorch_optimizer(optimizer):
                optimizer.ipu_state_is_dirty = optimizer.has_state()
            self.optimizer = optimizer
            self._instrument(optimizer)
        changed = description != self._description
        self._description = description
        if self.device_optimizer is None:
            return
        if changed or optimizer is not old:
            logger.debug("Updating group 0 optimizer ...")
            self._upload(optimizer)
        self._uploaded = _hyper_parameters(optimizer)
        if self._owner.attached and \
                _is_poptorch_optimizer(optimizer) and \
                optimizer.ipu_state_is_dirty:
            self._write_state()

    @property
    def loss_scaling(self) -> Optional[float]:
        return None if self.device_optimizer is None else \
            self.device_optimizer.loss_scaling
