"""An eager PyTorch reference for end-to-end tests of the executor.

A plain loop written from PopTorch's documented training step, sharing no
code with the executor: per device iteration, the forward and backward of
every accumulation step and replica in ``[D][G][R]`` order (the loss times
the loss scaling), gradients reduced by mean or sum over ``G x R``, the loss
scaling undone in float32, and one optimizer step. The outputs of each
micro-batch are its forward values, before that iteration's update.
"""
import torch


def micro_batch(inputs, index, count):
    """Micro-batch ``index`` of ``count`` along dim 0 of every input."""
    return [t.chunk(count, dim=0)[index] for t in inputs]


def train_call(model, optimizer, inputs, D=1, G=1, R=1, *, mean=True,
               loss_scaling=1.0, masters=None):
    """One call of a training model, run eagerly on ``model``.

    ``model(*micro)`` returns ``(out, loss)``. ``masters``: float32 copies
    of the parameters that ``optimizer`` updates (float16 models): the
    gradients are unscaled and the update computed in float32, then the
    weights are stored back in their own dtype, as an IPU's optimizer does.

    Returns ``outputs[d][g][r] = (out, loss)``.
    """
    params = list(model.parameters())
    masters = params if masters is None else masters
    divisor = (G * R if mean else 1) * loss_scaling
    results = []
    for d in range(D):
        steps = []
        for g in range(G):
            replicas = []
            for r in range(R):
                out, loss = model(*micro_batch(inputs, (d * G + g) * R + r,
                                               D * G * R))
                (loss * loss_scaling).backward()
                replicas.append((out.detach().clone(),
                                 loss.detach().clone()))
            steps.append(replicas)
        with torch.no_grad():
            for param, master in zip(params, masters):
                grad, param.grad = param.grad, None
                if master is not param:
                    master.copy_(param.float())
                master.grad = None if grad is None else \
                    grad.float() / divisor
            optimizer.step()
            for param, master in zip(params, masters):
                master.grad = None
                if master is not param:
                    param.copy_(master.to(param.dtype))
        results.append(steps)
    return results


def assert_outputs_match(out, loss, results, rtol=1e-4, atol=1e-5):
    """A training call's ``All``-mode outputs ``out`` and ``loss`` against
    :func:`train_call`'s ``results``, micro-batch by micro-batch."""
    micro = [m for step in results for replicas in step for m in replicas]
    torch.testing.assert_close(out, torch.cat([o for o, _ in micro]),
                               rtol=rtol, atol=atol)
    torch.testing.assert_close(loss, torch.stack([l for _, l in micro]),
                               rtol=rtol, atol=atol)


def float32_masters(model):
    """Float32 copies of ``model``'s parameters, for an optimizer that
    updates a float16 model in float32."""
    return [torch.nn.Parameter(p.detach().float()) for p in model.parameters()]
