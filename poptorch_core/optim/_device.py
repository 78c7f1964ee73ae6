"""The optimizer as it runs on the simulated IPU.

The executor owns one :class:`DeviceOptimizer` per training model. It holds
the device copy of the optimizer state (moments, step counts) next to the
device weights, applies one update per device iteration from the gradients
the executor accumulated, and reads/writes its state under PopART's tensor
names so that ``optimizer.state_dict()`` looks like PopTorch's.

What is simulated (see also :mod:`._algorithms`): the reduction over
micro-batches and replicas, loss-scaling removal, global-norm clipping
(``max_grad_norm``), the update rules, state storage in the requested
accumulation types, a float16 ``accum_type`` rounding the reduced
gradient to float16 before loss scaling is removed, loss scaling removed in
float32 (a scaled float16 gradient too small for float16 once unscaled
still reaches the update), and automatic loss scaling (:mod:`._loss_scaling`:
the factor adapts from the float16 gradients). Not simulated: velocity
scaling (it only changes the range in which the velocity is stored, which
float32 arithmetic does not need).

Example::

    >>> model = torch.nn.Linear(2, 1)
    >>> opt = poptorch.optim.SGD(model.parameters(), lr=0.1)
    >>> device_params = {id(p): p.detach().clone().requires_grad_()
    ...                  for p in model.parameters()}
    >>> dev = DeviceOptimizer(opt, device_params,
    ...                       {id(p): n for n, p in model.named_parameters()})
    >>> for p in device_params.values():   # as the executor accumulates
    ...     p.grad = torch.ones_like(p) * 4 * dev.loss_scaling
    >>> dev.step(grad_divisor=4)   # Mean over 4 micro-batches
    >>> torch.allclose(device_params[id(model.bias)], model.bias - 0.1)
    True
    >>> sorted(dev.read_state())
    ['ipu_param', 'ipu_state']
"""
import logging
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from .._logging import logger
from ._algorithms import init_state, popart_names, slots, storage_dtype, \
    update, update_group
from ._loss_scaling import AutomaticLossScaling
from ._packed import PackedGroup
from ._resolve import ResolvedOptimizer, resolve_optimizer
from ._types import OptimizerType

_LOSS_SCALE_UPDATE_FACTOR = "lossScaleUpdateFactor"
_Group = Tuple[Dict[str, object], List[int]]


class DeviceOptimizer:
    """The device side of a host optimizer (PopTorch or native torch).

    Args:
        host_optimizer: the optimizer the user gave to ``trainingModel``.
        device_params: ``id(host parameter)`` -> the device tensor that the
            executor trains in its place.
        param_names: ``id(host parameter)`` -> its name in the model, used
            in the state's tensor names.
        auto_loss_scaling: the automatic loss scaling settings
            (``Training.setAutomaticLossScaling(True)``; see
            :func:`._loss_scaling.loss_scaling_settings`), or None/False
            when it is off. When on, the factor adapts after every step and
            ``lossScaleUpdateFactor`` is part of the state.

    Raises:
        ValueError: the optimizer holds a parameter that is not one of the
            model's, or the optimizer is invalid (see ``resolve_optimizer``).
    """

    def __init__(self, host_optimizer: torch.optim.Optimizer,
                 device_params: Mapping[int, torch.Tensor],
                 param_names: Mapping[int, str],
                 *, auto_loss_scaling: Any = None) -> None:
        self._device_params = dict(device_params)
        self._param_names = dict(param_names)
        self._auto_loss_scaling = bool(auto_loss_scaling)
        self._als = AutomaticLossScaling(
            auto_loss_scaling if isinstance(auto_loss_scaling, Mapping)
            else {}) if auto_loss_scaling else None
        self._loss_scale_update_factor = 1.0
        #: The loss scale the last step's gradients were scaled by (the
        #: ``finalLossScale`` anchor).
        self.last_loss_scale: Optional[float] = None
        self._state: Dict[int, Dict[str, torch.Tensor]] = {}
        self._resolved: Optional[ResolvedOptimizer] = None
        self._groups: List[_Group] = []
        #: One PackedGroup per group while the fast path is valid (see
        #: ``_packed``'s invariant); None when it must be rebuilt.
        self._packed: Optional[List[Optional[PackedGroup]]] = None
        self._fused_update = False
        self.update_from_host(host_optimizer)

    @property
    def optimizer_type(self) -> OptimizerType:
        """The device optimizer running (e.g. ``OptimizerType.SGD2``)."""
        return self._resolved.kind

    @property
    def fused_update(self) -> bool:
        """Whether packed Adam and AdamW steps run as torch's fused kernel
        (the ``compile`` backend: equal to the rule within float rounding).
        Changing it repacks the groups at the next step, from the current
        values (``auto`` switching to ``compile`` between two steps)."""
        return self._fused_update

    @fused_update.setter
    def fused_update(self, fused: bool) -> None:
        if fused != self._fused_update:
            self._fused_update = fused
            self._packed = None

    @property
    def loss_scaling(self) -> float:
        """The factor the executor multiplies the loss by before backward."""
        return (float(self._resolved.attributes["loss_scaling"]) *
                self._loss_scale_update_factor)

    def update_from_host(self, host_optimizer: torch.optim.Optimizer) -> None:
        """Re-reads hyper-parameters and parameter groups (``setOptimizer``).

        The state is kept when the device optimizer type is unchanged (an LR
        change keeps the momentum) and reset when it changes.
        """
        resolved = resolve_optimizer(host_optimizer)
        self._packed = None  # groups, hyper-parameters or dtypes may change
        groups = [(hp, [self._param_id(p) for p in params])
                  for hp, params in zip(resolved.groups, resolved.params)]
        if self._resolved is not None and resolved.kind != self._resolved.kind:
            logger.debug("Optimizer type changed from %s to %s: resetting "
                         "the optimizer state", self._resolved.kind.name,
                         resolved.kind.name)
            self._state = {}
        self._resolved, self._groups = resolved, groups
        for hp, ids in groups:
            for pid in ids:
                init_state(resolved.kind, self._device_params[pid], hp,
                           resolved.attributes, self._state.setdefault(pid, {}))
        self._log_groups()

    def step(self, grad_divisor: float) -> None:
        """One optimizer update from the accumulated gradients.

        Args:
            grad_divisor: what the summed gradients are divided by: G x R for
                ``ReductionType.Mean``, 1 for ``ReductionType.Sum``.
        """
        if not grad_divisor > 0:
            raise ValueError(f"grad_divisor must be positive, got "
                             f"{grad_divisor}")
        max_norm = self._resolved.attributes.get("max_grad_norm", math.inf)
        self.last_loss_scale = self.loss_scaling
        if self._als is not None:
            self._als.observe(p.grad for p in self._device_params.values())
        with torch.no_grad():
            if math.isfinite(max_norm) or not self._step_packed(grad_divisor):
                self._step_per_group(grad_divisor, max_norm)
        for param in self._device_params.values():
            param.grad = None
        if self._als is not None:
            self._loss_scale_update_factor = self._als.next_factor(
                self._loss_scale_update_factor,
                float(self._resolved.attributes["loss_scaling"]))

    def _step_packed(self, grad_divisor: float) -> bool:
        """The whole step on flat buffers, when every group with gradients
        is packed and exactly its trainable parameters have them; returns
        False, changing nothing, otherwise. A group that cannot be packed
        keeps the per-parameter path until the state changes
        (``update_from_host``, ``write_state``); a step with other
        gradients drops the packing, as the per-parameter path then
        advances only some step counts."""
        groups = []
        for packed, (hp, ids) in zip(self._packed_groups(), self._groups):
            if packed is not None:
                groups.append((packed, hp))
            elif any(self._device_params[pid].grad is not None
                     for pid in ids):
                return False
            # else: nothing to update in this group (frozen or empty).
        if not all(packed.has_exactly_its_grads() for packed, _ in groups):
            self._packed = None
            return False
        for packed, hp in groups:
            self._reduce(packed.gather_grads(), grad_divisor)
            packed.update(hp)
        return True

    def _packed_groups(self) -> List[Optional[PackedGroup]]:
        if self._packed is None:
            kind = self._resolved.kind
            self._packed = [PackedGroup.pack(
                kind, [self._device_params[pid] for pid in ids],
                [self._state[pid] for pid in ids], hp, self.fused_update)
                for hp, ids in self._groups]
        return self._packed

    def fusable_adam(self, assume_fused: bool = False
                     ) -> Optional[Tuple[PackedGroup, Dict[str, Any]]]:
        """The one packed group, with its hyper-parameters, whose Adam or
        AdamW update a compiled training graph may apply itself
        (``_executor.backends.passes.fused_adam``): None when a step needs this
        optimizer (several groups, a group not packed for torch's fused
        kernel, gradient clipping, automatic loss scaling, float16
        accumulation). The caller checks that exactly the packed
        parameters require gradients, and records each step it applies
        (:meth:`record_fused_step`).

        ``assume_fused`` answers as :attr:`fused_update` would make it
        answer, without repacking: the group returned then has the layout
        of the fused one, not its buffers (what the ``auto`` backend
        compiles ahead for)."""
        attrs = self._resolved.attributes
        fused = self.fused_update or assume_fused
        if not fused or self._als is not None or \
                len(self._groups) != 1 or \
                math.isfinite(attrs.get("max_grad_norm", math.inf)) or \
                attrs["accum_type"] == torch.float16:
            return None
        packed = self._packed_groups()[0]
        if packed is None or not (packed.fused or assume_fused and
                                  packed.can_fuse):
            return None
        return packed, self._groups[0][0]

    def record_fused_step(self, packed: PackedGroup) -> None:
        """What :meth:`step` records besides the update, for a step that a
        compiled graph applied to ``packed`` (:meth:`fusable_adam`): the
        step count and the loss scale the gradients had."""
        self.last_loss_scale = self.loss_scaling
        packed.step_count += 1

    def _step_per_group(self, grad_divisor: float, max_norm: float) -> None:
        kind, attrs = self._resolved.kind, self._resolved.attributes
        grads = {pid: self._reduce(self._device_params[pid].grad,
                                   grad_divisor)
                 for _, ids in self._groups for pid in ids
                 if self._device_params[pid].grad is not None}
        if grads and math.isfinite(max_norm):
            _clip(list(grads.values()), max_norm)
        for hp, ids in self._groups:
            ids = [pid for pid in ids if pid in grads]
            params = [self._device_params[pid] for pid in ids]
            if update_group(kind, params, [grads[pid] for pid in ids],
                            [self._state[pid] for pid in ids], hp):
                continue
            for pid, param in zip(ids, params):
                update(kind, param, grads[pid], self._state[pid], hp, attrs)

    def read_state(self) -> Dict[str, Dict[str, torch.Tensor]]:
        """``{"ipu_state": ..., "ipu_param": ...}`` under PopART's names,
        as CPU copies."""
        kind = self._resolved.kind
        names = popart_names(kind)
        ipu_state: Dict[str, torch.Tensor] = {}
        ipu_param: Dict[str, torch.Tensor] = {}
        loss_scaling = self.loss_scaling
        for hp, ids in self._groups:
            for pid in ids:
                param_name = self._param_names[pid]
                for key, tensor in self._state[pid].items():
                    if key in names:
                        ipu_state[f"{names[key]}___{param_name}"] = \
                            _cpu_copy(tensor)
                ipu_param.update(_param_tensors(kind, hp, param_name,
                                                loss_scaling))
        ipu_param["lossScaling_FLOAT"] = _float_tensor(loss_scaling)
        if self._auto_loss_scaling:
            ipu_state[_LOSS_SCALE_UPDATE_FACTOR] = _float_tensor(
                self._loss_scale_update_factor)
        return {"ipu_state": ipu_state, "ipu_param": ipu_param}

    def write_state(self, ipu_state: Mapping[str, torch.Tensor]) -> None:
        """Loads tensors read by :meth:`read_state` (possibly from another
        model's optimizer); tensors missing from ``ipu_state`` keep their
        device values.

        Raises:
            ValueError: a name this optimizer does not have, or a shape that
                does not match.
        """
        if not isinstance(ipu_state, Mapping):
            raise TypeError(f"ipu_state must be a dict of tensors, got "
                            f"{type(ipu_state).__name__}")
        targets = self._state_targets()
        unknown = sorted(key for key in ipu_state
                         if key not in targets and
                         key != _LOSS_SCALE_UPDATE_FACTOR)
        if unknown:
            raise ValueError(
                f"Cannot load optimizer state tensors {unknown} into a "
                f"{self._resolved.kind.name} optimizer: it has no state of "
                f"that name. Load a state saved from the same model and "
                f"optimizer type.")
        pending = []
        for key, value in ipu_state.items():
            if key == _LOSS_SCALE_UPDATE_FACTOR:
                continue
            pid, slot_key, hp = targets[key]
            value = torch.as_tensor(value)
            current = self._state[pid].get(slot_key)
            expected = (self._device_params[pid] if current is None else
                        current).shape
            if value.shape != expected:
                raise ValueError(f"Optimizer state tensor {key} has shape "
                                 f"{tuple(value.shape)} but the device "
                                 f"expects {tuple(expected)}.")
            pending.append((pid, slot_key, hp, value))
        if _LOSS_SCALE_UPDATE_FACTOR in ipu_state:
            self._loss_scale_update_factor = float(
                ipu_state[_LOSS_SCALE_UPDATE_FACTOR])
        for pid, slot_key, hp, value in pending:
            self._slot(pid, slot_key, hp).copy_(value)
        self._packed = None  # the loaded step counts may differ

    def write_torch_state(self, state: Mapping[torch.Tensor,
                                               Mapping[str, object]]) -> None:
        """Loads a state in torch's format (``torch.optim.Optimizer.state``:
        host parameter -> ``{"exp_avg": ..., "step": ...}``), e.g. from an
        optimizer trained on the CPU.

        Raises:
            ValueError: a parameter that is not the model's, or a state
                entry this optimizer type does not have.
        """
        names = popart_names(self._resolved.kind)
        converted: Dict[str, torch.Tensor] = {}
        for param, entries in state.items():
            pid = self._param_id(param)
            for key, value in entries.items():
                # torch's SGD without momentum stores None; RMSprop counts
                # steps it never uses.
                if value is None or (key == "step" and key not in names):
                    continue
                if key not in names:
                    raise ValueError(
                        f"Cannot load the optimizer state entry {key!r} into "
                        f"a {self._resolved.kind.name} optimizer: it has no "
                        "such state. Load a state from the same optimizer "
                        "type (amsgrad is not supported).")
                # write_state makes tensors of numbers (an old torch
                # state's int step) and casts them to each slot's dtype.
                converted[f"{names[key]}___{self._param_names[pid]}"] = value
        self.write_state(converted)

    # -- internals ----------------------------------------------------------
    def _param_id(self, param: torch.Tensor) -> int:
        pid = id(param)
        if pid not in self._device_params or pid not in self._param_names:
            raise ValueError(
                f"The optimizer holds a parameter (shape "
                f"{tuple(param.shape)}) that is not a parameter of the "
                f"model. Build the optimizer from model.parameters().")
        return pid

    def _reduce(self, grad: torch.Tensor,
                grad_divisor: float) -> torch.Tensor:
        """The reduced, unscaled gradient: ``grad`` itself (changed in
        place) when it is float32, else a float32 copy, so that unscaling
        never underflows in float16."""
        if grad.dtype in (torch.float16, torch.bfloat16):
            grad = grad.float()
        # Dividing by 1 is exact: skipping it changes no bit.
        if grad_divisor != 1:
            grad.div_(grad_divisor)
        # The accumulator holds the (still loss-scaled) reduced gradient.
        if self._resolved.attributes["accum_type"] == torch.float16 and \
                grad.dtype == torch.float32:
            grad.copy_(grad.half())
        loss_scaling = self.loss_scaling
        if loss_scaling != 1:
            grad.div_(loss_scaling)
        return grad

    def _state_targets(self) -> Dict[str, Tuple[int, str, Dict[str, object]]]:
        names = popart_names(self._resolved.kind)
        return {f"{prefix}___{self._param_names[pid]}": (pid, key, hp)
                for hp, ids in self._groups for pid in ids
                for key, prefix in names.items()}

    def _slot(self, pid: int, slot_key: str,
              hp: Dict[str, object]) -> torch.Tensor:
        """The state tensor ``slot_key`` of ``pid``, created (uninitialised)
        if the first step has not created it yet (SGD's momentum)."""
        state = self._state[pid]
        if slot_key not in state:
            kind, attrs = self._resolved.kind, self._resolved.attributes
            spec = slots(kind, hp, attrs).get(slot_key)
            dtype = torch.float32 if spec is None else storage_dtype(spec,
                                                                     attrs)
            state[slot_key] = torch.empty_like(self._device_params[pid],
                                               dtype=dtype)
        return state[slot_key]

    def _log_groups(self) -> None:
        if not logger.isEnabledFor(logging.DEBUG):
            return
        kind, loss_scaling = self._resolved.kind, self.loss_scaling
        for index, (hp, _) in enumerate(self._groups):
            parts = [f"{key}={value}" for key, value in hp.items()
                     if key != "velocity_scaling"]
            parts.append(f"lossScaling={loss_scaling:g}")
            if kind.family == "sgd":
                # The separate variant scales the velocity by the loss scale.
                velocity = hp["velocity_scaling"] \
                    if kind == OptimizerType.SGD1 else loss_scaling
                parts.append(f"defaultVelocityScaling={velocity:g}")
            logger.debug("Updating group %d optimizer with %s: %s", index,
                         kind.name, ", ".join(parts))


def _param_tensors(kind: OptimizerType, hp: Mapping[str, object],
                   param_name: str,
                   loss_scaling: float) -> Dict[str, torch.Tensor]:
    """The derived hyper-parameter tensors PopART keeps for one weight."""
    lr, weight_decay = hp["lr"], hp["weight_decay"]
    if kind.family == "sgd":
        scaled_lr = lr * (1 - hp["dampening"])
        return {
            f"scaledLearningRate0___specific___{param_name}":
            _float_tensor(scaled_lr / loss_scaling),
            f"weightDecayScaleFactor0___specific___{param_name}":
            _float_tensor(1 - scaled_lr * weight_decay),
        }
    return {
        f"learningRate___specific___{param_name}": _float_tensor(lr),
        f"weightDecay___specific___{param_name}": _float_tensor(weight_decay),
    }


def _float_tensor(value: float) -> torch.Tensor:
    """A hyper-parameter as the IPU holds it: a float32 scalar, also for
    torch's integer defaults (``weight_decay=0``, ``lr=1``)."""
    return torch.tensor(float(value), dtype=torch.float32)


def _clip(grads: List[torch.Tensor], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_``'s arithmetic, on the reduced
    gradients (float32 copies of float16 gradients included)."""
    total = torch.nn.utils.get_total_norm(grads)
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coefficient)


def _cpu_copy(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", copy=True)
