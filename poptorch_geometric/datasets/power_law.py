"""A large random graph with power-law degrees, for sampling loaders.

Example::

    >>> data = power_law_graph(num_nodes=1000, num_edges=5000, seed=0)
    >>> data.num_nodes, data.num_edges, tuple(data.x.shape)
    (1000, 5000, (1000, 16))
    >>> bool((data.edge_index == power_law_graph(1000, 5000, seed=0)
    ...       .edge_index).all())
    True
"""
import numpy as np
import torch
from torch_geometric.data import Data

__all__ = ["power_law_graph"]

# Edges are drawn in rounds of the missing count times this, so one round
# usually covers the duplicates and self-loops that are dropped.
_OVERSAMPLE = 1.1
# Dense requests converge slowly (the missing pairs are the unlikely ones).
_MAX_ROUNDS = 200


def power_law_graph(num_nodes: int = 1_000_000,
                    num_edges: int = 10_000_000,
                    exponent: float = 2.5,
                    num_features: int = 16,
                    num_classes: int = 8,
                    seed: int = 0) -> Data:
    """A directed random graph whose in- and out-degrees follow a power law
    (a Chung-Lu graph), with node features and learnable labels.

    Node ``v`` gets a weight proportional to ``(rank(v) + 1) ** (-1 / (
    exponent - 1))`` under a random ranking, so the fraction of nodes of
    degree ``d`` falls like ``d ** -exponent``; both ends of every edge are
    drawn proportionally to the weights (in closed form, so a graph of 1M
    nodes and 10M edges takes a few seconds). Self-loops and duplicate
    edges are dropped and redrawn, so the graph has exactly ``num_edges``
    distinct edges, sorted by source then target.

    ``x`` [num_nodes, num_features] float32 is standard normal; ``y`` is the
    arg-max of a fixed random linear map of ``x`` (a task a model can
    learn). Everything is a deterministic function of the arguments.

    Args:
        num_nodes: number of nodes.
        num_edges: number of distinct directed edges (at most
            ``num_nodes * (num_nodes - 1)``).
        exponent: the degree distribution's exponent (> 2).
        num_features: node feature columns (0: no ``x``).
        num_classes: label classes (0: no ``y``).
        seed: the seed.
    """
    if num_nodes < 2:
        raise ValueError(f"num_nodes ({num_nodes}) must be at least 2.")
    if not 0 <= num_edges <= num_nodes * (num_nodes - 1) // 2:
        raise ValueError(
            f"num_edges ({num_edges}) must be between 0 and half the number "
            f"of possible edges ({num_nodes * (num_nodes - 1) // 2}): denser "
            "graphs are not sparse graphs, draw them otherwise.")
    if exponent <= 2:
        raise ValueError(f"exponent ({exponent}) must be above 2: the mean "
                         "degree of a power law with exponent <= 2 diverges.")
    rng = np.random.default_rng(seed)
    keys = _distinct_edge_keys(rng, num_nodes, num_edges, exponent)
    data = Data(edge_index=torch.from_numpy(
        np.stack([keys // num_nodes, keys % num_nodes])),
        num_nodes=num_nodes)
    if num_features:
        x = rng.standard_normal((num_nodes, num_features), dtype=np.float32)
        data.x = torch.from_numpy(x)
        if num_classes:
            weight = rng.standard_normal((num_features, num_classes),
                                         dtype=np.float32)
            data.y = torch.from_numpy((x @ weight).argmax(axis=1))
    elif num_classes:
        data.y = torch.from_numpy(rng.integers(0, num_classes, num_nodes))
    return data


def _distinct_edge_keys(rng: np.random.Generator, num_nodes: int,
                        num_edges: int, exponent: float) -> np.ndarray:
    """Sorted keys ``source * num_nodes + target`` of distinct non-loop
    edges."""
    ranking = rng.permutation(num_nodes)
    keys = np.empty(0, dtype=np.int64)
    for _ in range(_MAX_ROUNDS):
        if keys.size >= num_edges:
            break
        draw = int((num_edges - keys.size) * _OVERSAMPLE) + 16
        src = ranking[_ranked_endpoints(rng, num_nodes, exponent, draw)]
        dst = ranking[_ranked_endpoints(rng, num_nodes, exponent, draw)]
        new = (src * num_nodes + dst)[src != dst]
        keys = _sorted_distinct(np.concatenate([keys, new]))
    if keys.size < num_edges:
        raise ValueError(
            f"Could not draw {num_edges} distinct edges over {num_nodes} "
            f"nodes in {_MAX_ROUNDS} rounds: the graph is too dense for its "
            "degree distribution; ask for fewer edges.")
    if keys.size > num_edges:
        keep = rng.choice(keys.size, num_edges, replace=False)
        keys = keys[np.sort(keep)]
    return keys


def _ranked_endpoints(rng: np.random.Generator, num_nodes: int,
                      exponent: float, size: int) -> np.ndarray:
    """Ranks drawn with density ``(r + 1) ** -a``, ``a = 1 / (exponent -
    1)``, by inverting its integral."""
    power = 1.0 - 1.0 / (exponent - 1.0)
    low, high = 1.0, (num_nodes + 1.0) ** power
    ranks = (low + rng.random(size) * (high - low)) ** (1.0 / power) - 1.0
    return np.minimum(ranks.astype(np.int64), num_nodes - 1)


def _sorted_distinct(values: np.ndarray) -> np.ndarray:
    # np.unique is several times slower than sorting here (NumPy 2).
    values = np.sort(values)
    keep = np.empty(values.size, dtype=bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]
