"""``cat`` inputs that inductor updates in place are copied into the cat.

Inductor computes ``torch.cat`` without copies where it can
(``ConcatKernel.realize_into``): an input's buffer becomes a view of the
cat's output (a ``NonOwningLayout``), and the kernel that computes the input
writes straight into the cat. Ops that inductor lowers as a fresh buffer
updated in place (the ATen fallback of ``scatter_reduce_``: ``amax``,
``amin``, ``prod``, ``mean``, and ``sum`` with several threads; its own
scatter kernel for ``scatter``, ``scatter_add``, ``index_put``,
``index_add``, ``index_copy``) give the updated value a name of its own (a
mutation), and inductor's scheduler (torch 2.13) does not count that name's
readers as readers of the cat's output. Once the cat's output has no reader
left, a later buffer of the same size takes its memory, and whatever still
reads the updated value reads that buffer instead: a silent wrong result.

PyG's PNA with the ``max`` aggregator does exactly that in a training step:
each layer's ``scatter_reduce(amax)`` goes into a ``cat`` of the
aggregators, and the backward pass reads the maxima again (it counts the
entries equal to each maximum and divides by that count) after the next
layer's ``cat`` took the memory: counts of zero, NaN gradients. Whether a
later buffer reuses the memory depends on the whole graph (two threads made
PNA's scatter-sums ATen calls, which changed the buffers), so no setting
avoids it; ``force_pointwise_cat`` would, by giving up copy-free cats
everywhere.

While :func:`copied_cat_inputs` is active in a thread, inductor's test for
a copy-free cat input (``ConcatKernel.can_realize_into_without_copy``) says
no for a buffer that inductor has marked as mutated: the cat copies it, as
it copies any input that cannot be a view, and the buffer keeps memory of
its own for as long as it is read. Every other input still goes into the
cat without a copy, so a graph without such a cat compiles to the same code.
The ``compile`` backend compiles every graph, on every device, inside the
block (``executable``).

Inductor's caches do not see the patch: inside the block their keys carry
this file's hash (``torch.compiler.config.cache_key_tag``), so code compiled
without the patch (or with another version of it) is never reused.

Example::

    >>> import torch
    >>> with copied_cat_inputs():
    ...     CACHE_TAG in torch.compiler.config.cache_key_tag
    True
    >>> CACHE_TAG in torch.compiler.config.cache_key_tag
    False
"""
import contextlib
import threading
from typing import Iterator

import torch
from torch._inductor.custom_graph_pass import get_hash_for_files


#: What the block adds to inductor's cache keys.
CACHE_TAG = "poptorch-cat-copies-" + get_hash_for_files((__file__,)).hex()


class _Active(threading.local):
    """Whether the patch is active in this thread."""

    active = False


_ACTIVE = _Active()
_INSTALL_LOCK = threading.Lock()

#: How many cat inputs the patch has copied, all threads together (the
#: tests' evidence that it applied).
_copied = 0


def _is_mutated_buffer(src) -> bool:
    """Whether ``src`` (a cat input: a ``TensorBox``, a ``StorageBox`` or a
    view) holds a buffer that inductor has marked as mutated."""
    from torch._inductor import ir
    from torch._inductor.virtualized import V
    while isinstance(src, (ir.TensorBox, ir.StorageBox)):
        src = src.data
    return isinstance(src, ir.Buffer) and \
        src.get_name() in V.graph.mutated_buffers


def _install() -> None:
    """Wraps ``ConcatKernel.can_realize_into_without_copy`` once; the
    wrapper answers differently only in threads where the patch is
    active."""
    from torch._inductor.ir import ConcatKernel
    with _INSTALL_LOCK:
        original = ConcatKernel.can_realize_into_without_copy
        if getattr(original, "_poptorch_cat_copies", False):
            return
        original = original.__func__

        def can_realize_into_without_copy(cls, src, dst=None) -> bool:
            if _ACTIVE.active and _is_mutated_buffer(src):
                global _copied
                _copied += 1
                return False
            return original(cls, src, dst)

        can_realize_into_without_copy._poptorch_cat_copies = True
        ConcatKernel.can_realize_into_without_copy = classmethod(
            can_realize_into_without_copy)


def copied() -> int:
    """How many cat inputs compilations have copied instead of aliasing."""
    return _copied


@contextlib.contextmanager
def copied_cat_inputs() -> Iterator[None]:
    """Inductor compilations in this thread, inside the block, copy mutated
    buffers into a ``cat`` (see the module docstring)."""
    _install()
    tag = torch.compiler.config.cache_key_tag
    if CACHE_TAG not in tag:
        tag = f"{tag}+{CACHE_TAG}" if tag else CACHE_TAG
    before = _ACTIVE.active
    _ACTIVE.active = True
    try:
        with torch.compiler.config.patch(cache_key_tag=tag):
            yield
    finally:
        _ACTIVE.active = before
