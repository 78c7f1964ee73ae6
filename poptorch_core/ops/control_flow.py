"""On-device control flow: ``for_loop`` and ``cond`` (inference only).

Tracing freezes Python control flow, so both ops build their run-time
meaning out of ATen ops:

- ``for_loop`` unrolls ``body`` ``count`` times (``count`` is a compile-time
  constant on the IPU too), feeding each iteration's outputs to the next;
- ``cond`` evaluates both branches and selects each output with
  ``torch.where`` on the run-time condition. As on the IPU both branches
  must produce outputs of the same shapes and dtypes. The unselected branch
  runs too, so in-place changes it makes to tensors captured from the
  enclosing model are not undone; the branch inputs themselves are copies.

Plain CPU calls keep PopTorch's CPU meaning: ``for_loop`` runs the body once
and ``cond`` picks a branch with a Python ``if``.

Example::

    >>> def body(x):
    ...     return x * 2
    >>> poptorch.for_loop(3, body, [torch.ones(2)])  # on the IPU: [8, 8]
    [tensor([2., 2.])]
"""
from typing import Any, Callable, List

import torch

from .. import _impl

__all__ = ["for_loop", "cond"]

_FOR_LOOP_INPUTS = ("poptorch.for_loop expects input tensors (inputs) to be "
                    "a list of tensors.")
_COND_INPUTS = ("poptorch.cond expects then_inps and else_inps tensors to be "
                "a list of tensors.")


def _check_tensor_list(values: Any, message: str) -> None:
    if not isinstance(values, list):
        raise ValueError(f"{message} (Object is not list)")
    for index, value in enumerate(values):
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{message} (Object contained in list at index "
                             f"{index} is not torch.tensor)")


def _as_list(outputs: Any, op: str) -> List[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, (list, tuple)) and all(
            isinstance(o, torch.Tensor) for o in outputs):
        return list(outputs)
    raise _impl.cpp_error(
        f"{op}: the body must return a tensor or a list or tuple of tensors, "
        f"got {type(outputs).__name__}.")


def _check_inference(op: str) -> None:
    if _impl.is_tracing_training():
        raise _impl.cpp_error(f"{op} is only supported in inference.")


def _check_same_signature(first: List[torch.Tensor],
                          second: List[torch.Tensor], what: str) -> None:
    if len(first) != len(second):
        raise _impl.cpp_error(f"{what}: {len(first)} vs {len(second)} "
                               "tensors; the counts must be equal.")
    for k, (a, b) in enumerate(zip(first, second)):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise _impl.cpp_error(
                f"{what}: tensor {k} is {a.dtype}{list(a.shape)} vs "
                f"{b.dtype}{list(b.shape)}; shapes and dtypes must match.")


def for_loop(count: int, body: Callable[..., Any],
             inputs: List[torch.Tensor]) -> List[torch.Tensor]:
    """Runs ``body`` ``count`` times on the IPU, outputs feeding inputs.

    ``inputs`` are passed by value (copied), the body must return as many
    tensors as it takes, of the same shapes and dtypes, and the result is a
    list. Inference only.
    """
    _check_tensor_list(inputs, _FOR_LOOP_INPUTS)
    if not _impl.isRunningOnIpu():
        return _as_list(body(*inputs), "poptorch.for_loop()")
    _check_inference("poptorch.for_loop()")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError("poptorch.for_loop expects count to be a "
                         f"non-negative int, got {count!r}.")
    values = [t.clone() for t in inputs]
    for _ in range(count):
        outputs = _as_list(body(*values), "poptorch.for_loop()")
        _check_same_signature(
            values, outputs,
            "poptorch.for_loop(): the body's outputs must match its inputs")
        values = outputs
    return values


def cond(condition: Any, then_body: Callable[..., Any],
         then_inps: List[torch.Tensor], else_body: Callable[..., Any],
         else_inps: List[torch.Tensor]) -> List[torch.Tensor]:
    """``then_body(*then_inps)`` if ``condition`` else
    ``else_body(*else_inps)``, decided at run time on the IPU.

    ``condition`` is a one-element bool tensor (or a Python bool); both
    bodies must return the same number of tensors. Returns a list.
    Inference only.
    """
    for inputs in (then_inps, else_inps):
        _check_tensor_list(inputs, _COND_INPUTS)
    if not _impl.isRunningOnIpu():
        if condition:
            return _as_list(then_body(*then_inps), "poptorch.cond()")
        return _as_list(else_body(*else_inps), "poptorch.cond()")
    _check_inference("poptorch.cond()")
    then_out = _as_list(then_body(*[t.clone() for t in then_inps]),
                        "poptorch.cond()")
    else_out = _as_list(else_body(*[t.clone() for t in else_inps]),
                        "poptorch.cond()")
    _check_same_signature(
        then_out, else_out,
        "poptorch.cond(): then_body and else_body outputs differ")
    if not isinstance(condition, torch.Tensor):
        return then_out if condition else else_out
    if condition.numel() != 1:
        raise _impl.cpp_error(
            "poptorch.cond(): the condition must have exactly one element, "
            f"got shape {list(condition.shape)}.")
    select = condition.reshape(()).to(torch.bool)
    return [torch.where(select, a, b) for a, b in zip(then_out, else_out)]
