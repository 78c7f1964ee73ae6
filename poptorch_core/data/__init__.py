"""Data loading: ``poptorch.DataLoader`` and ``AsynchronousDataAccessor``.

``DataLoader`` batches ``batch_size x deviceIterations x (replicationFactor /
input_group_size) x gradientAccumulation`` samples per step, the host batch a
PopTorch model consumes per call. ``AsynchronousDataAccessor`` loads data in a
worker process ahead of use.

Example::

    >>> opts = poptorch.Options().deviceIterations(4)
    >>> loader = poptorch.DataLoader(opts, dataset, batch_size=8,
    ...                              mode=poptorch.DataLoaderMode.Async)
    >>> for x, y in loader:     # x.shape[0] == 32
    ...     ipu_model(x, y)
"""
from .accessor import AsynchronousDataAccessor
from .loader import DataLoader

__all__ = ["AsynchronousDataAccessor", "DataLoader"]
