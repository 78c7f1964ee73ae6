"""PopTorch's own optimizer variants written from their definitions, one
tensor at a time, as references that share no code with the package."""
import torch


class LambReference(torch.optim.Optimizer):
    """LAMB (You et al.) as PopTorch defines it: Adam's moments, an update
    with decoupled weight decay, scaled by the trust ratio
    ``min(|w|, max_weight_norm) / |update|`` (1 when either norm is 0)."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=1e-2, bias_correction=True,
                 max_weight_norm=65500.0):
        super().__init__(params, dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
            bias_correction=bias_correction, max_weight_norm=max_weight_norm))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(t=0, m=torch.zeros_like(p),
                                 v=torch.zeros_like(p))
                state["t"] += 1
                t, g = state["t"], p.grad
                state["m"] = b1 * state["m"] + (1 - b1) * g
                state["v"] = b2 * state["v"] + (1 - b2) * g * g
                bc1, bc2 = (1 - b1**t, 1 - b2**t) \
                    if group["bias_correction"] else (1.0, 1.0)
                upd = (state["m"] / bc1) / \
                    ((state["v"] / bc2).sqrt() + group["eps"]) \
                    + group["weight_decay"] * p
                r1 = min(p.norm().item(), group["max_weight_norm"])
                r2 = upd.norm().item()
                trust = 1.0 if r1 == 0 or r2 == 0 else r1 / r2
                p.sub_(group["lr"] * trust * upd)


class TFRMSpropReference(torch.optim.Optimizer):
    """TensorFlow's RMSprop (``use_tf_variant=True``): the mean square
    starts at one, ``eps`` is inside the square root and the learning rate
    is folded into the momentum."""

    def __init__(self, params, lr, alpha=0.99, eps=1e-8, momentum=0.0,
                 centered=False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps,
                                      momentum=momentum, centered=centered))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            alpha = group["alpha"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(ms=torch.ones_like(p), mg=torch.zeros_like(p),
                                 mom=torch.zeros_like(p))
                g = p.grad
                state["ms"] = alpha * state["ms"] + (1 - alpha) * g * g
                mean_square = state["ms"]
                if group["centered"]:
                    state["mg"] = alpha * state["mg"] + (1 - alpha) * g
                    mean_square = mean_square - state["mg"] ** 2
                delta = group["lr"] * g / torch.sqrt(mean_square + group["eps"])
                if group["momentum"]:
                    state["mom"] = group["momentum"] * state["mom"] + delta
                    delta = state["mom"]
                p.sub_(delta)


class AdamWNoBiasReference(torch.optim.Optimizer):
    """PopTorch's AdamW with ``bias_correction=False``: AdamW's decoupled
    weight decay and moments, with neither moment bias-corrected."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps,
                                      weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=torch.tensor(0.0),
                                 exp_avg=torch.zeros_like(p),
                                 exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                g = p.grad
                state["exp_avg"] = b1 * state["exp_avg"] + (1 - b1) * g
                state["exp_avg_sq"] = b2 * state["exp_avg_sq"] + \
                    (1 - b2) * g * g
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.sub_(group["lr"] * state["exp_avg"] /
                       (state["exp_avg_sq"].sqrt() + group["eps"]))
