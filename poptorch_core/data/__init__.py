"""Data loading: ``poptorch.DataLoader`` and ``AsynchronousDataAccessor``.

``DataLoader`` batches ``batch_size x deviceIterations x (replicationFactor /
input_group_size) x gradientAccumulation`` samples per step, the host batch a
PopTorch model consumes per call. ``AsynchronousDataAccessor`` loads data in a
worker process ahead of use.

Example::

    >>> dataset = torch.utils.data.TensorDataset(torch.randn(64, 3),
    ...                                          torch.randint(0, 2, (64,)))
    >>> opts = poptorch.Options().deviceIterations(4)
    >>> loader = poptorch.DataLoader(opts, dataset, batch_size=8,
    ...                              mode=poptorch.DataLoaderMode.Async)
    >>> [x.shape[0] for x, y in loader]     # 8 samples x 4 iterations
    [32, 32]
"""
from .accessor import AsynchronousDataAccessor
from .loader import DataLoader

__all__ = ["AsynchronousDataAccessor", "DataLoader"]
