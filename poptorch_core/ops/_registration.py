"""Registration of the ``torch.ops.poptorch.*`` custom ops.

Every op is a real ``torch.library`` custom op with a fake (meta) kernel, so
that ``make_fx`` records it as one opaque node (for example
``torch.ops.poptorch.identity_loss.default``) and the captured graph calls it
again at run time, also under autograd when a backward is registered.

Example::

    >>> nop = define_identity_op("nop")
    >>> nop(torch.ones(2))
    tensor([1., 1.])
"""
from typing import Any, Callable, Optional

import torch

__all__ = ["define_op", "define_identity_op", "NAMESPACE"]

#: The ``torch.ops`` namespace of every PopTorch op.
NAMESPACE = "poptorch"


def _existing_op(name: str) -> Optional[torch._ops.OpOverload]:
    try:
        return getattr(getattr(torch.ops, NAMESPACE), name).default
    except AttributeError:
        return None


def define_op(name: str, schema: str, kernel: Callable[..., Any],
              fake: Callable[..., Any],
              backward: Optional[Callable[..., Any]] = None,
              setup_context: Optional[Callable[..., Any]] = None
              ) -> torch._ops.OpOverload:
    """Defines ``poptorch::<name>`` once per process; returns its overload.

    Args:
        schema: the op schema without its name, e.g. ``"(Tensor x) -> Tensor"``.
        kernel: the implementation (CPU and every other device).
        fake: the shape/dtype-only implementation used by fake tracing.
        backward: ``backward(ctx, *grads)`` returning one gradient (or None)
            per op argument; None leaves the op non-differentiable.
        setup_context: ``setup_context(ctx, inputs, output)`` for ``backward``.
    """
    existing = _existing_op(name)
    if existing is not None:  # module re-imported: keep the first definition
        return existing
    op = torch.library.custom_op(f"{NAMESPACE}::{name}", kernel,
                                 mutates_args=(), schema=schema)
    op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup_context)
    return _existing_op(name)


def define_identity_op(name: str,
                       extra_args: str = "") -> torch._ops.OpOverload:
    """Defines an identity marker op ``poptorch::<name>(Tensor x, ...)``.

    The output is a copy of ``x`` (custom ops may not alias their inputs) and
    the gradient passes through unchanged. ``extra_args`` lists schema
    arguments that only carry metadata, e.g. ``"float proportion"``.
    """
    num_extra = len(extra_args.split(",")) if extra_args else 0
    schema = f"(Tensor x{', ' + extra_args if extra_args else ''}) -> Tensor"

    def kernel(x: torch.Tensor, *metadata: Any) -> torch.Tensor:
        del metadata
        return x.clone()

    def fake(x: torch.Tensor, *metadata: Any) -> torch.Tensor:
        del metadata
        return torch.empty_like(x)

    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        del ctx
        return (grad, ) + (None, ) * num_extra

    op = define_op(name, schema, kernel, fake, backward,
                   lambda ctx, inputs, output: None)
    _IDENTITY_OPS.add(op)
    return op


#: The overloads made by :func:`define_identity_op` (the executor runs them
#: as ``aten.clone``).
_IDENTITY_OPS: set = set()


def is_identity_op(target: Any) -> bool:
    """Whether ``target`` is a marker op made by :func:`define_identity_op`."""
    return target in _IDENTITY_OPS
