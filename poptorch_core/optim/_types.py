"""Optimizer kinds and the default values of PopTorch's extra arguments.

These tables are shared by the optimizer classes (which fill in defaults for
arguments passed as ``None``), by the conversion to a device description and
by the simulated device optimizer, so that a native ``torch.optim`` optimizer
behaves exactly like a PopTorch one built with default arguments.
"""
import enum
import math
from typing import Any, Dict, Tuple

import torch


class OptimizerType(enum.Enum):
    """The device optimizer that PopTorch selects for a host optimizer.

    ``SGD1`` is SGD with combined accumulator and momentum, ``SGD2`` the
    separate variant (PopTorch's default).
    """
    SGD1 = "sgd1"
    SGD2 = "sgd2"
    ADAM = "adam"
    ADAMW = "adamw"
    ADAMW_NO_BIAS = "adamw_no_bias"
    RMSPROP = "rmsprop"
    RMSPROP_CENTERED = "rmsprop_centered"
    LAMB = "lamb"
    LAMB_NO_BIAS = "lamb_no_bias"

    @property
    def family(self) -> str:
        """The update rule: ``"sgd"``, ``"adam"``, ``"rmsprop"`` or ``"lamb"``."""
        return _FAMILIES[self]


_FAMILIES = {
    OptimizerType.SGD1: "sgd",
    OptimizerType.SGD2: "sgd",
    OptimizerType.ADAM: "adam",
    OptimizerType.ADAMW: "adam",
    OptimizerType.ADAMW_NO_BIAS: "adam",
    OptimizerType.RMSPROP: "rmsprop",
    OptimizerType.RMSPROP_CENTERED: "rmsprop",
    OptimizerType.LAMB: "lamb",
    OptimizerType.LAMB_NO_BIAS: "lamb",
}

#: Defaults of every PopTorch-only argument (``None`` means "this default").
EXTRA_DEFAULTS: Dict[str, Any] = {
    "loss_scaling": 1.0,
    "velocity_scaling": 1.0,
    "use_combined_accum": False,
    "accum_type": torch.float32,
    "velocity_accum_type": torch.float32,
    "first_order_momentum_accum_type": torch.float32,
    "second_order_momentum_accum_type": torch.float32,
    "max_grad_norm": math.inf,
    "bias_correction": True,
    "use_tf_variant": False,
    "max_weight_norm": 65500.0,
}

#: Optimizer-wide attributes (set on the optimizer object, never per group)
#: that each family reads. ``use_tf_variant`` is read by every family so
#: that setting it on a non-RMSprop optimizer is an error, not a no-op.
FAMILY_ATTRIBUTES: Dict[str, Tuple[str, ...]] = {
    "sgd": ("loss_scaling", "use_combined_accum", "accum_type",
            "velocity_accum_type", "max_grad_norm", "use_tf_variant"),
    "adam": ("loss_scaling", "bias_correction", "accum_type",
             "first_order_momentum_accum_type",
             "second_order_momentum_accum_type", "max_grad_norm",
             "use_tf_variant"),
    "rmsprop": ("loss_scaling", "accum_type",
                "first_order_momentum_accum_type",
                "second_order_momentum_accum_type", "use_tf_variant"),
    "lamb": ("loss_scaling", "bias_correction", "accum_type",
             "first_order_momentum_accum_type",
             "second_order_momentum_accum_type", "use_tf_variant"),
}

#: Per-group hyper-parameters that each family's update rule reads.
FAMILY_GROUP_ATTRIBUTES: Dict[str, Tuple[str, ...]] = {
    "sgd": ("lr", "momentum", "dampening", "weight_decay", "nesterov",
            "maximize", "velocity_scaling"),
    "adam": ("lr", "betas", "eps", "weight_decay", "maximize"),
    "rmsprop": ("lr", "alpha", "eps", "weight_decay", "momentum", "centered",
                "maximize"),
    "lamb": ("lr", "betas", "eps", "weight_decay", "max_weight_norm"),
}

#: Defaults for group keys that a native torch optimizer does not have.
GROUP_DEFAULTS: Dict[str, Any] = {
    "maximize": False,
    "velocity_scaling": EXTRA_DEFAULTS["velocity_scaling"],
    "max_weight_norm": EXTRA_DEFAULTS["max_weight_norm"],
}

#: Every optimizer-wide attribute name PopTorch knows, whatever the family.
ALL_OPTIMIZER_ATTRIBUTES = frozenset(
    name for names in FAMILY_ATTRIBUTES.values() for name in names)

ACCUM_TYPES = (torch.float16, torch.float32)
ACCUM_TYPE_ERROR = ("Accumulation types must be either torch.float32 or "
                    "torch.float16")


def check_accum_type(value: Any) -> None:
    """Asserts that ``value`` is a dtype PopTorch can accumulate in."""
    if value not in ACCUM_TYPES:
        raise AssertionError(ACCUM_TYPE_ERROR)
