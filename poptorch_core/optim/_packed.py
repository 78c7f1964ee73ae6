"""Adam-family parameter groups packed into flat buffers.

The IPU updates all the weights of a group in one fused operation. On the
host the closest match is one flat buffer per quantity (weights, gradients,
the two moments, the step counts) so that an update is a handful of kernels
over the whole group rather than a handful per parameter, which for a
small GNN is most of the update's cost. With ``fused=True`` (the
``compile`` backend) Adam and AdamW take one more step in that direction:
torch's fused kernel makes one pass over the buffers instead of eight,
equal to
the rule within float rounding rather than bit for bit. Where a step is
one micro-batch, that backend applies the kernel's rule inside its compiled
training graph instead (``Program.adam_in_graph``), on these same flat
buffers.

Invariant: while a :class:`PackedGroup` is alive, every parameter of the
group that required gradients when it was packed, and each of its
``exp_avg``/``exp_avg_sq``/``step`` state tensors, is a
view into the group's flat buffers. Parameters are re-pointed with
``Tensor.set_`` so the executor, the traced graph and the weight sync keep
holding the same tensor objects. Whoever replaces a state tensor instead of
writing into it, or updates only part of a group, must drop the packing
(:class:`~._device.DeviceOptimizer` does); :meth:`PackedGroup.pack` then
rebuilds it from the current values.

Example::

    >>> params = [torch.ones(2, 2, requires_grad=True),
    ...           torch.ones(3, requires_grad=True)]
    >>> states = [{"exp_avg": torch.zeros_like(p),
    ...            "exp_avg_sq": torch.zeros_like(p),
    ...            "step": torch.tensor(0.0)} for p in params]
    >>> hp = {"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8,
    ...       "weight_decay": 0.0}
    >>> group = PackedGroup.pack(OptimizerType.ADAM, params, states, hp)
    >>> params[0].untyped_storage().data_ptr() == group.param.data_ptr()
    True
    >>> for p in params:
    ...     p.grad = torch.ones_like(p)
    >>> group.gather_grads().shape
    torch.Size([7])
    >>> group.update(hp)
    >>> params[1]
    tensor([0.9000, 0.9000, 0.9000], requires_grad=True)
"""
from typing import List, Optional, Sequence

import torch

from ._algorithms import HyperParams, State, adam_multi_tensor
from ._types import OptimizerType

_MOMENTS = ("exp_avg", "exp_avg_sq")

#: The kinds whose rule one of torch's fused kernels computes in a single
#: pass (bias-corrected Adam with L2 weight decay, AdamW with decoupled
#: weight decay), for groups packed with ``fused=True``.
_FUSED_KERNELS = {OptimizerType.ADAM: torch._fused_adam_,
                  OptimizerType.ADAMW: torch._fused_adamw_}


def _packable(kind: OptimizerType, params: Sequence[torch.Tensor],
              states: Sequence[State], hp: HyperParams) -> bool:
    if kind.family != "adam" or hp.get("maximize", False) or not params:
        return False
    device = params[0].device
    for param, state in zip(params, states):
        tensors = [param] + [state.get(key) for key in _MOMENTS]
        if any(t is None or t.dtype != torch.float32 or t.device != device
               or not t.is_contiguous() for t in tensors):
            return False
        if "step" not in state or state["step"].dim() != 0:
            return False
    return len({float(state["step"]) for state in states}) == 1


def _flat_views(flat: torch.Tensor, like: Sequence[torch.Tensor]
                ) -> List[torch.Tensor]:
    views, offset = [], 0
    for tensor in like:
        views.append(flat[offset:offset + tensor.numel()].view(tensor.shape))
        offset += tensor.numel()
    return views


class PackedGroup:
    """Flat weights, gradients, moments and step counts of one group.

    Only the parameters that require gradients when the group is packed
    take part (``params``); ``frozen`` ones keep their own memory and are
    never updated, as torch's optimizers skip parameters without a
    gradient."""

    def __init__(self, kind: OptimizerType, params: List[torch.Tensor],
                 states: List[State], frozen: List[torch.Tensor],
                 fused: bool = False):
        self.kind = kind
        #: Run the update as torch's fused kernel where one computes this
        #: kind's rule: one pass over the buffers instead of eight, equal
        #: to the rule within float rounding (not bit for bit).
        self.fused = fused and kind in _FUSED_KERNELS
        #: Whether packing with ``fused=True`` would make :attr:`fused`.
        self.can_fuse = kind in _FUSED_KERNELS
        self.params = params
        self.frozen = frozen
        with torch.no_grad():
            self.param = torch.cat([p.detach().reshape(-1) for p in params])
            storage = self.param.untyped_storage()
            offset = 0
            for param in params:
                # Same tensor object, now a window on the flat weights.
                param.set_(storage, offset, param.shape, param.stride())
                offset += param.numel()
            self.moments = {}
            for key in _MOMENTS:
                flat = torch.cat([st[key].reshape(-1) for st in states])
                for state, view in zip(states, _flat_views(flat, params)):
                    state[key] = view
                self.moments[key] = flat
            self.steps = torch.stack([st["step"] for st in states])
            for i, state in enumerate(states):
                state["step"] = self.steps[i]
        self.step_count = float(self.steps[0])
        self.grad = torch.empty_like(self.param)
        self._grad_views = _flat_views(self.grad, params)

    @classmethod
    def pack(cls, kind: OptimizerType, params: List[torch.Tensor],
             states: List[State], hp: HyperParams, fused: bool = False
             ) -> Optional["PackedGroup"]:
        """Packs the group's trainable parameters, or returns None
        (changing nothing) when it needs the per-parameter path: not
        Adam-family, ``maximize``, no trainable parameter, tensors that are
        not contiguous float32 on one device, or unequal step counts."""
        trainable = [i for i, p in enumerate(params) if p.requires_grad]
        if not _packable(kind, [params[i] for i in trainable],
                         [states[i] for i in trainable], hp):
            return None
        return cls(kind, [params[i] for i in trainable],
                   [states[i] for i in trainable],
                   [p for p in params if not p.requires_grad], fused)

    def has_exactly_its_grads(self) -> bool:
        """Whether this step's gradients are those of the packed
        parameters, no more and no fewer."""
        return all(p.grad is not None for p in self.params) and \
            all(p.grad is None for p in self.frozen)

    def gather_grads(self) -> torch.Tensor:
        """Copies the parameters' ``.grad`` into the flat gradient buffer
        (every packed parameter must have one) and returns the buffer."""
        # One foreach copy into views made once: a ``torch.cat`` of
        # reshaped gradients costs a reshape per parameter.
        torch._foreach_copy_(self._grad_views,
                             [p.grad for p in self.params])
        return self.grad

    def update(self, hp: HyperParams) -> None:
        """One Adam-family step from the reduced flat gradient."""
        with torch.no_grad():
            self.steps.add_(1)
            self.step_count += 1
            moments = [self.moments["exp_avg"]], [self.moments["exp_avg_sq"]]
            if self.fused:
                beta1, beta2 = hp["betas"]
                # The kernel reads the step count (already advanced) from
                # one step tensor per parameter tensor: here the first.
                _FUSED_KERNELS[self.kind](
                    [self.param], [self.grad], *moments, [], [self.steps[0]],
                    lr=hp["lr"], beta1=beta1, beta2=beta2,
                    weight_decay=hp["weight_decay"], eps=hp["eps"],
                    amsgrad=False, maximize=False)
                return
            adam_multi_tensor(self.kind, [self.param], [self.grad], *moments,
                              hp, self.step_count)
