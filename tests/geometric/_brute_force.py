"""Brute-force neighbour searches, written independently of
``poptorch_geometric.ops``: plain Python loops over pairs, sorted by
(distance, index)."""
import math
from typing import List, Optional, Sequence, Tuple

import torch

Pairs = Tuple[List[int], List[int]]


def _distance(a: Sequence[float], b: Sequence[float], cosine: bool) -> float:
    if cosine:
        dot = sum(p * q for p, q in zip(a, b))
        norm = math.sqrt(sum(p * p for p in a)) * math.sqrt(
            sum(q * q for q in b))
        return 1.0 - dot / max(norm, 1e-12)
    # Squared Euclidean distance orders exactly like the distance and stays
    # exact for integer coordinates.
    return sum((p - q) ** 2 for p, q in zip(a, b))


def _ranked(x: torch.Tensor, y: torch.Tensor, bx: Optional[torch.Tensor],
            by: Optional[torch.Tensor], i: int, exclude_self: bool,
            cosine: bool) -> List[Tuple[float, int]]:
    xs = x.reshape(x.size(0), x[0].numel() if len(x) else 0).tolist()
    ys = y.reshape(y.size(0), y[0].numel() if len(y) else 0).tolist()
    bxs = [0] * len(xs) if bx is None else bx.tolist()
    bys = [0] * len(ys) if by is None else by.tolist()
    found = [(_distance(xs[j], ys[i], cosine), j) for j in range(len(xs))
             if bxs[j] == bys[i] and not (exclude_self and j == i)]
    return sorted(found)


def knn_pairs(x, y, k, bx=None, by=None, exclude_self=False,
              cosine=False) -> Pairs:
    """(query rows, point cols), k slots per query, empty slots -1."""
    rows, cols = [], []
    for i in range(y.size(0)):
        ranked = _ranked(x, y, bx, by, i, exclude_self, cosine)[:k]
        rows += [i] * len(ranked) + [-1] * (k - len(ranked))
        cols += [j for _, j in ranked] + [-1] * (k - len(ranked))
    return rows, cols


def radius_pairs(x, y, r, bx=None, by=None, max_num_neighbors=32,
                 exclude_self=False) -> Pairs:
    """(query rows, point cols) of points strictly closer than r, the
    nearest first, min(candidates, max_num_neighbors) slots per query."""
    slots = min(x.size(0) - int(exclude_self), max_num_neighbors)
    rows, cols = [], []
    for i in range(y.size(0)):
        ranked = [(d, j) for d, j in _ranked(x, y, bx, by, i, exclude_self,
                                             False) if d < r * r][:slots]
        rows += [i] * len(ranked) + [-1] * (slots - len(ranked))
        cols += [j for _, j in ranked] + [-1] * (slots - len(ranked))
    return rows, cols


def interpolate(x, pos_x, pos_y, k, bx=None, by=None) -> torch.Tensor:
    """Inverse squared distance weighted mean over the k nearest points;
    zeros without any point."""
    out = torch.zeros(pos_y.size(0), x.size(1), dtype=torch.float64)
    for i in range(pos_y.size(0)):
        ranked = _ranked(pos_x, pos_y, bx, by, i, False, False)[:k]
        weights = [1.0 / max(d, 1e-16) for d, _ in ranked]
        if ranked:
            total = sum(w * x[j].double() for w, (_, j) in
                        zip(weights, ranked))
            out[i] = total / sum(weights)
    return out
