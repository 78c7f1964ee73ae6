"""Conversion of a host optimizer into the description the device uses.

:func:`convertOptimizerToDict` turns any supported optimizer into a plain,
``==``-comparable dict: the device optimizer type, and every hyper-parameter
as ``(value, is_constant)``. The executor compares two descriptions to know
whether ``setOptimizer`` changed anything, and gives the second one to the
simulated device.

Example::

    >>> opts = poptorch.Options()
    >>> tracker = OptimizerAttrTracker(opts)
    >>> opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    >>> desc = convertOptimizerToDict(opt, tracker, opts, is_compiled=False)
    >>> desc["type"], desc["groups"][0]["lr"]
    ('SGD2', (0.1, False))
"""
from typing import Any, Dict, Iterable, Optional, Set

import torch

from .._logging import logger
from ..enums import MeanReductionStrategy
from ..options import Options
from ._base import Optimizer, torch_arg_names
from ._classes import LAMB, SGD, Adam, AdamW, RMSprop
from ._resolve import ResolvedOptimizer, resolve_optimizer
from ._types import FAMILY_ATTRIBUTES, FAMILY_GROUP_ATTRIBUTES, \
    OptimizerType

__all__ = ["OptimizerAttrTracker", "convertOptimizerToDict"]

# torch classes whose own defaults (foreach, fused, ...) are expected keys.
_TORCH_CLASSES = {
    "sgd": (torch.optim.SGD, ),
    "adam": (torch.optim.Adam, torch.optim.AdamW),
    "rmsprop": (torch.optim.RMSprop, ),
    "lamb": (),
}
_POPTORCH_CLASSES = {
    OptimizerType.SGD1: SGD,
    OptimizerType.SGD2: SGD,
    OptimizerType.ADAM: Adam,
    OptimizerType.ADAMW: AdamW,
    OptimizerType.ADAMW_NO_BIAS: AdamW,
    OptimizerType.RMSPROP: RMSprop,
    OptimizerType.RMSPROP_CENTERED: RMSprop,
    OptimizerType.LAMB: LAMB,
    OptimizerType.LAMB_NO_BIAS: LAMB,
}
# Group keys that torch's own machinery adds (LR schedulers, named params).
_BOOKKEEPING_GROUP_KEYS = frozenset({"params", "initial_lr", "param_names"})
# Object attributes owned by torch.optim.Optimizer or by PopTorch's base.
_INTERNAL_ATTRIBUTES = frozenset({
    "defaults", "state", "param_groups", "variable_attrs",
    "ipu_state_is_dirty", "host_state_is_dirty"
})
_NATIVE_TORCH_TYPES = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW,
                       torch.optim.RMSprop)
# Native torch optimizers have no VariableAttributes: these are constant
# while they hold this value.
_NATIVE_CONSTANT_VALUES = {
    "weight_decay": 0.0,
    "momentum": 0.0,
    "dampening": 0.0,
    "velocity_scaling": 1.0,
    "eps": 1e-8,
    "max_weight_norm": 65500.0,
    "loss_scaling": 1.0,
}
_ADAMW_KINDS = (OptimizerType.ADAMW, OptimizerType.ADAMW_NO_BIAS)
_RUNNING_REQUIRED = (
    "Invalid optimizer: the new optimizer would require changing "
    "options.Training.meanAccumulationAndReplicationReductionStrategy to "
    "poptorch.MeanReductionStrategy.Running but the executable is already "
    "compiled.")


class OptimizerAttrTracker:
    """Remembers the optimizer attributes PopTorch does not know about.

    Unknown attributes found by the first conversion are recorded silently
    (a user may keep their own bookkeeping on an optimizer). Unknown names
    that appear later are reported, once per message, because they probably
    mean a hyper-parameter the user expects to change and that the IPU will
    ignore. Reports are warnings, or debug messages under
    ``options.relaxOptimizerAttributesChecks()``.

    Example::

        >>> tracker = OptimizerAttrTracker(poptorch.Options())
        >>> tracker.setType(OptimizerType.SGD2)
        >>> tracker.checkOptimizerAttributes(["my_counter"])   # recorded
        >>> tracker.enableChecks()
        >>> tracker.checkOptimizerAttributes(["my_lr"])         # warns
    """

    def __init__(self, options: Optional[Options]) -> None:
        relax = options is not None and options.relax_optimizer_checks
        self._log = logger.debug if relax else logger.warning
        self._optimizer_attributes: Set[str] = set()
        self._group_attributes: Set[str] = set()
        self._recording = True
        self._printed: Set[str] = set()
        self.type = "Unknown"

    def setType(self, optimizer_type: OptimizerType) -> None:
        """Names the optimizer in messages after its PopTorch class."""
        self.type = _POPTORCH_CLASSES[optimizer_type].__name__

    def enableChecks(self) -> None:
        """Stops recording: unknown names seen from now on are reported."""
        self._recording = False

    def checkOptimizerAttributes(self, provided: Iterable[str]) -> None:
        self._check(self._optimizer_attributes, provided, "attribute")

    def checkDefaultAttributes(self, provided: Iterable[str]) -> None:
        self._check(self._group_attributes, provided,
                    "default group variable")

    def checkGroupAttributes(self, provided: Iterable[str],
                             group: int) -> None:
        self._check(self._group_attributes, provided,
                    f"group {group} attribute")

    def logOnce(self, log: Any, msg: str) -> None:
        """Logs ``msg`` with ``log`` unless this tracker already did."""
        if msg not in self._printed:
            self._printed.add(msg)
            log(msg)

    def _check(self, expected: Set[str], provided: Iterable[str],
               what: str) -> None:
        extra = sorted(name for name in provided if name not in expected)
        if self._recording:
            expected.update(extra)
        elif extra:
            self.logOnce(self._log,
                         f"Ignoring unexpected optimizer {what} in "
                         f"{self.type} optimizer: {extra}")


def convertOptimizerToDict(optimizer: torch.optim.Optimizer,
                           attr_tracker: OptimizerAttrTracker,
                           options: Optional[Options],
                           is_compiled: bool) -> Dict[str, Any]:
    """Validates ``optimizer`` and describes it for the device.

    Args:
        optimizer: a PopTorch optimizer or a native torch SGD, Adam, AdamW
            or RMSprop.
        attr_tracker: the model's tracker (reports unexpected attributes).
        options: the model's ``poptorch.Options``. An SGD with a float16
            ``accum_type`` switches its mean reduction strategy to Running.
        is_compiled: whether the executable exists (options are frozen then).

    Returns:
        ``{"type": <device optimizer name>, "attributes": {...},
        "defaults": {...}, "groups": [{...}, ...]}`` where every value is a
        ``(value, is_constant)`` pair.

    Raises:
        ValueError: an invalid optimizer (see :func:`resolve_optimizer`), or
            one needing the Running reduction strategy after compilation.
    """
    resolved = resolve_optimizer(optimizer)
    kind = resolved.kind
    attr_tracker.setType(kind)
    _warn_if_user_subclass(optimizer, kind, attr_tracker)
    _track_unknown_attributes(optimizer, kind, attr_tracker)
    if kind == OptimizerType.SGD2 and \
            resolved.attributes["accum_type"] == torch.float16:
        _require_running_mean_strategy(options, is_compiled)
    return _describe(optimizer, resolved, _auto_loss_scaling(options))


def _describe(optimizer: torch.optim.Optimizer, resolved: ResolvedOptimizer,
              auto_loss_scaling: bool) -> Dict[str, Any]:
    def with_constness(values: Dict[str, Any]) -> Dict[str, Any]:
        return {name: (value, _is_constant(optimizer, resolved.kind, name,
                                           value, auto_loss_scaling))
                for name, value in values.items()}

    return {
        "type": resolved.kind.name,
        "attributes": with_constness(resolved.attributes),
        "defaults": with_constness(resolved.defaults),
        "groups": [with_constness(group) for group in resolved.groups],
    }


def _is_constant(optimizer: torch.optim.Optimizer, kind: OptimizerType,
                 name: str, value: Any, auto_loss_scaling: bool) -> bool:
    if name == "loss_scaling" and auto_loss_scaling:
        return False
    if name.endswith("accum_type"):
        # A storage dtype, not a hyper-parameter PopTorch can mark: a new
        # optimizer's types apply (PopTorch refuses only a float16
        # accum_type that needs another reduction strategy, above).
        return False
    variable_attrs = getattr(optimizer, "variable_attrs", None)
    if variable_attrs is not None:
        return variable_attrs.isConstant(name)
    if name == "lr":
        return False
    if name == "weight_decay" and kind in _ADAMW_KINDS:
        return value == 1e-2
    if name in _NATIVE_CONSTANT_VALUES:
        return value == _NATIVE_CONSTANT_VALUES[name]
    # alpha, nesterov, betas, the dtypes and the variant flags.
    return True


def _warn_if_user_subclass(optimizer: torch.optim.Optimizer,
                           kind: OptimizerType,
                           attr_tracker: OptimizerAttrTracker) -> None:
    cls = type(optimizer)
    bases = cls.__bases__
    if cls in _NATIVE_TORCH_TYPES or torch.optim.Optimizer in bases or \
            Optimizer in bases:
        return
    attr_tracker.logOnce(
        logger.warning,
        f"Poptorch does not run Python optimizer code directly: "
        f"{cls.__name__} subclasses {bases[0].__name__}, so its step() and "
        f"any other Python code it overrides will not run. PopTorch runs its "
        f"native {kind.name} optimizer with {cls.__name__}'s "
        f"hyper-parameters instead.")


def _track_unknown_attributes(optimizer: torch.optim.Optimizer,
                              kind: OptimizerType,
                              attr_tracker: OptimizerAttrTracker) -> None:
    family = kind.family
    known_attributes = set(FAMILY_ATTRIBUTES[family]) | _INTERNAL_ATTRIBUTES
    # Callables are methods patched onto the instance (LR schedulers wrap
    # ``step``), not hyper-parameters.
    attr_tracker.checkOptimizerAttributes(
        name for name, value in vars(optimizer).items()
        if not name.startswith("_") and name not in known_attributes and
        not callable(value))
    known_group = _known_group_keys(family)
    attr_tracker.checkDefaultAttributes(
        name for name in optimizer.defaults if name not in known_group)
    for index, group in enumerate(optimizer.param_groups):
        attr_tracker.checkGroupAttributes(
            (name for name in group if name not in known_group), index)
    attr_tracker.enableChecks()


def _known_group_keys(family: str) -> Set[str]:
    known = set(FAMILY_GROUP_ATTRIBUTES[family]) | _BOOKKEEPING_GROUP_KEYS
    for torch_class in _TORCH_CLASSES[family]:
        known.update(torch_arg_names(torch_class))
    return known


def _require_running_mean_strategy(options: Any, is_compiled: bool) -> None:
    """A float16 gradient accumulator overflows when it sums G x R
    micro-batches before dividing, so the mean must be a running one."""
    training = options.Training
    if training.meanAccumulationAndReplicationReductionStrategy == \
            MeanReductionStrategy.Running:
        return
    if is_compiled:
        raise ValueError(_RUNNING_REQUIRED)
    logger.info("A float16 accum_type needs the Running mean reduction "
                "strategy: setting options.Training."
                "meanAccumulationAndReplicationReductionStrategy to "
                "poptorch.MeanReductionStrategy.Running")
    with options.thawed():
        training.setMeanAccumulationAndReplicationReductionStrategy(
            MeanReductionStrategy.Running)


def _auto_loss_scaling(options: Optional[Options]) -> bool:
    if options is None:
        return False
    if options.popartOption("automaticLossScalingSettings.enabled"):
        return True
    settings = options.popartOption("automaticLossScalingSettings", {})
    return isinstance(settings, dict) and bool(settings.get("enabled"))

