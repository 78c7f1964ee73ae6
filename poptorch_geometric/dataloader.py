"""PopTorch-side loaders: each iteration yields one combined batch holding
the ``batch_size x deviceIterations x replication x gradientAccumulation``
samples a PopTorch model consumes per call.

Mini-batches are collated (and padded) one by one, then concatenated tensor
by tensor along dim 0 (see
:class:`~poptorch_geometric.collate.CombinedBatchingCollater`), which is the
layout PopTorch splits across iterations and replicas.

Example::

    >>> import poptorch
    >>> from poptorch_geometric.datasets import SyntheticMolecules
    >>> opts = poptorch.Options().deviceIterations(2)
    >>> loader = FixedSizeDataLoader(SyntheticMolecules(40), batch_size=5,
    ...                              options=opts)
    >>> batch = next(iter(loader))
    >>> batch.graphs_mask.shape        # 2 mini-batches of 5 graph slots
    torch.Size([10])
"""
import inspect
from typing import Any, List, Optional

import poptorch_core as poptorch

from . import pyg_dataloader
from .collate import CombinedBatchingCollater
from .pyg_dataloader import FixedSizeStrategy, OverSizeStrategy

__all__ = ["DataLoader", "FixedSizeDataLoader", "FixedSizeStrategy",
           "OverSizeStrategy"]


def _with_options(init: Any) -> inspect.Signature:
    """``init``'s signature with ``options`` added before ``**kwargs``."""
    params = list(inspect.signature(init).parameters.values())
    options = inspect.Parameter("options", inspect.Parameter.KEYWORD_ONLY,
                                default=None,
                                annotation=Optional[poptorch.Options])
    return inspect.Signature(params[:-1] + [options, params[-1]])


class DataLoader(pyg_dataloader.DataLoader, poptorch.DataLoader):
    """PyG's ``DataLoader`` for PopTorch models: every iteration combines
    ``batch_size x`` (``options``' device iterations, replicas and gradient
    accumulation) samples, collated in mini-batches of ``batch_size``.

    Args:
        dataset: the dataset.
        batch_size: samples per mini-batch.
        shuffle: reshuffle every epoch.
        follow_batch: keys that get a ``<key>_batch`` assignment vector.
        exclude_keys: keys left out of the batch.
        options: the model's ``poptorch.Options`` (default: new ones).
        **kwargs: arguments of ``poptorch.DataLoader``.
    """

    def __init__(self, dataset: Any, batch_size: int = 1,
                 shuffle: bool = False,
                 follow_batch: Optional[List[str]] = None,
                 exclude_keys: Optional[List[str]] = None,
                 options: Optional[poptorch.Options] = None,
                 **kwargs: Any) -> None:
        # Read by _create_collater, which runs before the base init.
        self.batch_size = batch_size
        super().__init__(dataset=dataset, batch_size=batch_size,
                         shuffle=shuffle, follow_batch=follow_batch,
                         exclude_keys=exclude_keys,
                         options=options or poptorch.Options(), **kwargs)

    def _create_collater(self, **collater_args: Any) -> Any:
        return CombinedBatchingCollater(
            mini_batch_size=self.batch_size,
            collater=super()._create_collater(**collater_args))


class FixedSizeDataLoader(pyg_dataloader.FixedSizeDataLoader,
                          poptorch.DataLoader):
    """:class:`~poptorch_geometric.pyg_dataloader.FixedSizeDataLoader` for
    PopTorch models: each iteration holds ``deviceIterations x replication x
    gradientAccumulation`` fixed-size mini-batches of ``batch_size`` graph
    slots each, concatenated. ``drop_last`` defaults to True.

    Arguments are those of the torch-side loader plus ``options`` (the
    model's ``poptorch.Options``, default: new ones).
    """

    def __init__(self, *args: Any,
                 options: Optional[poptorch.Options] = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, options=options or poptorch.Options(),
                         **kwargs)

    __init__.__signature__ = _with_options(
        pyg_dataloader.FixedSizeDataLoader.__init__)

    def _create_collater(self, **collater_args: Any) -> Any:
        # With a batch sampler (StreamPack or the user's) each sampled list
        # is one mini-batch and poptorch.DataLoader combines them in
        # __iter__; otherwise torch hands over all mini-batches at once.
        mini_batch_size = None if self.batch_sampler is not None \
            else self.padded_batch_size - 1
        return CombinedBatchingCollater(
            mini_batch_size=mini_batch_size,
            collater=super()._create_collater(**collater_args))
