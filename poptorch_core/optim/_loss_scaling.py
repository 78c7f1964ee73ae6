"""Automatic loss scaling, as PopART adapts the loss scale of float16 models.

With ``opts.Training.setAutomaticLossScaling(True)`` the device keeps a
*loss scale update factor* next to the optimizer: the loss is multiplied by
``loss_scaling x factor`` before the backward pass, and the gradients are
divided by the same value (in float32) before the update. After every
``updatePeriod`` optimizer steps the factor adapts from statistics of the
float16 gradients of those steps: the share of gradient elements in the
upper bin of a two-bin histogram whose edge is ``binEdgeLocation`` times the
largest float16 value (non-finite values count as upper). If that share is
above ``thresholdUpperCountProportion`` the gradients are close to
overflowing and the factor halves; otherwise it doubles, so the scale grows
until small gradients no longer underflow. Models without float16 gradients
gather no statistics and keep a factor of 1.

Settings (``opts._Popart.set("automaticLossScalingSettings", {...})`` or
dotted keys) default to PopART's: ``binEdgeLocation=0.0625``,
``thresholdUpperCountProportion=1e-7``, ``updatePeriod=1``. The loss scale
is kept between ``2**-14`` and ``2**15`` so that it stays a normal float16
number, as the scaled float16 gradients must be representable.

Example::

    >>> als = AutomaticLossScaling({})
    >>> als.observe([torch.full((4,), 1e-3, dtype=torch.float16)])
    >>> als.next_factor(1.0, loss_scaling=128.0)   # far from overflow
    2.0
    >>> als.observe([torch.full((4,), float("inf"), dtype=torch.float16)])
    >>> als.next_factor(2.0, loss_scaling=128.0)   # overflow
    1.0
"""
from typing import Any, Iterable, Mapping, Optional

import torch

__all__ = ["AutomaticLossScaling", "loss_scaling_settings"]

_FLOAT16_MAX = float(torch.finfo(torch.float16).max)
MIN_LOSS_SCALE = 2.0 ** -14
MAX_LOSS_SCALE = 2.0 ** 15
_PREFIX = "automaticLossScalingSettings"


def loss_scaling_settings(options: Any) -> Optional[dict]:
    """The automatic loss scaling settings of ``options``, or None when it
    is off."""
    if options is None:
        return None
    settings = options.popartOption(_PREFIX, {})
    settings = dict(settings) if isinstance(settings, dict) else {}
    for key in ("enabled", "binEdgeLocation", "thresholdUpperCountProportion",
                "updatePeriod"):
        value = options.popartOption(f"{_PREFIX}.{key}")
        if value is not None:
            settings[key] = value
    return settings if settings.get("enabled") else None


class AutomaticLossScaling:
    """Gradient statistics and the update rule of the loss scale factor.

    Args:
        settings: PopART's ``automaticLossScalingSettings`` (see the module
            docstring for the keys and defaults).
    """

    def __init__(self, settings: Mapping[str, Any]):
        self.bin_edge = float(settings.get("binEdgeLocation", 0.0625)) * \
            _FLOAT16_MAX
        self.threshold = float(settings.get("thresholdUpperCountProportion",
                                            1e-7))
        self.period = int(settings.get("updatePeriod", 1))
        if not 0 < self.bin_edge <= _FLOAT16_MAX or self.period < 1:
            raise ValueError(
                "automaticLossScalingSettings: binEdgeLocation must be in "
                f"(0, 1] and updatePeriod at least 1, got {settings!r}.")
        self._upper = 0
        self._total = 0
        self._steps = 0

    def observe(self, grads: Iterable[torch.Tensor]) -> None:
        """Adds the float16 tensors of ``grads`` (still loss-scaled) to the
        statistics of the current period."""
        for grad in grads:
            if grad is None or grad.dtype != torch.float16:
                continue
            magnitude = grad.detach().abs()
            upper = (magnitude >= self.bin_edge) | ~torch.isfinite(magnitude)
            self._upper += int(upper.sum())
            self._total += grad.numel()

    def next_factor(self, factor: float, loss_scaling: float) -> float:
        """The factor after one more optimizer step (``loss_scaling`` is the
        user's scale, which the factor multiplies)."""
        self._steps += 1
        if self._steps % self.period or self._total == 0:
            return factor
        share = self._upper / self._total
        self._upper = self._total = 0
        factor = factor * (0.5 if share > self.threshold else 2.0)
        scale = min(max(loss_scaling * factor, MIN_LOSS_SCALE),
                    MAX_LOSS_SCALE)
        return scale / loss_scaling
