"""A training micro-batch and its Adam update as one compiled graph.

The ``compile`` backend traces a micro-batch's forward and backward pass
as one graph (``passes.training_step``); the executor then adds the gradients
to ``.grad``, copies them into the optimizer's flat gradient buffer and runs
torch's fused Adam kernel over the packed group (``optim._packed``). Each
of those steps starts on caches the graph has just flushed, and together
they take many times the update's own arithmetic
(``docs/design/compile_backend.rst``).

When one step is exactly one micro-batch and one packed Adam or AdamW
group (see ``Program._fused_adam``), the traced graph applies the update
itself. Its inputs are the placeholders other than the packed parameters,
then the group's flat weights, first and second moments and step counts
(``optim._packed.PackedGroup``), the update's coefficients and the loss
scaling. The parameters are windows on the flat weights (``Tensor.set_``),
so the graph takes the flat buffer once and slices the parameters out of
it: passing the windows as well would make the inputs alias each other.
The gradients are autograd's, as in ``passes.training_step``; the update is the
rule of torch's fused kernel (:func:`adam_update`), written back into the
flat buffers, which inductor stores in place. The graph returns the
captured graph's outputs (copied where they are views, which must not see
the update).

The coefficients are one float32 tensor (:func:`adam_coefficients`),
computed in double and rounded to float32 where the fused kernel rounds
them, so a learning-rate schedule does not recompile. Rounding differs only
where the kernel uses a fused multiply-add (the first moment's ``lerp``):
the weights agree with the kernel's to float rounding, as the kernel's
agree with the per-parameter rule.

Example (one weight of 3 x 2, and an input)::

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def model(w, x):
    ...     out = x @ w
    ...     return out, (out ** 2).mean()
    >>> w, x = torch.ones(3, 2, requires_grad=True), torch.ones(4, 3)
    >>> state = FusedAdamState(torch.ones(6), torch.zeros(6),
    ...                        torch.zeros(6), torch.zeros(1))
    >>> step = trace_fused_adam_step(make_fx(model)(w, x), [w, x], 1,
    ...                              FusedAdamKey((0,), False, False), state)
    >>> step.other_positions  # the placeholders passed as they are
    [1]
    >>> coefficients = adam_coefficients(0.1, (0.9, 0.999), 1e-8, 0.0,
    ...                                  step=1, loss_scaling=1.0)
    >>> out, loss = step.graph_module(x, state.param, state.exp_avg,
    ...                               state.exp_avg_sq, state.steps,
    ...                               coefficients, torch.tensor(1.0))
    >>> loss, state.steps
    (tensor(9.), tensor([1.]))
    >>> state.param  # a first Adam step moves each weight by the rate
    tensor([0.9000, 0.9000, 0.9000, 0.9000, 0.9000, 0.9000])
"""
import dataclasses
import itertools
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

#: Positions in the coefficient tensor (:func:`adam_coefficients`).
(_LOSS_SCALING, _WEIGHT_DECAY, _ONE_MINUS_BETA1, _BETA2, _ONE_MINUS_BETA2,
 _CORRECTION2_SQRT, _EPS, _NEG_STEP_SIZE, _DECAY) = range(9)
_NUM_COEFFICIENTS = _DECAY + 1


@dataclasses.dataclass(frozen=True)
class FusedAdamKey:
    """What a traced update is specific to, besides the tensors' dtypes."""
    #: Placeholder positions of the packed parameters, in packing order.
    positions: Tuple[int, ...]
    #: AdamW: weight decay applied to the weights, not the gradient.
    decoupled: bool
    #: Whether the weight decay is non-zero (the kernel skips it at 0).
    weight_decay: bool


@dataclasses.dataclass
class FusedAdamState:
    """The packed group's flat buffers, updated in place by the graph."""
    param: torch.Tensor
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    #: One step count per packed parameter (all equal).
    steps: torch.Tensor


@dataclasses.dataclass
class FusedAdamStep:
    """The traced graph: ``graph_module(*others, param, exp_avg,
    exp_avg_sq, steps, coefficients, scale)`` returns the captured graph's
    outputs and updates the flat buffers, ``others`` being the placeholders
    at :attr:`other_positions`."""
    graph_module: torch.fx.GraphModule
    other_positions: List[int]


def step_inputs(tensors: Sequence[torch.Tensor], others: Sequence[int],
                state: FusedAdamState,
                coefficients: Optional[torch.Tensor] = None,
                scale: Optional[float] = None) -> List[torch.Tensor]:
    """The traced graph's inputs, in its order: the placeholders of
    ``tensors`` at ``others``, the flat buffers of ``state``, the
    coefficients and the loss scaling (example values where None)."""
    if coefficients is None:
        coefficients = torch.zeros(_NUM_COEFFICIENTS)
    return [tensors[i].detach() for i in others] + [
        state.param, state.exp_avg, state.exp_avg_sq, state.steps,
        coefficients,
        torch.tensor(1.0 if scale is None else scale, dtype=torch.float32)]


def adam_coefficients(lr: float, betas: Tuple[float, float], eps: float,
                      weight_decay: float, step: float,
                      loss_scaling: float) -> torch.Tensor:
    """The update's scalars for step number ``step`` (counted from 1), as
    torch's fused kernel computes them: in double, then rounded to
    float32."""
    beta1, beta2 = betas
    return torch.tensor(
        [loss_scaling, weight_decay, 1 - beta1, beta2, 1 - beta2,
         math.sqrt(1 - beta2 ** step), eps, -lr / (1 - beta1 ** step),
         1 - lr * weight_decay], dtype=torch.float32)


def adam_update(param: torch.Tensor, grad: torch.Tensor,
                exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                coefficients: torch.Tensor, key: FusedAdamKey
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """New weights and moments from the loss-scaled gradient ``grad``,
    in the fused kernel's order of operations."""
    c = coefficients
    grad = grad / c[_LOSS_SCALING]
    if key.weight_decay and not key.decoupled:
        grad = grad + param * c[_WEIGHT_DECAY]
    if key.weight_decay and key.decoupled:
        param = param * c[_DECAY]
    exp_avg = torch.lerp(exp_avg, grad, c[_ONE_MINUS_BETA1])
    exp_avg_sq = exp_avg_sq * c[_BETA2] + c[_ONE_MINUS_BETA2] * grad * grad
    denom = exp_avg_sq.sqrt() / c[_CORRECTION2_SQRT] + c[_EPS]
    return param + c[_NEG_STEP_SIZE] * exp_avg / denom, exp_avg, exp_avg_sq


class _NotFusable(Exception):
    """A packed parameter gets no gradient: the update must skip it, as
    the per-parameter path does."""


def trace_fused_adam_step(graph_module: torch.fx.GraphModule,
                          tensors: Sequence[torch.Tensor], loss_index: int,
                          key: FusedAdamKey, state: FusedAdamState
                          ) -> Optional[FusedAdamStep]:
    """Traces ``graph_module`` on tensors like ``tensors`` with its
    backward pass and the Adam update of the packed parameters (see the
    module docstring); None when some packed parameter would get no
    gradient."""
    packed = set(key.positions)
    others = [i for i in range(len(tensors)) if i not in packed]
    shapes = [tensors[i].shape for i in key.positions]
    sizes = [tensors[i].numel() for i in key.positions]
    starts = list(itertools.accumulate([0] + sizes[:-1]))
    # The windows' own layout (``PackedGroup`` packs them contiguously, in
    # this order).
    strides = [tensors[i].stride() for i in key.positions]

    def step(*flat: torch.Tensor) -> List[torch.Tensor]:
        *rest, param, exp_avg, exp_avg_sq, steps, coefficients, scale = flat
        # One op per parameter (fewer graph nodes compile faster): each
        # window is a leaf, so no gradient flows back through it.
        views = [param.as_strided(shape, stride, start).requires_grad_()
                 for shape, stride, start in zip(shapes, strides, starts)]
        inputs: List[torch.Tensor] = [None] * len(tensors)  # type: ignore
        for i, tensor in zip(others, rest):
            inputs[i] = tensor
        for i, view in zip(key.positions, views):
            inputs[i] = view
        outputs = list(graph_module(*inputs))
        loss = outputs[loss_index]
        seed = loss if loss.dim() == 0 else loss.sum()
        if not seed.requires_grad:
            raise _NotFusable
        grads = torch.autograd.grad(seed * scale.to(seed.dtype), views,
                                    allow_unused=True)
        if any(g is None for g in grads):
            raise _NotFusable
        # An output that is a view of a weight would see the update.
        outputs = [(out.clone() if out._is_view() else out).detach()
                   for out in outputs]
        with torch.no_grad():
            new = adam_update(param, torch.cat([g.reshape(-1) for g in grads]),
                              exp_avg, exp_avg_sq, coefficients, key)
            for target, value in zip((param, exp_avg, exp_avg_sq), new):
                target.copy_(value)
            steps.add_(1)
        return outputs

    try:
        with torch.enable_grad():
            traced = make_fx(step, tracing_mode="fake")(
                *step_inputs(tensors, others, state))
    except _NotFusable:
        return None
    return FusedAdamStep(traced, others)
