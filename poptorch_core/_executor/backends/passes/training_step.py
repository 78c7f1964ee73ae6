"""A micro-batch's forward pass, loss seed and gradients as one graph.

Given a graph that requires gradients, ``compile_fx`` (through AOTAutograd)
splits it into a forward and a backward graph, compiles each and runs them
as an ``autograd.Function``: every training step then pays for AOTAutograd's
runtime wrappers, the autograd engine, one ``AccumulateGrad`` node per
parameter and the activations the forward graph saves for the backward
one: a sizeable share of a GNN step, outside the two compiled graphs
(``docs/design/compile_backend.rst``).

The ``compile`` backend traces the whole micro-batch step instead, with
``make_fx``: the captured graph, its final loss summed to a scalar (the
seed the executor back-propagates) times the loss scaling, and
``torch.autograd.grad`` of that seed with respect to the placeholders that
require gradients (the trainable parameters). The traced graph returns the
captured graph's outputs, detached, followed by one gradient per parameter
the loss depends on. It has no input that requires gradients, so inductor
compiles it as one inference graph (one C++ library), free to fuse forward
and backward kernels, and the executor adds its gradients to ``.grad``
itself, as ``AccumulateGrad`` would, with bit-identical gradients. When
the step is one micro-batch and the
optimizer one packed Adam group, ``passes.fused_adam`` goes one step further
and traces the update into the graph too.

The gradients are autograd's own (``autograd.grad`` runs the same
derivative formulas that ``backward()`` does), and the seed is computed as
the executor computes it: ``loss.sum()`` for a loss that is not a scalar,
multiplied by the loss scaling in the loss's dtype (a scaling of 1 leaves it
exactly as it was). The scaling is an input of the graph, so automatic loss
scaling changes it without a recompilation.

Example::

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def model(w, x):
    ...     out = x @ w
    ...     return out, (out ** 2).mean()
    >>> w, x = torch.ones(3, 2, requires_grad=True), torch.ones(4, 3)
    >>> step = trace_training_step(make_fx(model)(w, x), [w, x], 1)
    >>> step.grad_positions
    [0]
    >>> out, loss, grad_w = step.graph_module(w.detach(), x, torch.tensor(1.0))
    >>> torch.equal(grad_w, torch.autograd.grad(model(w, x)[1], w)[0])
    True
"""
import dataclasses
from typing import List, Sequence

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx


@dataclasses.dataclass
class TrainingStepGraph:
    """The traced step: ``graph_module(*tensors, scale)`` returns the
    captured graph's outputs followed by the gradients of the placeholders
    at :attr:`grad_positions` (in that order)."""
    graph_module: torch.fx.GraphModule
    #: Placeholders that get a gradient: those that require one and that
    #: the loss depends on (``backward()`` leaves the others' ``.grad``).
    grad_positions: List[int]
    #: How many of the outputs are the captured graph's.
    num_outputs: int


def trace_training_step(graph_module: torch.fx.GraphModule,
                        tensors: Sequence[torch.Tensor],
                        loss_index: int) -> TrainingStepGraph:
    """Traces ``graph_module`` on tensors like ``tensors``, followed by the
    backward pass of its output ``loss_index`` into the placeholders that
    require gradients (see the module docstring)."""
    trainable = [i for i, t in enumerate(tensors) if t.requires_grad]
    grad_positions: List[int] = []
    num_outputs = 0

    def step(*flat: torch.Tensor) -> List[torch.Tensor]:
        nonlocal num_outputs
        *inputs, scale = flat
        outputs = list(graph_module(*inputs))
        num_outputs = len(outputs)
        loss = outputs[loss_index]
        seed = loss if loss.dim() == 0 else loss.sum()
        grads: List[torch.Tensor] = []
        if seed.requires_grad and trainable:
            found = torch.autograd.grad(
                seed * scale.to(seed.dtype), [inputs[i] for i in trainable],
                allow_unused=True)
            grad_positions.extend(i for i, g in zip(trainable, found)
                                  if g is not None)
            grads = [g for g in found if g is not None]
        return [out.detach() for out in outputs] + grads

    with torch.enable_grad():
        traced = make_fx(step, tracing_mode="fake")(
            *tensors, torch.ones((), dtype=torch.float32))
    return TrainingStepGraph(traced, grad_positions, num_outputs)
