"""PyG's ``Collater`` with PopTorch Geometric's signature.

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> batch = Collater()([Data(x=torch.ones(2, 1)), Data(x=torch.ones(3, 1))])
    >>> batch.num_graphs, batch.x.shape
    (2, torch.Size([5, 1]))
"""
from typing import List, Optional

from torch_geometric.loader.dataloader import Collater as _PyGCollater

__all__ = ["Collater"]


class Collater(_PyGCollater):
    """Batches a list of PyG data objects with ``Batch.from_data_list``.

    Args:
        follow_batch: keys that get an assignment vector ``<key>_batch``.
        exclude_keys: keys left out of the batch.
    """

    def __init__(self, follow_batch: Optional[List[str]] = None,
                 exclude_keys: Optional[List[str]] = None) -> None:
        # PyG >= 2.4 takes the dataset first: pass by keyword.
        super().__init__(dataset=None, follow_batch=follow_batch or [],
                         exclude_keys=exclude_keys or [])
