"""The hook through which replication across processes joins a compiled
program to its run.

``poptorch_core.distributed`` sits above the executor, so the executor
cannot call it: it installs its ``join`` here at import (:func:`install`),
and every compilation of a model whose options name several processes calls
it (:func:`attach`). The hook checks that the processes agree, makes their
weights equal and gives the program a reducer that all-reduces. A run of one
process never calls it.

Example::

    >>> from poptorch_core.distributed._join import join
    >>> from poptorch_core._executor import scale_out_hook
    >>> scale_out_hook._hook is join  # installed by poptorch_core.distributed
    True
"""
from typing import Callable, Optional

from ..errors import createPoptorchError
from .program import Program
from .state import ExecutorState

#: ``hook(state, program)``: joins ``program``, compiled for ``state``.
ScaleOutHook = Callable[[ExecutorState, Program], None]

_hook: Optional[ScaleOutHook] = None


def install(hook: Optional[ScaleOutHook]) -> None:
    """Installs the scale-out hook (``None`` removes it)."""
    global _hook
    _hook = hook


def attach(state: ExecutorState, program: Program) -> None:
    """Lets the installed hook join ``program`` (compiled for ``state``) to
    the other processes of a distributed run."""
    if state.options.Distributed.numProcesses == 1:
        return
    if _hook is None:
        raise createPoptorchError(
            "options.Distributed names several processes, but "
            "poptorch_core.distributed is not loaded: import poptorch_core "
            "(or poptorch) instead of its submodules.")
    _hook(state, program)
