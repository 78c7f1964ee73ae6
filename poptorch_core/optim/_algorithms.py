"""Per-parameter update rules of the simulated device optimizers.

Each rule updates one parameter in place from its (already reduced, unscaled
and clipped) gradient, its state slots and its group's hyper-parameters.

What is simulated: arithmetic runs in float32 (or float64 for float64
tensors); state slots are *stored* in the accumulation type the optimizer
asks for (``float16`` state is rounded on every write, as on the IPU);
parameters of any floating dtype are written back in their own dtype.
The rules follow torch's single-tensor implementations, except where
PopTorch defines its own variant (AdamW without bias correction, the
TensorFlow variant of RMSprop, LAMB).

Example::

    >>> p, g = torch.ones(3), torch.full((3,), 0.5)
    >>> state = {}
    >>> hp = {"lr": 0.1, "momentum": 0.0, "dampening": 0.0,
    ...       "weight_decay": 0.0, "nesterov": False, "maximize": False}
    >>> init_state(OptimizerType.SGD2, p, hp, {}, state)
    >>> update(OptimizerType.SGD2, p, g, state, hp, {})
    >>> p
    tensor([0.9500, 0.9500, 0.9500])
"""
import math
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional

import torch

from ._types import OptimizerType

HyperParams = Mapping[str, Any]
State = Dict[str, torch.Tensor]


class Slot(NamedTuple):
    """One state tensor of a parameter.

    Attributes:
        dtype_attr: optimizer attribute giving its storage dtype (None:
            float32).
        fill: initial value, or None when the first update creates it.
        scalar: one value per parameter (a step count), kept on the CPU.
    """
    dtype_attr: Optional[str]
    fill: Optional[float]
    scalar: bool = False


_FIRST = "first_order_momentum_accum_type"
_SECOND = "second_order_momentum_accum_type"


def slots(kind: OptimizerType, hp: HyperParams,
          attrs: Mapping[str, Any]) -> Dict[str, Slot]:
    """The state slots a parameter of a group with ``hp`` needs."""
    family = kind.family
    if family == "sgd":
        # Created by the first step: torch starts the momentum from the
        # first gradient itself, which no zero or one fill can reproduce.
        return {"momentum_buffer": Slot("velocity_accum_type", None)}
    if family in ("adam", "lamb"):
        return {"exp_avg": Slot(_FIRST, 0.0),
                "exp_avg_sq": Slot(_SECOND, 0.0),
                "step": Slot(None, 0.0, scalar=True)}
    # RMSprop. The TensorFlow variant starts the mean square at one.
    tf_variant = attrs.get("use_tf_variant", False)
    result = {"square_avg": Slot(_SECOND, 1.0 if tf_variant else 0.0)}
    if hp["centered"]:
        result["grad_avg"] = Slot(_FIRST, 0.0)
    if hp["momentum"] > 0:
        result["momentum_buffer"] = Slot(_FIRST, 0.0)
    return result


def popart_names(kind: OptimizerType) -> Dict[str, str]:
    """State key -> prefix of its device name (``Accl1___<param>``) for
    every slot ``kind`` can have."""
    family = kind.family
    if family == "sgd":
        return {"momentum_buffer":
                "Accl" if kind == OptimizerType.SGD1 else "Accl1"}
    if family in ("adam", "lamb"):
        return {"exp_avg": "Accl1", "exp_avg_sq": "Accl2", "step": "Step"}
    names = {"square_avg": "Accl1", "momentum_buffer": "Accl3"}
    if kind == OptimizerType.RMSPROP_CENTERED:
        names["grad_avg"] = "Accl2"
    return names


def storage_dtype(slot: Slot, attrs: Mapping[str, Any]) -> torch.dtype:
    """The dtype ``slot`` is stored in."""
    if slot.dtype_attr is None:
        return torch.float32
    return attrs.get(slot.dtype_attr, torch.float32)


def init_state(kind: OptimizerType, param: torch.Tensor, hp: HyperParams,
               attrs: Mapping[str, Any], state: State) -> None:
    """Creates the missing slots of ``state`` and converts existing ones to
    their (possibly changed) storage dtype."""
    for key, slot in slots(kind, hp, attrs).items():
        dtype = storage_dtype(slot, attrs)
        current = state.get(key)
        if current is not None:
            if current.dtype != dtype:
                state[key] = current.to(dtype)
        elif slot.scalar:
            state[key] = torch.tensor(slot.fill, dtype=dtype)
        elif slot.fill is not None:
            state[key] = torch.full_like(param, slot.fill, dtype=dtype)


def update(kind: OptimizerType, param: torch.Tensor, grad: torch.Tensor,
           state: State, hp: HyperParams, attrs: Mapping[str, Any]) -> None:
    """Applies one step of ``kind``'s rule to ``param`` (in place)."""
    with torch.no_grad():
        _UPDATES[kind.family](kind, param, grad, state, hp, attrs)


def update_group(kind: OptimizerType, params: List[torch.Tensor],
                 grads: List[torch.Tensor], states: List[State],
                 hp: HyperParams) -> bool:
    """Applies one step to a whole parameter group with multi-tensor
    (``torch._foreach_*``) kernels, as the IPU updates all weights in one
    fused op. Returns False, changing nothing, when the group needs the
    per-parameter path (non-float32 tensors or state, unequal step counts,
    a family without a multi-tensor rule).

    The arithmetic is the per-parameter rule's, op for op.
    """
    if kind.family != "adam" or hp.get("maximize", False) or not params:
        return False
    tensors = params + grads + [st[k] for st in states
                                for k in ("exp_avg", "exp_avg_sq")]
    if any(t.dtype != torch.float32 for t in tensors):
        return False
    steps = {float(st["step"]) for st in states}
    if len(steps) != 1:
        return False
    with torch.no_grad():
        for st in states:
            st["step"] += 1
    adam_multi_tensor(kind, params, grads, [st["exp_avg"] for st in states],
                      [st["exp_avg_sq"] for st in states], hp,
                      steps.pop() + 1)
    return True


def adam_multi_tensor(kind: OptimizerType, params: List[torch.Tensor],
                      grads: List[torch.Tensor],
                      exp_avgs: List[torch.Tensor],
                      exp_avg_sqs: List[torch.Tensor], hp: HyperParams,
                      step: float) -> None:
    """The Adam-family arithmetic of :func:`update_group` on float32 lists,
    ``step`` being the step count after this update (the caller advances
    the stored counts). Element for element the per-parameter rule's ops,
    so flat and per-parameter tensors give identical results."""
    lr, wd = hp["lr"], hp["weight_decay"]
    beta1, beta2 = hp["betas"]
    with torch.no_grad():
        if wd != 0:
            if kind in (OptimizerType.ADAMW, OptimizerType.ADAMW_NO_BIAS):
                torch._foreach_mul_(params, 1 - lr * wd)
            else:
                grads = torch._foreach_add(grads, params, alpha=wd)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        bc1, bc2 = _bias_corrections(kind, hp, step)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, math.sqrt(bc2))
        torch._foreach_add_(denom, hp["eps"])
        torch._foreach_addcdiv_(params, exp_avgs, denom, value=-lr / bc1)


def _work(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor to do arithmetic in: ``tensor`` itself when it already is
    float32/float64 (updates then happen in place), else a float32 copy."""
    if tensor.dtype in (torch.float32, torch.float64):
        return tensor
    return tensor.float()


def _store(dst: torch.Tensor, work: torch.Tensor) -> None:
    if work is not dst:
        dst.copy_(work)


def _grad(grad: torch.Tensor, hp: HyperParams) -> torch.Tensor:
    # Never modified in place: it may alias the caller's .grad.
    grad = _work(grad)
    return -grad if hp.get("maximize", False) else grad


def _sgd(kind, param, grad, state, hp, attrs) -> None:
    w, g = _work(param), _grad(grad, hp)
    if hp["weight_decay"] != 0:
        g = g.add(w, alpha=hp["weight_decay"])
    momentum = hp["momentum"]
    if momentum != 0:
        stored = state.get("momentum_buffer")
        if stored is None:
            buf = g.clone()
            dtype = attrs.get("velocity_accum_type", torch.float32)
            state["momentum_buffer"] = buf if buf.dtype == dtype else buf.to(dtype)
        else:
            buf = _work(stored)
            buf.mul_(momentum).add_(g, alpha=1 - hp["dampening"])
            _store(stored, buf)
        g = g.add(buf, alpha=momentum) if hp["nesterov"] else buf
    w.add_(g, alpha=-hp["lr"])
    _store(param, w)


def _bias_corrections(kind: OptimizerType, hp: HyperParams,
                      step: float) -> tuple:
    if kind in (OptimizerType.ADAMW_NO_BIAS, OptimizerType.LAMB_NO_BIAS):
        return 1.0, 1.0
    beta1, beta2 = hp["betas"]
    return 1 - beta1**step, 1 - beta2**step


def _moments(kind, grad, state, hp):
    """Advances the step count and the two moments; returns the step-size
    terms ``(m, v, bias_correction1, bias_correction2)`` in float32."""
    beta1, beta2 = hp["betas"]
    state["step"] += 1
    m, v = _work(state["exp_avg"]), _work(state["exp_avg_sq"])
    m.lerp_(grad, 1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    _store(state["exp_avg"], m)
    _store(state["exp_avg_sq"], v)
    return (m, v) + _bias_corrections(kind, hp, float(state["step"]))


def _adam(kind, param, grad, state, hp, attrs) -> None:
    w, g = _work(param), _grad(grad, hp)
    lr, wd = hp["lr"], hp["weight_decay"]
    if wd != 0:
        if kind in (OptimizerType.ADAMW, OptimizerType.ADAMW_NO_BIAS):
            w.mul_(1 - lr * wd)
        else:
            g = g.add(w, alpha=wd)
    m, v, bc1, bc2 = _moments(kind, g, state, hp)
    denom = (v.sqrt() / math.sqrt(bc2)).add_(hp["eps"])
    w.addcdiv_(m, denom, value=-lr / bc1)
    _store(param, w)


def _lamb(kind, param, grad, state, hp, attrs) -> None:
    w, g = _work(param), _work(grad)
    m, v, bc1, bc2 = _moments(kind, g, state, hp)
    upd = (m / bc1) / (v.sqrt() / math.sqrt(bc2) + hp["eps"])
    if hp["weight_decay"] != 0:
        upd.add_(w, alpha=hp["weight_decay"])
    r1 = w.norm().clamp(max=hp["max_weight_norm"])
    r2 = upd.norm()
    # A zero weight or update norm makes the trust ratio meaningless: use 1.
    trust = torch.where((r1 == 0) | (r2 == 0), torch.ones_like(r1), r1 / r2)
    w.sub_(upd * (hp["lr"] * trust))
    _store(param, w)


def _rmsprop(kind, param, grad, state, hp, attrs) -> None:
    w, g = _work(param), _grad(grad, hp)
    lr, alpha, eps = hp["lr"], hp["alpha"], hp["eps"]
    tf_variant = attrs.get("use_tf_variant", False)
    if hp["weight_decay"] != 0:
        g = g.add(w, alpha=hp["weight_decay"])
    square_avg = _work(state["square_avg"])
    square_avg.mul_(alpha).addcmul_(g, g, value=1 - alpha)
    _store(state["square_avg"], square_avg)
    mean_square = square_avg
    if hp["centered"]:
        grad_avg = _work(state["grad_avg"])
        grad_avg.lerp_(g, 1 - alpha)
        _store(state["grad_avg"], grad_avg)
        mean_square = square_avg.addcmul(grad_avg, grad_avg, value=-1)
    if tf_variant:  # eps inside the square root
        denom = mean_square.add(eps).sqrt_()
    else:
        denom = mean_square.sqrt().add_(eps)
    if hp["momentum"] > 0:
        buf = _work(state["momentum_buffer"])
        # The TF variant folds the learning rate into the momentum buffer.
        buf.mul_(hp["momentum"]).addcdiv_(g, denom, value=lr if tf_variant else 1.0)
        _store(state["momentum_buffer"], buf)
        if tf_variant:
            w.sub_(buf)
        else:
            w.add_(buf, alpha=-lr)
    else:
        w.addcdiv_(g, denom, value=-lr)
    _store(param, w)


_UPDATES: Dict[str, Callable[..., None]] = {
    "sgd": _sgd,
    "adam": _adam,
    "rmsprop": _rmsprop,
    "lamb": _lamb,
}
