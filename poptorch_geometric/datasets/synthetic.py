"""Seeded molecule-like graphs with a realistic size distribution.

Example::

    >>> ds = SyntheticMolecules(1000, seed=0)
    >>> g = ds[0]
    >>> g.x.shape[1], g.edge_attr.shape[1], g.y.shape, g.x.dtype
    (9, 3, torch.Size([1, 1]), torch.int64)
    >>> bool((ds[0].x == SyntheticMolecules(1000, seed=0)[0].x).all())
    True
"""
from typing import Callable, Optional

import numpy as np
import torch
from torch_geometric.data import Data, Dataset

__all__ = ["SyntheticMolecules"]

# Atomic numbers and frequencies of heavy atoms in small organic molecules.
_ELEMENTS = np.array([6, 7, 8, 9, 16, 17])
_ELEMENT_P = np.array([0.72, 0.11, 0.12, 0.02, 0.015, 0.015])
# Polar surface contribution (square angstroms) of N and O, for the label.
_POLAR = {7: 12.0, 8: 17.0}
_HYBRIDIZATION_SP2, _HYBRIDIZATION_SP3 = 3, 4
_CHARGE_ZERO = 5  # index of formal charge 0 in from_smiles' x_map
_BOND_SINGLE, _BOND_AROMATIC = 1, 12


class SyntheticMolecules(Dataset):
    """``num_graphs`` random molecule-like graphs, each a deterministic
    function of ``(seed, index)`` (so graphs are generated on access and
    any index can be read in any order).

    Sizes follow a gamma distribution shaped like the NCI set (mean
    ``mean_num_nodes``, standard deviation half of it, at least 1 and at most
    ``max_num_nodes`` atoms). The bonds form a random tree plus a few ring
    closures (about 0.09 per atom, as in NCI); they are stored in both
    directions. Features use ``torch_geometric.utils.from_smiles``' layout
    (``x`` [n, 9] long, ``edge_attr`` [e, 3] long) and ``y`` [1, 1] float32
    is a TPSA-like label: a per-atom polar contribution of the N and O atoms
    plus noise.

    Args:
        num_graphs: number of graphs.
        seed: the seed of the whole dataset.
        mean_num_nodes: mean atom count.
        max_num_nodes: largest atom count.
        transform: applied to each graph on access.
    """

    def __init__(self, num_graphs: int, seed: int = 0,
                 mean_num_nodes: float = 16.4, max_num_nodes: int = 120,
                 transform: Optional[Callable] = None) -> None:
        if num_graphs < 0:
            raise ValueError(f"num_graphs ({num_graphs}) must be >= 0.")
        if not 1 <= mean_num_nodes <= max_num_nodes:
            raise ValueError(
                f"Need 1 <= mean_num_nodes ({mean_num_nodes}) <= "
                f"max_num_nodes ({max_num_nodes}).")
        self.num_graphs = num_graphs
        self.seed = seed
        self.mean_num_nodes = mean_num_nodes
        self.max_num_nodes = max_num_nodes
        super().__init__(root=None, transform=transform)

    def len(self) -> int:
        """The number of graphs."""
        return self.num_graphs

    def get(self, idx: int) -> Data:
        """Graph ``idx``, generated from ``(seed, idx)``: the same graph on
        every access."""
        rng = np.random.default_rng([self.seed, idx])
        shape = 4.0  # (mean / std) ** 2 with std = mean / 2
        n = int(rng.gamma(shape, self.mean_num_nodes / shape))
        n = min(max(n, 1), self.max_num_nodes)
        src, dst = _bonds(rng, n)
        atoms = rng.choice(_ELEMENTS, size=n, p=_ELEMENT_P)
        in_ring = np.zeros(n, dtype=bool)
        in_ring[src[n - 1:]] = in_ring[dst[n - 1:]] = True  # ring closures
        degree = np.bincount(np.concatenate([src, dst]), minlength=n)
        x = np.zeros((n, 9), dtype=np.int64)
        x[:, 0] = atoms
        x[:, 2] = degree
        x[:, 3] = _CHARGE_ZERO
        x[:, 4] = np.clip(4 - degree, 0, 3) * (atoms == 6)
        x[:, 6] = np.where(in_ring, _HYBRIDIZATION_SP2, _HYBRIDIZATION_SP3)
        x[:, 7] = in_ring & (rng.random(n) < 0.7)
        x[:, 8] = in_ring
        aromatic = x[src, 7].astype(bool) & x[dst, 7].astype(bool)
        bond = np.stack([np.where(aromatic, _BOND_AROMATIC, _BOND_SINGLE),
                         np.zeros_like(src), aromatic], axis=1)
        polar = sum(_POLAR.get(int(a), 0.0) for a in atoms)
        y = polar + rng.normal(0.0, 2.0)
        return Data(
            x=torch.from_numpy(x),
            edge_index=torch.from_numpy(
                np.stack([np.concatenate([src, dst]),
                          np.concatenate([dst, src])])).long(),
            edge_attr=torch.from_numpy(np.concatenate([bond, bond])).long(),
            y=torch.tensor([[y]], dtype=torch.float32))


def _bonds(rng: np.random.Generator, n: int):
    """A random tree over ``n`` atoms (each joins one of the few previous
    atoms, so chains and branches form) plus ring closures of 5-6 atoms."""
    if n == 1:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    child = np.arange(1, n)
    parent = np.maximum(child - 1 - rng.integers(0, 3, size=n - 1), 0)
    num_rings = rng.binomial(n, 0.09)
    ring_end = rng.integers(5, n, size=num_rings) if n > 5 \
        else np.zeros(0, dtype=np.int64)
    ring_end = np.unique(ring_end)
    ring_start = ring_end - rng.integers(4, 6, size=ring_end.size)
    keep = ring_start >= 0
    src = np.concatenate([parent, ring_start[keep]]).astype(np.int64)
    dst = np.concatenate([child, ring_end[keep]]).astype(np.int64)
    return src, dst
