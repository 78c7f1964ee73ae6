"""Model annotations: blocks, and the stages/strategies that place them.

Blocks say which IPU (and which pipeline stage) the ops of a part of the
model run on. On the CPU they do nothing. While a model is traced for the
simulated IPU, the tracer installs a :class:`_BlockTracker` (with
:func:`block_tracking`) and every block start is recorded in it; the
execution strategy then resolves the recorded blocks to stages and IPUs
(``_IExecutionStrategy._resolve``).

Example::

    >>> class Model(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.l1 = torch.nn.Linear(4, 4)
    ...         self.l2 = poptorch.BeginBlock(torch.nn.Linear(4, 4), ipu_id=1)
    ...     def forward(self, x):
    ...         with poptorch.Block("head", ipu_id=0):
    ...             x = self.l1(x)
    ...         return self.l2(x)
"""
import contextlib
import functools
from typing import Any, Callable, Iterator, List, Optional, Tuple

import torch

from .options._strategies import (ParallelPhasedExecution, Phase,
                                    PipelinedExecution, SerialPhasedExecution,
                                    ShardedExecution, Stage,
                                    check_ipu_id, record_block)
# Re-exported: the base Options.setExecutionStrategy validates against.
from .options._strategies import _IExecutionStrategy  # noqa: F401
from ._impl import cpp_error
from .errors import createPoptorchError

__all__ = [
    "Block", "BeginBlock", "BlockFunction", "removeBlocks",
    "LegacyBeginBlockFn", "Stage", "Phase", "PipelinedExecution",
    "ShardedExecution", "SerialPhasedExecution", "ParallelPhasedExecution"
]

#: ``(block_id, ipu_id)``; ``ipu_id`` is None when the block names none.
BlockInfo = Tuple[str, Optional[int]]

_NO_ACTIVE_BLOCK = "No active Block, all the ops must belong to a Block"


class _BlockTracker:
    """Records the blocks started during one trace.

    Blocks are not a stack: starting a block replaces the active one, and
    leaving a ``with Block`` scope leaves no block active (ops traced then
    are an error, see :meth:`op_block`).

    Example::

        >>> with block_tracking() as tracker:
        ...     Block.start("a", 0)
        ...     tracker.current()
        ('a', 0)
    """

    def __init__(self):
        self._next_auto_id = 0
        self._active: Optional[BlockInfo] = None
        self._ended = False
        self._seen: dict = {}

    def next_auto_id(self) -> str:
        """The next automatic block id: ``"0"``, ``"1"``, ..."""
        block_id = str(self._next_auto_id)
        self._next_auto_id += 1
        return block_id

    def reset_auto_id(self) -> None:
        """Restarts automatic ids at ``"0"`` (``Block.useAutoId()``)."""
        self._next_auto_id = 0

    def start(self, user_id: Optional[str], ipu_id: Optional[int]) -> str:
        """Makes a block active and returns its id (automatic when
        ``user_id`` is None)."""
        block_id = self.next_auto_id() if user_id is None else user_id
        record_block(self._seen, block_id, ipu_id)
        self._active = (block_id, ipu_id)
        self._ended = False
        return block_id

    def end(self) -> None:
        """Ends the active block (the end of a ``with Block`` scope)."""
        self._active = None
        self._ended = True

    def current(self) -> Optional[BlockInfo]:
        """The active ``(block_id, ipu_id)``, or None."""
        return self._active

    def op_block(self) -> Optional[BlockInfo]:
        """The block an op traced now belongs to.

        None before any block started (such ops go to IPU 0, stage 0).
        Raises the backend error when a ``with Block`` scope has ended and
        no block was started since.
        """
        if self._ended:
            raise cpp_error(_NO_ACTIVE_BLOCK)
        return self._active

    def seen_blocks(self) -> List[BlockInfo]:
        """Every block started, once, in first-start order; the IPU is the
        first one given for that id."""
        return list(self._seen.items())


_tracker: Optional[_BlockTracker] = None


@contextlib.contextmanager
def block_tracking() -> Iterator[_BlockTracker]:
    """Installs a fresh :class:`_BlockTracker` for one trace."""
    global _tracker
    previous, _tracker = _tracker, _BlockTracker()
    try:
        yield _tracker
    finally:
        _tracker = previous


def _block_id(user_id: Any) -> Optional[str]:
    """The block id of ``user_id``. PopTorch accepts any value (numbers are
    common: ``user_id=i`` in a loop); stages name blocks by string, so the
    id is its ``str()``."""
    if user_id is None or isinstance(user_id, str):
        return user_id
    if isinstance(user_id, (int, float)) and not isinstance(user_id, bool):
        return str(user_id)
    raise TypeError(f"Block user_id must be a string, a number or None (got "
                    f"{type(user_id).__name__}): use a string")


def _check_block_args(user_id: Any, ipu_id: Any) -> None:
    _block_id(user_id)
    check_ipu_id(ipu_id)


class Block(torch.nn.Module):
    """Runs the ops of a ``with`` scope in one block.

    ``user_id`` names the block for stages and strategies (automatic ids
    ``"0"``, ``"1"``, ... when None); ``ipu_id`` is the IPU it runs on.
    A no-op outside tracing.

    Example::

        >>> def forward(self, x):
        ...     poptorch.Block.useAutoId()
        ...     with poptorch.Block(ipu_id=0):
        ...         x = self.l1(x)
        ...     with poptorch.Block(ipu_id=1):
        ...         return self.l2(x)
    """

    def __init__(self, user_id: Optional[str] = None,
                 ipu_id: Optional[int] = None):
        super().__init__()
        _check_block_args(user_id, ipu_id)
        self._user_id = user_id
        self._ipu_id = ipu_id

    @staticmethod
    def useAutoId() -> None:
        """Restarts automatic block ids at ``"0"``; call it at the start of
        ``forward``."""
        if _tracker is not None:
            _tracker.reset_auto_id()

    @staticmethod
    def start(user_id: Optional[str] = None,
              ipu_id: Optional[int] = None) -> None:
        """Starts a block that lasts until the next one starts."""
        _check_block_args(user_id, ipu_id)
        if _tracker is not None:
            _tracker.start(_block_id(user_id), ipu_id)

    def __enter__(self) -> "Block":
        Block.start(self._user_id, self._ipu_id)
        return self

    def __exit__(self, *exc: Any) -> None:
        if _tracker is not None:
            _tracker.end()


class _BeginBlockHook:
    """Forward pre-hook that starts a block when its module runs.

    A module-level class so that modules carrying it can be copied,
    pickled and saved with ``torch.save``.
    """

    def __init__(self, user_id: Optional[str], ipu_id: Optional[int]):
        self._user_id = user_id
        self._ipu_id = ipu_id

    def __call__(self, module: torch.nn.Module, inputs: Any) -> None:
        Block.start(self._user_id, self._ipu_id)

    def __repr__(self) -> str:
        return f"BeginBlock(user_id={self._user_id}, ipu_id={self._ipu_id})"


class LegacyBeginBlockFn(torch.nn.Module):
    """What :func:`BeginBlock` returns for a plain function: calling it
    starts the block, then calls the function.

    Example::

        >>> fn = poptorch.BeginBlock(torch.relu, "act", ipu_id=1)
        >>> fn(torch.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """

    def __init__(self, layer_to_call: Callable, user_id: Optional[str] = None,
                 ipu_id: Optional[int] = None):
        super().__init__()
        _check_block_args(user_id, ipu_id)
        self._layer_to_call = layer_to_call
        self._user_id = user_id
        self._ipu_id = ipu_id

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Starts the block, then returns the wrapped function's result for
        the same arguments."""
        Block.start(self._user_id, self._ipu_id)
        return self._layer_to_call(*args, **kwargs)


def _is_block_hook(hook: Any) -> bool:
    return isinstance(hook, _BeginBlockHook)


def BeginBlock(layer: Any,
               user_id: Optional[str] = None,
               ipu_id: Optional[int] = None) -> Any:
    """Starts a block every time ``layer`` runs; the block lasts until the
    next one starts.

    Returns ``layer`` itself (with a forward pre-hook) for a module, or a
    :class:`LegacyBeginBlockFn` wrapping a plain function.

    Example::

        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4),
        ...                             torch.nn.Linear(4, 2))
        >>> model[1] = poptorch.BeginBlock(model[1], ipu_id=1)
        >>> opts = poptorch.Options().deviceIterations(2)  # >= 2 stages
        >>> poptorch.inferenceModel(model, opts)(torch.ones(4, 4)).shape
        torch.Size([4, 2])
    """
    if isinstance(layer, torch.nn.Module):
        _check_block_args(user_id, ipu_id)
        if any(map(_is_block_hook, layer._forward_pre_hooks.values())):
            raise createPoptorchError(
                "module has already been assigned to a block.")
        layer.register_forward_pre_hook(_BeginBlockHook(user_id, ipu_id))
        return layer
    if callable(layer):
        return LegacyBeginBlockFn(layer, user_id, ipu_id)
    raise createPoptorchError(
        "module is not an instance of torch.nn.Module or function.")


def removeBlocks(module: torch.nn.Module) -> None:
    """Removes every :func:`BeginBlock` hook from ``module`` and its
    children.

    Example::

        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4))
        >>> model[0] = poptorch.BeginBlock(model[0], ipu_id=1)
        >>> poptorch.removeBlocks(model)
        >>> len(model[0]._forward_pre_hooks)
        0
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"removeBlocks expects a torch.nn.Module (got "
                        f"{type(module).__name__})")
    for m in module.modules():
        for key in [k for k, h in m._forward_pre_hooks.items()
                    if _is_block_hook(h)]:
            del m._forward_pre_hooks[key]
            # torch keeps per-hook flags in side tables keyed by the same id.
            for table in ("_forward_pre_hooks_with_kwargs",
                          "_forward_pre_hooks_always_called"):
                getattr(m, table, {}).pop(key, None)


def BlockFunction(user_id: Optional[str] = None,
                  ipu_id: Optional[int] = None) -> Callable:
    """Decorator that runs the function inside ``Block(user_id, ipu_id)``.

    Example::

        >>> @poptorch.BlockFunction(ipu_id=1)
        ... def head(x):
        ...     return x * 2
    """
    _check_block_args(user_id, ipu_id)

    def decorator(func: Callable) -> Callable:
        # A plain function (not a callable object) so that a decorated
        # module-level function pickles by name and a decorated method
        # leaves its model picklable.
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Block(user_id, ipu_id):
                return func(*args, **kwargs)

        return wrapper

    return decorator
