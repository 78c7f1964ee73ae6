"""The batches of an Async DataLoader that loads in this process, checked
as its worker process would check them.

Where no CPU is free for a worker (``_placement``), ``DataLoaderMode.Async``
loads in the training process. A script must then behave as it does on a
machine where a worker loads: what a worker refuses is refused here too, in
the same words. A worker receives the loader pickled (except with
``SharingStrategy.Fork``) and transfers each batch through buffers laid
out from the first one, so it refuses an unpicklable dataset when it
starts (``check_accessor_options``), and a batch holding a value that is
not a tensor, or whose shapes differ from the first batch's beyond a
shorter leading dimension, or that fails to load (a collate of tensors of
different sizes) when it is loaded: :class:`CheckedBatches`.

Example::

    >>> batches = CheckedBatches(iter([torch.zeros(4, 2), torch.zeros(4, 3)]))
    >>> next(batches).shape
    torch.Size([4, 2])
    >>> next(batches)
    Traceback (most recent call last):
    ...
    poptorch_core.data.accessor._DataFetcherError: 'poptorch_py_error': An error occurred in the data fetcher: ...
"""
import traceback
from typing import Any, Iterator, Optional

from ..errors import public_class
from ._layout import ElementLayout
from .accessor import loading_error


@public_class
class CheckedBatches:
    """Yields ``batches``, refusing those a worker process would refuse."""

    def __init__(self, batches: Iterator[Any]):
        self._batches = batches
        self._layout: Optional[ElementLayout] = None
        self._position = 0

    def __iter__(self) -> "CheckedBatches":
        return self

    def __next__(self) -> Any:
        where = f"batch {self._position} of the DataLoader"
        try:
            batch = next(self._batches)
            if self._layout is None:
                self._layout = ElementLayout(batch)
            else:
                self._layout.flatten(batch, where)
        except StopIteration:
            raise
        except Exception as error:  # pylint: disable=broad-except
            summary = "".join(traceback.format_exception_only(
                type(error), error)).strip()
            raise loading_error(self._position == 0,
                                f"{summary} (while loading {where}).") \
                from error
        self._position += 1
        return batch
