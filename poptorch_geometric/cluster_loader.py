"""Cluster-GCN batches of fixed size for PopTorch models.

Example::

    >>> import poptorch
    >>> from poptorch_geometric import ClusterData, FixedSizeOptions
    >>> from poptorch_geometric.datasets import power_law_graph
    >>> clusters = ClusterData(power_law_graph(600, 3000), num_parts=20,
    ...                        log=False)
    >>> loader = FixedSizeClusterLoader(
    ...     clusters, FixedSizeOptions(num_nodes=200, num_edges=600),
    ...     batch_size=4, options=poptorch.Options().deviceIterations(2))
    >>> batch = next(iter(loader))
    >>> batch.x.shape[0], batch.graphs_mask.shape[0]  # 2 mini-batches
    (400, 4)
    >>> len(loader)                                   # 20 clusters / (4 x 2)
    2
"""
import inspect
from typing import Any, Optional

import poptorch_core as poptorch

from . import pyg_cluster_loader
from ._loader_parts import signature_with_options
from ._refusals import public

__all__ = ["FixedSizeClusterLoader"]


class FixedSizeClusterLoader(pyg_cluster_loader.FixedSizeClusterLoader,
                             poptorch.DataLoader):
    """:class:`~poptorch_geometric.pyg_cluster_loader.FixedSizeClusterLoader`
    for PopTorch models: each iteration holds ``deviceIterations x
    replication x gradientAccumulation`` padded batches of ``batch_size``
    clusters each, concatenated. ``drop_last`` defaults to True.

    Arguments are those of the torch-side loader plus ``options`` (the
    model's ``poptorch.Options``, default: new ones).
    """

    @public
    def __init__(self, *args: Any,
                 options: Optional[poptorch.Options] = None,
                 **kwargs: Any) -> None:
        call = _TORCH_SIDE.bind(*args, **kwargs)
        call.apply_defaults()
        parts = self._build(**call.arguments, combine=True)
        poptorch.DataLoader.__init__(self, options or poptorch.Options(),
                                     **parts.base_arguments())

    __init__.__signature__ = signature_with_options(
        pyg_cluster_loader.FixedSizeClusterLoader.__init__)


_TORCH_SIDE = inspect.signature(pyg_cluster_loader.FixedSizeClusterLoader)
