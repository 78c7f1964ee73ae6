"""Stack traces on captured nodes, without torch's frame filter.

The capture records each node's Python stack (``make_fx(...,
record_stack_traces=True)``) so that an IPU rule error can point at the
user's line (:func:`.rules.node_user_location`). Torch drops the frames of
its own modules from each recorded stack, listed by
``symbolic_shapes.uninteresting_files()``, whose first call imports
inductor, dynamo's guards and ``torch.export`` to find their files: most
of an ``interpret`` model's first call (``docs/design/interpret.rst``).
The rule errors skip torch's frames themselves
(:func:`.rules._describe_frames`), so while a thread captures,
:func:`torch_frames_kept` makes that list empty for it; other threads get
torch's list all along.
"""
import contextlib
import threading
from typing import FrozenSet, Iterator

import torch.fx.experimental.symbolic_shapes as _symbolic_shapes

_torch_list = _symbolic_shapes.uninteresting_files
_thread = threading.local()
_installed = 0
_lock = threading.Lock()


def _uninteresting_files() -> FrozenSet[str]:
    """Torch's list, except in a thread that is capturing."""
    if getattr(_thread, "capturing", 0):
        return frozenset()
    return _torch_list()


@contextlib.contextmanager
def torch_frames_kept() -> Iterator[None]:
    """While active, the stacks that this thread records on FX nodes keep
    torch's own frames (see the module docstring). Nests, and may be
    active in several threads at once: the first to enter installs the
    replacement list, the last to leave puts torch's back."""
    global _installed
    with _lock:
        if _installed == 0:
            _symbolic_shapes.uninteresting_files = _uninteresting_files
        _installed += 1
    _thread.capturing = getattr(_thread, "capturing", 0) + 1
    try:
        yield
    finally:
        _thread.capturing -= 1
        with _lock:
            _installed -= 1
            if _installed == 0:
                _symbolic_shapes.uninteresting_files = _torch_list
