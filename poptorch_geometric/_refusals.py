"""Refusals of the user's input, raised from the public call the user made.

A refusal is an error that says what is wrong with the user's input and
how to fix it (a ``ValueError`` naming a graph and an attribute, a
``RuntimeError`` naming a budget, ...), raised by a ``raise`` statement of
this package. It is often found deep inside the library (a collation
helper, a sampler, ...); the frames between the public call and that helper
only hide the message. So the public entry points (:func:`public` methods
and :func:`refusing_iterator` loops) raise it again from their own frame,
by the core's rule (``poptorch_core.errors.public_call``): the traceback
ends one line below the user's call.

Any other exception (a bug, an error of the user's own code) keeps its
whole traceback; ``POPTORCH_FULL_TRACEBACKS=1`` keeps every frame of a
refusal too.

Example::

    >>> import traceback
    >>> from poptorch_geometric import FixedSizeOptions
    >>> try:
    ...     FixedSizeOptions(num_nodes=10, num_edges=0)
    ... except ValueError as error:
    ...     [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    ['<module>', 'public_call_boundary']
"""
from typing import Any, Iterable, Iterator

from poptorch_core import plugins

__all__ = ["public", "refusing_iterator"]

#: Wraps a public function or method: refusals raised anywhere below it
#: are raised again from it.
public = plugins.public_call


def refusing_iterator(items: Iterable[Any]) -> Iterator[Any]:
    """Iterates ``items`` (a loader's batches), raising refusals from
    here: a loop over a loader then ends one line below the loop."""
    iterator = iter(items)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except Exception as error:  # pylint: disable=broad-except
            refusal = plugins.trimmed_refusal(
                error)
            if refusal is None:
                raise
            raise refusal  # POPTORCH_FULL_TRACEBACKS=1: all frames
        yield item
