"""The base of PopTorch's optimizers: device state and extra attributes.

A PopTorch optimizer is a normal ``torch.optim`` optimizer (LR schedulers,
``param_groups`` and CPU ``step()`` all work) that also carries the state the
IPU keeps for it: ``state_dict()`` returns torch's state dict plus
``ipu_state`` (accumulators, step counts) and ``ipu_param`` (the derived
hyper-parameter tensors), read from the device on demand.
"""
import functools
import inspect
from typing import Any, Callable, ClassVar, Dict, Iterable, Mapping, \
    Optional, Tuple

import torch

from .._logging import logger
from ._types import EXTRA_DEFAULTS, check_accum_type
from ._variable import VariableAttributes

__all__ = ["Optimizer"]

_IPU_KEYS = ("ipu_state", "ipu_param")
# Names in a constructor's ``locals()`` that are not hyper-parameters.
_NOT_ARGUMENTS = ("self", "params", "__class__")


class Optimizer:
    """Mixin giving an optimizer PopTorch's IPU state handling.

    It is the first base of every PopTorch optimizer class (the second being
    the torch class) and is not meant to be instantiated on its own.

    Attributes:
        ipu_state_is_dirty: the host holds a state (from ``load_state_dict``)
            that must be written to the device before the next run.
        host_state_is_dirty: the device ran since the state was last read.
        _device_state_source: set by the executor while this optimizer is
            attached to a model: returns ``{"ipu_state": ..., "ipu_param":
            ...}`` read from the device.

    Example::

        >>> model = torch.nn.Linear(4, 2)
        >>> opt = poptorch.optim.Adam(model.parameters(), lr=1e-3)
        >>> sorted(opt.state_dict())
        ['ipu_param', 'ipu_state', 'param_groups', 'state']
        >>> opt.has_state()   # nothing read from a device yet
        False
    """
    #: The torch optimizer this class extends (None for LAMB).
    _torch_class: ClassVar[Optional[type]] = None
    #: PopTorch-only constructor arguments, in signature order.
    _extra_args: ClassVar[Tuple[str, ...]] = ()
    _device_state_source: Optional[Callable[[], Dict[str, Any]]] = None

    def __init__(self) -> None:
        self._state_dict: Dict[str, Any] = {"ipu_state": None,
                                            "ipu_param": None}
        self.ipu_state_is_dirty = False
        self.host_state_is_dirty = False
        self._device_state_source = None

    # -- construction helpers used by the concrete classes ------------------
    def _init_torch_optimizer(self, params: Any, args: Mapping[str, Any]) -> None:
        """Runs the torch class's constructor with the torch arguments that
        were passed (``None`` ones fall back to torch's defaults)."""
        torch_kwargs = {name: args[name] for name in torch_arg_names(
            self._torch_class) if args[name] is not None}
        for name, value in torch_kwargs.items():
            if isinstance(value, (str, bytes)):
                raise TypeError(
                    f"{name} must be a number, got {value!r} "
                    f"({type(value).__name__}): pass {name}=float(...).")
        self._torch_class.__init__(self, params, **torch_kwargs)

    def _init_poptorch(self, args: Mapping[str, Any],
                       group_extras: Iterable[str] = (),
                       ignored_extras: Iterable[str] = ()) -> None:
        """Sets the extra arguments and the variable attributes.

        Args:
            args: the constructor's ``locals()`` taken on entry.
            group_extras: extra arguments stored per parameter group (in
                ``defaults`` and in each group) instead of on the object.
            ignored_extras: extra arguments that have no effect here.
        """
        Optimizer.__init__(self)
        group_extras, ignored_extras = set(group_extras), set(ignored_extras)
        for name in self._extra_args:
            value = args[name]
            if value is None:
                value = EXTRA_DEFAULTS[name]
            if name.endswith("accum_type"):
                check_accum_type(value)
            elif isinstance(value, (str, bytes)):
                raise TypeError(
                    f"{name} must be a number, got {value!r} "
                    f"({type(value).__name__}): pass {name}=float(...).")
            if name in ignored_extras:
                continue
            if name in group_extras:
                self.defaults[name] = value
                for group in self.param_groups:
                    group.setdefault(name, value)
            else:
                setattr(self, name, value)
        allowed = list(self.defaults) + ["loss_scaling"]
        passed = [name for name, value in args.items()
                  if value is not None and name not in _NOT_ARGUMENTS]
        self.variable_attrs = VariableAttributes(
            [name for name in passed if name in allowed], allowed)

    # -- state dict ---------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """torch's state dict plus ``ipu_state`` and ``ipu_param``.

        While attached to a model that has run since the last read, the IPU
        state is read from the device first (and cached until the next run).
        """
        if self._device_state_source is not None:
            if self.host_state_is_dirty:
                logger.debug("Writing optimiser state tensors from IPU to "
                             "host.")
                self._state_dict = dict(self._device_state_source())
                self.host_state_is_dirty = False
            else:
                logger.debug("Using cached optimiser state dict")
        return self.get_state_dict()

    def get_state_dict(self) -> Dict[str, Any]:
        """The state dict as last read from the device, without reading."""
        return {**self._state_dict,
                **torch.optim.Optimizer.state_dict(self)}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads a state dict saved from a PopTorch optimizer, or from a
        torch optimizer of the same type (e.g. trained on the CPU).

        torch's part (``state``, ``param_groups``) is loaded as torch does,
        so LR schedulers keep working; the IPU part (or, for a torch state,
        its ``state`` converted to the IPU's names) is written to the device
        before the next run. Entries missing from the dict keep their
        device values.

        Raises:
            RuntimeError: the dict is empty, or it is neither a PopTorch nor
                a torch optimizer state dict.
        """
        if state_dict and all(key not in state_dict for key in _IPU_KEYS) \
                and {"state", "param_groups"} <= set(state_dict):
            # A torch optimizer's state: its ``state`` entries reach the
            # device through ``self.state`` (see the executor's link).
            torch.optim.Optimizer.load_state_dict(self, state_dict)
            self.ipu_state_is_dirty = True
            return
        self._check_ipu_state_dict(state_dict)
        torch.optim.Optimizer.load_state_dict(self, {
            k: v for k, v in state_dict.items() if k not in _IPU_KEYS})
        self.set_state_dict(state_dict)

    def set_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Stores the IPU part of ``state_dict`` to be written to the device.

        Until the next run the host copy is the truth: ``state_dict()``
        returns the loaded entries and, while attached to a compiled
        model, the device's values of the entries the loaded state lacks
        (which the device keeps)."""
        self._check_ipu_state_dict(state_dict)
        loaded = {key: state_dict[key] for key in _IPU_KEYS}
        if self._device_state_source is not None and \
                isinstance(loaded["ipu_state"], Mapping):
            current = self.state_dict()["ipu_state"]
            if current is not None:
                loaded["ipu_state"] = {**current, **loaded["ipu_state"]}
        self._state_dict = loaded
        self.ipu_state_is_dirty = True
        self.host_state_is_dirty = False

    def has_state(self) -> bool:
        """True when the optimizer holds an IPU state and parameters, or a
        torch-format state waiting to be written to the device."""
        return all(self._state_dict.get(key) is not None
                   for key in _IPU_KEYS) or bool(self.state)

    @staticmethod
    def _check_ipu_state_dict(state_dict: Dict[str, Any]) -> None:
        if not state_dict:
            raise RuntimeError("Cannot load optimizer state dictionary "
                               "because it is empty.")
        if not all(key in state_dict for key in _IPU_KEYS):
            raise RuntimeError("Only IPU optimizer states can be loaded onto "
                               "the IPU.")

    # -- pickling / copying -------------------------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        # torch pickles only defaults/state/param_groups; keep PopTorch's
        # attributes too. The device hook belongs to an executor: a copy
        # must not read from (or keep alive) someone else's device.
        state = super().__getstate__()
        names = self._extra_args + ("variable_attrs", "_state_dict",
                                    "ipu_state_is_dirty",
                                    "host_state_is_dirty")
        state.update({name: self.__dict__[name] for name in names
                      if name in self.__dict__})
        return state


@functools.lru_cache(maxsize=None)
def torch_arg_names(torch_class: type) -> Tuple[str, ...]:
    return tuple(name for name in inspect.signature(
        torch_class.__init__).parameters if name not in _NOT_ARGUMENTS)
