"""METIS partitions through ``pymetis``, cached by graph and part count.

Example::

    >>> edge_index = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5],
    ...                            [1, 0, 2, 1, 4, 3, 5, 4]])
    >>> parts = metis_partition(edge_index, num_nodes=6, num_parts=2)
    >>> parts[:3].unique().numel(), parts[3:].unique().numel()  # two paths
    (1, 1)
    >>> metis_partition(edge_index, 6, 2) is parts            # cached
    True
"""
import collections
import hashlib
import threading
from typing import Dict, Tuple

import numpy as np
import pymetis
import torch
from torch import Tensor

__all__ = ["graph_fingerprint", "metis_partition"]

# Partitions of a 1M-node graph take minutes: keep the last few.
_CACHE_SIZE = 4
_CACHE: "collections.OrderedDict[Tuple, Tensor]" = collections.OrderedDict()
_LOCK = threading.Lock()
# METIS' own seed, so that a graph always gets the same partition.
_METIS_SEED = 0


def graph_fingerprint(edge_index: Tensor, num_nodes: int) -> str:
    """A digest of the graph's structure (its edges and node count): equal
    graphs share partitions, any change to an edge makes a new one."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.int64(num_nodes).tobytes())
    digest.update(edge_index.to("cpu", torch.long).contiguous().numpy()
                  .tobytes())
    return digest.hexdigest()


def metis_partition(edge_index: Tensor, num_nodes: int, num_parts: int,
                    recursive: bool = False) -> Tensor:
    """The part (``0 .. num_parts - 1``) of every node, from METIS k-way
    partitioning (recursive bisection when ``recursive``) of the graph made
    undirected and loop-free (METIS requires both; the edges of the data
    are not changed). Cached by graph and part count: the same graph is
    partitioned once per process."""
    if not 1 <= num_parts <= max(num_nodes, 1):
        raise ValueError(
            f"num_parts ({num_parts}) must be between 1 and "
            f"the number of nodes ({num_nodes}).")
    key = (graph_fingerprint(edge_index, num_nodes), num_parts,
           bool(recursive))
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    if num_parts == 1:
        parts = torch.zeros(num_nodes, dtype=torch.long)
    else:
        parts = _run_metis(*_symmetric_csr(edge_index, num_nodes), num_parts,
                           recursive)
    with _LOCK:
        _CACHE[key] = parts
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return parts


def _symmetric_csr(edge_index: Tensor,
                   num_nodes: int) -> Tuple[np.ndarray, np.ndarray]:
    """CSR of both directions of every edge, without loops or repeats."""
    src, dst = edge_index.to("cpu", torch.long)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys = torch.unique(torch.cat([src * num_nodes + dst,
                                   dst * num_nodes + src]))
    indptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(keys // num_nodes, minlength=num_nodes), 0,
                 out=indptr[1:])
    return indptr.numpy(), (keys % num_nodes).numpy()


def _run_metis(indptr: np.ndarray, adjacent: np.ndarray, num_parts: int,
               recursive: bool) -> Tensor:
    options = pymetis.Options(seed=_METIS_SEED)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2
        graph: Dict = {"adjacency": pymetis.CSRAdjacency(indptr, adjacent)}
    else:
        graph = {"xadj": indptr, "adjncy": adjacent}
    _, membership = pymetis.part_graph(num_parts, **graph,
                                       recursive=recursive, options=options)
    return torch.as_tensor(np.asarray(membership), dtype=torch.long)
