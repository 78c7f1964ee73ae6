"""Reads any supported optimizer into one normalised description.

A PopTorch optimizer and the native torch optimizer of the same type with
default PopTorch arguments resolve to the same description: that is what
makes native torch optimizers "behave like the PopTorch defaults". Every
validation rule of the optimizer conversion lives here, so the host-side
conversion and the simulated device reject the same optimizers.

Example::

    >>> model = torch.nn.Linear(4, 2)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> resolved = resolve_optimizer(opt)
    >>> resolved.kind, resolved.attributes["loss_scaling"]
    (<OptimizerType.SGD2: 'sgd2'>, 1.0)
"""
import dataclasses
from typing import Any, Dict, List, Tuple

import torch

from ._classes import LAMB
from ._types import ALL_OPTIMIZER_ATTRIBUTES, EXTRA_DEFAULTS, FAMILY_ATTRIBUTES, \
    FAMILY_GROUP_ATTRIBUTES, GROUP_DEFAULTS, OptimizerType, check_accum_type

_SUPPORTED = ("torch.optim.SGD", "torch.optim.Adam", "torch.optim.AdamW",
              "torch.optim.RMSprop", "poptorch.optim.LAMB")


@dataclasses.dataclass(frozen=True)
class ResolvedOptimizer:
    """An optimizer's type and hyper-parameters, with defaults filled in.

    Attributes:
        kind: the device optimizer to run.
        attributes: optimizer-wide attributes (loss scaling, accum types...).
        defaults: the per-group hyper-parameters of ``optimizer.defaults``.
        groups: the hyper-parameters of each parameter group.
        params: the host parameters of each group.
    """
    kind: OptimizerType
    attributes: Dict[str, Any]
    defaults: Dict[str, Any]
    groups: Tuple[Dict[str, Any], ...]
    params: Tuple[Tuple[torch.Tensor, ...], ...]


def resolve_optimizer(optimizer: torch.optim.Optimizer) -> ResolvedOptimizer:
    """Validates ``optimizer`` and reads its type and hyper-parameters.

    Raises:
        AssertionError: unsupported type, bad accumulation type, or groups
            that disagree on ``centered`` / ``decoupled_weight_decay``.
        ValueError: amsgrad, ``use_tf_variant`` on a non-RMSprop optimizer,
            or an optimizer-wide attribute set in a parameter group.
    """
    kind = optimizer_kind(optimizer)
    family = kind.family
    names = FAMILY_ATTRIBUTES[family]
    attributes = {name: _plain(getattr(optimizer, name, EXTRA_DEFAULTS[name]))
                  for name in names}
    for name, value in attributes.items():
        if name.endswith("accum_type"):
            check_accum_type(value)
    if attributes["use_tf_variant"] and family != "rmsprop":
        raise ValueError("use_tf_variant is only available with RMSProp "
                         "optimizers.")
    if family == "adam" and any(group.get("amsgrad", False)
                                for group in optimizer.param_groups):
        raise ValueError("Only non-amsgrad Adam/AdamW optimizers are "
                         "supported.")
    _check_no_global_in_groups(optimizer)
    group_names = FAMILY_GROUP_ATTRIBUTES[family]
    return ResolvedOptimizer(
        kind=kind,
        attributes=attributes,
        defaults=_group_values(optimizer.defaults, group_names),
        groups=tuple(_group_values(group, group_names)
                     for group in optimizer.param_groups),
        params=tuple(tuple(group["params"])
                     for group in optimizer.param_groups))


def optimizer_kind(optimizer: torch.optim.Optimizer) -> OptimizerType:
    """The device optimizer type for ``optimizer`` (PopTorch's mapping)."""
    if isinstance(optimizer, type):
        package = {"torch": "torch.optim.", "poptorch_core":
                   "poptorch.optim."}.get(optimizer.__module__.split(".")[0],
                                          "")
        name = package + optimizer.__name__
        raise TypeError(
            f"optimizer is the class {name}, not an optimizer: create one "
            f"for the model's parameters, e.g. {name}(model.parameters(), "
            "lr=0.01), and pass that.")
    if isinstance(optimizer, torch.optim.SGD):
        if getattr(optimizer, "use_combined_accum",
                   EXTRA_DEFAULTS["use_combined_accum"]):
            return OptimizerType.SGD1
        return OptimizerType.SGD2
    if isinstance(optimizer, torch.optim.Adam):
        # torch 2.13's AdamW is an Adam with decoupled weight decay, and
        # Adam(decoupled_weight_decay=True) is the same algorithm.
        if not _common_group_flag(
                optimizer, "decoupled_weight_decay",
                default=isinstance(optimizer, torch.optim.AdamW)):
            return OptimizerType.ADAM
        if getattr(optimizer, "bias_correction", True):
            return OptimizerType.ADAMW
        return OptimizerType.ADAMW_NO_BIAS
    if isinstance(optimizer, torch.optim.RMSprop):
        if _common_group_flag(optimizer, "centered"):
            return OptimizerType.RMSPROP_CENTERED
        return OptimizerType.RMSPROP
    if isinstance(optimizer, LAMB):
        if getattr(optimizer, "bias_correction", True):
            return OptimizerType.LAMB
        return OptimizerType.LAMB_NO_BIAS
    raise AssertionError(
        "Unsupported optimizer type. Types supported "
        f"{list(_SUPPORTED)}")


def _common_group_flag(optimizer: torch.optim.Optimizer, flag: str,
                      default: bool = False) -> bool:
    """The common value of the boolean group attribute ``flag``; asserts
    that every group has the same (a device optimizer has one variant)."""
    values = {bool(group.get(flag, default)) for group in optimizer.param_groups}
    if len(values) > 1:
        raise AssertionError(
            f"All parameter groups of a {type(optimizer).__name__} optimizer "
            f"must use the same value of '{flag}', got {sorted(values)}.")
    return values == {True}


def _check_no_global_in_groups(optimizer: torch.optim.Optimizer) -> None:
    # These exist once per optimizer on the device: a value in a group
    # would be silently ignored, so refuse it and say where it belongs.
    sources: List[Tuple[str, Dict[str, Any]]] = [("defaults",
                                                  optimizer.defaults)]
    sources += [(f"param_groups[{i}]", group)
                for i, group in enumerate(optimizer.param_groups)]
    for where, group in sources:
        misplaced = sorted(ALL_OPTIMIZER_ATTRIBUTES.intersection(group))
        if misplaced:
            raise ValueError(
                f"Optimizer attribute(s) {misplaced} found in optimizer."
                f"{where}: they apply to the whole optimizer and cannot be "
                f"set per parameter group. Set them on the optimizer object "
                f"instead (e.g. optimizer.{misplaced[0]} = ...).")


def _group_values(group: Dict[str, Any],
                  names: Tuple[str, ...]) -> Dict[str, Any]:
    return {name: _plain(group[name] if name in group else
                         GROUP_DEFAULTS[name]) for name in names}


def _plain(value: Any) -> Any:
    """Python scalars for tensor hyper-parameters (torch allows a tensor
    ``lr`` or ``betas``), so descriptions compare with ``==``."""
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return value
