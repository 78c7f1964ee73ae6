"""``ipu_print_tensor``: print a tensor from inside a model at run time.

On the simulated IPU the call becomes the op
``torch.ops.poptorch.ipu_print_tensor``, an identity whose kernel prints
``"<title>: <formatted>"`` to stderr each time the captured graph runs (never
while the model is being traced) and, when ``print_gradient`` is set, prints
``"<title>_gradient: <formatted>"`` in the backward pass. The layout is
described in :mod:`poptorch_core.ops._tensor_format`. An empty title prints
the tensor alone. Plain CPU calls are an identity, as in PopTorch.

Example::

    >>> class Model(torch.nn.Module):
    ...     def forward(self, x):
    ...         x = poptorch.ipu_print_tensor(x, "x")   # prints "x: (...)"
    ...         return x * 2
"""
import sys
from typing import Any, Tuple

import torch

from .. import _impl
from ..errors import createPoptorchError
from ._registration import define_op
from ._tensor_format import FLOAT_FORMATS, format_tensor

__all__ = ["ipu_print_tensor"]

_SCHEMA = ("(Tensor x, str title, bool print_gradient, int summarise_threshold,"
           " int edge_items, int max_line_width, int digits, str float_format,"
           " str separator, str open_bracket, str close_bracket) -> Tensor")


def _kernel(x: torch.Tensor, title: str, print_gradient: bool,
            *layout: Any) -> torch.Tensor:
    del print_gradient
    # Tracing runs the kernel once on example values: those are not the
    # model's data, so only real runs of the graph print.
    if not _impl.isRunningOnIpu():
        text = format_tensor(x, *layout)
        print(f"{title}: {text}" if title else text, file=sys.stderr,
              flush=True)
    return x.clone()


def _fake(x: torch.Tensor, *args: Any) -> torch.Tensor:
    del args
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    del output
    ctx.title, ctx.print_gradient = inputs[1], inputs[2]
    ctx.layout = inputs[3:]


def _backward(ctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
    if ctx.print_gradient:
        grad = _print_op(grad, f"{ctx.title}_gradient", False, *ctx.layout)
    return (grad, ) + (None, ) * 10


_print_op = define_op("ipu_print_tensor", _SCHEMA, _kernel, _fake, _backward,
                      _setup_context)


def ipu_print_tensor(tensor: torch.Tensor, title: str = "",
                     print_gradient: bool = True,
                     summarise_threshold: int = 1000, edge_items: int = 3,
                     max_line_width: int = 80, digits: int = 4,
                     float_format: str = "auto", separator: str = ", ",
                     open_bracket: str = "(",
                     close_bracket: str = ")") -> torch.Tensor:
    """Prints ``tensor`` (and its gradient) each time the IPU graph runs.

    Returns the tensor: use the returned value, or the print op is dead
    code. ``float_format`` is one of ``auto``, ``fixed``, ``scientific`` or
    ``none``.
    """
    if not isinstance(tensor, torch.Tensor):
        raise createPoptorchError(
            "ipu print tensor must take a torch.tensor argument. "
            f"{type(tensor)} is not supported.")
    if float_format not in FLOAT_FORMATS:
        raise ValueError(
            f"float_format must be one of {', '.join(FLOAT_FORMATS)}, got "
            f"{float_format!r}.")
    if not _impl.isRunningOnIpu():
        return tensor
    return _print_op(tensor, str(title), bool(print_gradient),
                     summarise_threshold, edge_items, max_line_width, digits,
                     float_format, separator, open_bracket, close_bracket)
