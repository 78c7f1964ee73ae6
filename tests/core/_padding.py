"""Inputs with padding-only micro-batches for the executor tests, and an
eager PyTorch reference that never sees them.

:class:`Rows` is a user type with a parser that says which rows are real
(``ICustomArgParser.paddingMask``), as PopTorch Geometric's parser does for
fixed-size batches. :class:`Net`'s loss is deliberately not masked: a
padding-only micro-batch that reached the optimizer would add a gradient,
so the tests see both the gradient and the divisor.

:func:`eager_call` is written from the documented rule, sharing no code
with the executor: per device iteration, backward of the real micro-batches
only, their summed gradients divided by their number (``Mean``), and no
optimizer step at all when none was real.
"""
from typing import Iterable, List, Optional

import torch

import poptorch

#: Value of every feature and target of a padding-only micro-batch: finite
#: and far from the real data, so that its loss has a large gradient.
PAD = 3.0


class Rows:
    """Features, targets and a real-row mask, split along dim 0."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor,
                 real: torch.Tensor) -> None:
        self.x, self.y, self.real = x, y, real


class RowsParser(poptorch.ICustomArgParser):
    def yieldTensors(self, struct):
        yield struct.x
        yield struct.y
        yield struct.real

    def reconstruct(self, original_structure, tensor_iterator):
        return Rows(next(tensor_iterator), next(tensor_iterator),
                    next(tensor_iterator))

    def paddingMask(self, struct):
        return struct.real


def register() -> None:
    poptorch.registerCustomArgParser(Rows, RowsParser())


def make_rows(num_micro: int, padding: Iterable[int], micro: int = 2,
              generator: Optional[torch.Generator] = None,
              dtype: torch.dtype = torch.float32) -> Rows:
    """``num_micro`` micro-batches of ``micro`` rows; those in ``padding``
    hold padding only (features and targets :data:`PAD`, mask False)."""
    x = torch.randn(num_micro, micro, 4, generator=generator)
    y = torch.randn(num_micro, micro, 3, generator=generator)
    real = torch.ones(num_micro, micro, dtype=torch.bool)
    for index in padding:
        x[index], y[index], real[index] = PAD, PAD, False
    return Rows(x.reshape(-1, 4).to(dtype), y.reshape(-1, 3).to(dtype),
                real.reshape(-1))


class Net(torch.nn.Module):
    """rows -> (out, unmasked mse loss)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, rows: Rows):
        out = self.fc2(torch.tanh(self.fc1(rows.x)))
        loss = torch.nn.functional.mse_loss(out, rows.y)
        return out, poptorch.identity_loss(loss, reduction="none")


def eager_call(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               rows: Rows, D: int, G: int, R: int, *, mean: bool = True,
               clip: Optional[float] = None) -> List[torch.Tensor]:
    """One call of a training model run eagerly on the real micro-batches:
    returns every micro-batch's output (padding-only ones too, from a
    forward without backward), in ``[D][G][R]`` order."""
    count = D * G * R
    xs, ys, reals = (t.chunk(count) for t in (rows.x, rows.y, rows.real))
    outputs = []
    for d in range(D):
        optimizer.zero_grad(set_to_none=True)
        real = 0
        for i in range(d * G * R, (d + 1) * G * R):
            out, loss = model(Rows(xs[i], ys[i], reals[i]))
            outputs.append(out.detach())
            if reals[i].any():
                loss.backward()
                real += 1
        if real == 0:
            continue  # as if these batches were never seen
        with torch.no_grad():
            for param in model.parameters():
                if param.grad is not None and mean:
                    param.grad /= real
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return outputs
