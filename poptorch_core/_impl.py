"""Process-wide tracing state shared by the tracer, the ops and user models.

Invariant: ``isRunningOnIpu()`` is True only inside :func:`ipu_tracing`,
which the tracer enters for the single forward pass it captures. Plain CPU
calls of a model, model construction and graph execution all see False.
"""
import collections
import contextlib
from typing import Callable, Dict, Iterator, List, Sequence, Tuple, Type

import torch
from torch.utils.hooks import RemovableHandle

from .errors import Error, createPoptorchError

__all__ = ["isRunningOnIpu", "createPoptorchError", "registerPreCompileHook",
           "registerPostCompileHook", "_OverwriteContextManager"]

_running_on_ipu = False
_tracing_training = False
_call_inputs: Tuple[torch.Tensor, ...] = ()
_pre_compile_hooks: Dict[int, Callable] = collections.OrderedDict()
_post_compile_hooks: Dict[int, Callable] = collections.OrderedDict()


def isRunningOnIpu() -> bool:
    """True while PopTorch traces a model for the IPU, False otherwise.

    Example::

        >>> class Model(torch.nn.Module):
        ...     def forward(self, x):
        ...         if poptorch.isRunningOnIpu():
        ...             return x * 2   # IPU-specific path
        ...         return x
    """
    return _running_on_ipu


def is_tracing_training() -> bool:
    """True while the model being traced is a training model (ops such as
    ``for_loop`` and ``cond`` are inference-only)."""
    return _running_on_ipu and _tracing_training


@contextlib.contextmanager
def ipu_tracing(training: bool = False) -> Iterator[None]:
    global _running_on_ipu, _tracing_training
    previous = (_running_on_ipu, _tracing_training)
    _running_on_ipu, _tracing_training = True, training
    try:
        yield
    finally:
        _running_on_ipu, _tracing_training = previous


@contextlib.contextmanager
def tracing_call_inputs(inputs: Sequence[torch.Tensor]) -> Iterator[None]:
    """Makes ``inputs`` what :func:`traced_call_inputs` returns for the
    duration."""
    global _call_inputs
    previous = _call_inputs
    _call_inputs = tuple(inputs)
    try:
        yield
    finally:
        _call_inputs = previous


def traced_call_inputs() -> Tuple[torch.Tensor, ...]:
    """The tensors the user passed to the call being traced, as given
    (before micro-batching and IPU dtypes; the traced forward sees copies),
    so that a plugin can tell where they came from. Empty outside a trace.

    Example::

        >>> traced_call_inputs()
        ()
    """
    return _call_inputs if _running_on_ipu else ()


def _register_hook(hooks: Dict[int, Callable], hook: Callable,
                   kind: str) -> RemovableHandle:
    if not callable(hook):
        raise RuntimeError(f"{kind}-compile hook must be callable")
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def registerPreCompileHook(hook: Callable) -> RemovableHandle:
    """Registers ``hook()`` to run just before each model is traced.

    Returns a handle whose ``remove()`` unregisters the hook.
    """
    return _register_hook(_pre_compile_hooks, hook, "Pre")


def registerPostCompileHook(hook: Callable) -> RemovableHandle:
    """Registers ``hook()`` to run after each model is traced (also when
    tracing fails). Returns a handle whose ``remove()`` unregisters it."""
    return _register_hook(_post_compile_hooks, hook, "Post")


def run_pre_compile_hooks() -> None:
    for hook in list(_pre_compile_hooks.values()):
        hook()


def run_post_compile_hooks() -> None:
    for hook in list(_post_compile_hooks.values()):
        hook()


class _OverwriteContextManager:
    """Enters every registered substitution manager while a model is traced.

    ``poptorch_geometric`` registers its PyG op substitutions here so that
    every PopTorch compile sees fixed-shape versions of dynamic PyG ops.
    """
    _subsitution_manager_types: List[Type] = []

    @classmethod
    def registerSubsitutionManager(cls, manager_type: Type) -> None:
        if manager_type not in cls._subsitution_manager_types:
            cls._subsitution_manager_types.append(manager_type)

    def __init__(self):
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        self._stack.__enter__()
        for manager_type in self._subsitution_manager_types:
            self._stack.enter_context(manager_type())
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)


def cpp_error(msg: str) -> Error:
    """An :class:`Error` of the simulated backend (PopTorch's "CErr")."""
    return Error(msg)
