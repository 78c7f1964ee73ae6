"""PopTorch Geometric on a simulated IPU: fixed-size batching of PyG graphs.

Every batch is padded to the same number of graphs, nodes and edges, which
is what an IPU needs and what lets ``torch.compile`` or CUDA graphs compile
once. Importing the package registers the PyG argument parsers with PopTorch,
so ``Data``, ``HeteroData`` and ``Batch`` objects are valid model inputs.

Example::

    >>> import poptorch_geometric as pyg_ipu
    >>> from poptorch_geometric.datasets import SyntheticMolecules
    >>> ds = SyntheticMolecules(100)
    >>> opts = pyg_ipu.FixedSizeOptions.for_packing(ds, graphs_per_batch=16)
    >>> loader = pyg_ipu.FixedSizeDataLoader(
    ...     ds, batch_size=16, fixed_size_options=opts,
    ...     fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack)
    >>> {b.x.shape[0] for b in loader} == {opts.num_nodes}
    True
"""
import poptorch_core as poptorch

from . import _known_fixes
from .cluster_loader import FixedSizeClusterLoader
from .collate import (CombinedBatchingCollater, FixedSizeCollater,
                      make_exclude_keys)
from .common import DataBatch, HeteroDataBatch, call_once
from .dataloader import (DataLoader, FixedSizeDataLoader, FixedSizeStrategy,
                         OverSizeStrategy)
from .efficiency import BatchingEfficiency, batching_efficiency
from .fixed_size_options import FixedSizeOptions
from .metrics import (count_real, num_real_graphs,
                      num_real_graphs_per_mini_batch, num_real_nodes)
from ._padding_masks import all_rows_real
from .model_with_loss import ModelWithLoss, with_loss
from .neighbor_loader import (FixedSizeNeighborLoader,
                              PyGFixedSizeNeighborLoader,
                              TorchNeighborSampler)
from .pyg_cluster_loader import ClusterData
from .pure_backends import PureBackendsChange, use_pure_python_backends
from . import pure_backends
from .override import _TorchGeometricOpsSubstitutionManager
from .stream_packing_sampler import StreamPackingSampler
from .types import PyGArgsParser, registerCustomArgParsers
from .utils import TrainingStepper, set_aggregation_dim_size
from . import ops

#: The PopTorch Geometric API version this package reproduces (upstream's
#: build wrote it over an "@VERSION@-@SNAPSHOT@" template; here it is real).
__version__ = poptorch.__version__

__all__ = [
    "__version__",
    "FixedSizeDataLoader",
    "FixedSizeOptions",
    "FixedSizeStrategy",
    "set_aggregation_dim_size",
    "TrainingStepper",
    "make_exclude_keys",
    "OverSizeStrategy",
    "PyGArgsParser",
    # Also public in this reimplementation:
    "all_rows_real",
    "BatchingEfficiency",
    "batching_efficiency",
    "ClusterData",
    "CombinedBatchingCollater",
    "DataBatch",
    "DataLoader",
    "FixedSizeClusterLoader",
    "FixedSizeCollater",
    "FixedSizeNeighborLoader",
    "HeteroDataBatch",
    "PyGFixedSizeNeighborLoader",
    "StreamPackingSampler",
    "TorchNeighborSampler",
    "call_once",
    "count_real",
    "ModelWithLoss",
    "num_real_graphs",
    "num_real_graphs_per_mini_batch",
    "num_real_nodes",
    "ops",
    "with_loss",
    "registerCustomArgParsers",
    "PureBackendsChange",
    "use_pure_python_backends",
]


@call_once
def _registerOverrides() -> None:
    """Every PopTorch model capture enters the PyG op substitutions."""
    poptorch._OverwriteContextManager.registerSubsitutionManager(
        _TorchGeometricOpsSubstitutionManager)


_registerOverrides()
registerCustomArgParsers()
_known_fixes.register()
# PyG's knn, SplineConv, ClusterData, NeighborLoader, ... raise ImportError
# without pyg-lib or torch-sparse; with these they run (pure_backends.py).
if pure_backends.enabled_by_environment():
    use_pure_python_backends()
