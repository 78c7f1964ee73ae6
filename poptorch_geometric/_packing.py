"""Stream-packing arithmetic on graph sizes alone: how many batches greedy
packing makes, and the budgets that make it waste the fewest slots.

:func:`batch_length` is :class:`StreamPackingSampler`'s greedy rule in
NumPy, one window of at most ``max_graphs`` graphs per batch;
:func:`count_packed_batches` replays it over a whole order, so budgets can
be searched without loading a single graph again.

Example (sizes 3, 5, 2, 4, 6, 1, 3 nodes, 3 graphs and 9 nodes per batch)::

    >>> import numpy as np
    >>> sizes = np.array([3, 5, 2, 4, 6, 1, 3])
    >>> count_packed_batches(sizes, sizes * 0 + 1, 3, 9, 10)
    4
"""
import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from ._best_fit import DEFAULT_LOOKAHEAD, best_fit_batches, \
    greedy_length


#: Shuffled orders (seeded) that budgets for a shuffling loader are searched
#: with, so that an epoch in a new random order rarely needs a batch more
#: than the budgets were chosen for (more orders make that rarer; the
#: search's time grows with the count).
_SHUFFLES = 6
#: The seeded shuffles (the search's six first) the chosen budgets are then
#: raised to fit as well. The smallest budgets that fit 6 orders are on the
#: edge: a new random order often needs a batch more, which costs that
#: epoch a batch's worth of slots. Fitting 30 makes that rare, for at most
#: a few tenths of a percent of budget, and costs one more search at the
#: chosen batch count (``docs/design/packing.rst``).
_CONFIRM_SHUFFLES = 30


class _Sizes:
    """Graph sizes in the orders the budgets must pack well."""

    def __init__(self, nodes: np.ndarray, edges: np.ndarray, lookahead: int,
                 shuffle: bool, shuffles: int = _SHUFFLES) -> None:
        rng = np.random.default_rng(0)
        orders = [rng.permutation(nodes.size) for _ in range(shuffles)] \
            if shuffle else [np.arange(nodes.size)]
        self.orders = [(nodes[o], edges[o]) for o in orders]
        self.lookahead = lookahead
        #: Exact answers by budgets: the search asks again for budgets it
        #: has checked (each batch count's final budget, and budgets that
        #: neighbouring counts' bisections share).
        self._exact: Dict[Tuple[int, int, int], Optional[int]] = {}

    def batches(self, max_graphs: int, max_nodes: int, max_edges: int,
                stop_after: Optional[int] = None) -> Optional[int]:
        """The most batches any of the orders needs (None: a graph fits
        no batch). Counting may stop once past ``stop_after`` (the answer
        is then only known to be larger)."""
        key = (max_graphs, max_nodes, max_edges)
        if key in self._exact:
            return self._exact[key]
        most: Optional[int] = 0
        for n, e in self.orders:
            count = count_packed_batches(n, e, max_graphs, max_nodes,
                                         max_edges, self.lookahead,
                                         stop_after)
            if count is None:
                most = None
                break
            most = max(most, count)
            if stop_after is not None and most > stop_after:
                return most
        self._exact[key] = most
        return most


def batch_length(nodes: np.ndarray, edges: np.ndarray, node_room: int,
                 edge_room: int) -> int:
    """How many of the leading graphs (node and edge counts ``nodes`` and
    ``edges``, at most ``max_graphs`` of them) the next batch of greedy
    packing takes: 0 when the first fits no batch.

    ``node_room`` is ``max_nodes - max_graphs`` (likewise for edges). A
    batch of c graphs keeps the padding-room rule (one node and one edge
    left for every free graph slot) iff ``sum(nodes - 1) <= node_room`` and
    ``sum(edges - 1) <= edge_room``, checked after each addition."""
    return greedy_length(np.cumsum(nodes - 1), np.cumsum(edges - 1),
                         node_room, edge_room)


def count_packed_batches(nodes: np.ndarray, edges: np.ndarray,
                         max_graphs: int, max_nodes: int, max_edges: int,
                         lookahead: int = 0,
                         stop_after: Optional[int] = None) -> Optional[int]:
    """Batches :class:`StreamPackingSampler` makes from graphs of these
    sizes in this order (with this ``lookahead``), or None when a graph
    fits no batch. Counting stops once it passes ``stop_after``."""
    node_room, edge_room = max_nodes - max_graphs, max_edges - max_graphs
    if node_room < 0 or edge_room < 0:
        return None
    if lookahead:
        if int(nodes.max()) - 1 > node_room or \
                int(edges.max()) - 1 > edge_room:
            return None
        batches = 0
        for _ in best_fit_batches(nodes, edges, max_graphs, max_nodes,
                                  max_edges, lookahead):
            batches += 1
            if stop_after is not None and batches > stop_after:
                break
        return batches
    start, batches = 0, 0
    while start < len(nodes) and (stop_after is None or
                                  batches <= stop_after):
        taken = batch_length(nodes[start:start + max_graphs],
                             edges[start:start + max_graphs], node_room,
                             edge_room)
        if taken == 0:
            return None
        start += taken
        batches += 1
    return batches


#: Seconds a budget search runs before it shows a progress bar (searches on
#: tens of thousands of graphs take long enough to want one).
PROGRESS_DELAY_S = 2.0


def _progress(candidates: range, desc: str) -> Any:
    """``candidates`` behind a tqdm bar that appears only once the search
    has taken :data:`PROGRESS_DELAY_S` seconds, and goes when it ends (or
    when the bar is used as a context manager that exits)."""
    from tqdm.auto import tqdm
    return tqdm(candidates, desc=desc, delay=PROGRESS_DELAY_S, leave=False,
                unit="candidate")


def _edge_budget(num_nodes: int, ratio: float, min_edges: int) -> int:
    return max(math.ceil(ratio * num_nodes), min_edges)


def _smallest_node_budget(sizes: _Sizes, total_nodes: int, num_graphs: int,
                          ratio: float, min_nodes: int, min_edges: int,
                          num_batches: int, high: int, low: int = 0) -> int:
    """The smallest node budget (edges following by ``ratio``) that packs
    the graphs into at most ``num_batches`` batches; ``high`` must work.

    A bisection: greedy packing is not monotone in the budget (for a few
    size lists a budget packs into fewer batches than the next larger
    one), so the answer is then a larger budget that also works, a little
    less efficient, never one that needs more batches."""
    low = max(low, min_nodes, math.ceil(total_nodes / num_batches))
    while low < high:
        mid = (low + high) // 2
        count = sizes.batches(num_graphs - 1, mid - 1,
                              _edge_budget(mid, ratio, min_edges) - 1,
                              stop_after=num_batches)
        if count is not None and count <= num_batches:
            high = mid
        else:
            low = mid + 1
    return high


def _size_arrays(nodes: Sequence[int], edges: Sequence[int]
                 ) -> Tuple[np.ndarray, np.ndarray, float]:
    """Graph sizes as arrays and the dataset's edges-per-node ratio."""
    n = np.asarray(nodes, dtype=np.int64)
    e = np.asarray(edges, dtype=np.int64)
    if n.size == 0:
        raise ValueError("Cannot derive packing budgets from an empty "
                         "dataset.")
    return n, e, float(e.sum()) / max(float(n.sum()), 1.0)


def _least_budgets(n: np.ndarray, e: np.ndarray, num_graphs: int
                   ) -> Tuple[int, int]:
    """The smallest node and edge budgets packing may use: the largest
    graph plus one node and edge per other slot, and at least one per slot
    (the sampler's minimum, which graphs without edges would otherwise
    miss)."""
    return (max(int(n.max()), 1) + num_graphs - 1,
            max(int(e.max()), 1) + num_graphs - 1)


def _efficiency_bound(n: np.ndarray, e: np.ndarray, num_graphs: int,
                      batches: int) -> float:
    """The highest slot efficiency that budgets packing the graphs into
    exactly ``batches`` batches of ``num_graphs`` slots can have.

    A batch of ``c`` graphs keeps one node and one edge for each of its
    ``num_graphs - c`` free slots (the padding graph's included), so ``B``
    batches need ``B * num_nodes >= sum(nodes) - len + B * num_graphs``,
    and likewise for edges. The bound falls as ``B`` grows, and budgets
    for ``B`` that pack into fewer batches ``B'`` cannot beat ``B'``'s own
    (smaller or equal) budgets: once the bound is no better than the best
    efficiency found, no larger ``B`` can win.
    """
    graphs = n.size
    total_nodes, total_edges = int(n.sum()), int(e.sum())
    bound = total_nodes / (total_nodes - graphs + batches * num_graphs)
    if total_edges:
        bound = min(bound, total_edges /
                    (total_edges - graphs + batches * num_graphs))
    return bound


def _tightest_budgets(n: np.ndarray, e: np.ndarray, sizes: _Sizes,
                      num_graphs: int, ratio: float, batches: int,
                      known_fit: Optional[int] = None
                      ) -> Tuple[float, int, int]:
    """``(slot efficiency, num_nodes, num_edges)`` of the smallest budgets
    that pack the graphs into at most ``batches`` batches of ``num_graphs``
    graph slots, in every order of ``sizes``. ``known_fit`` is a node
    budget known to need at most ``batches`` batches (it bounds the search).

    Both budgets hold the largest graph plus one node and edge per other
    slot (nothing is ever skipped), and at least one node and edge per slot
    (the sampler's minimum, which graphs without edges would otherwise
    miss); the edge budget follows the node budget by the dataset's
    edges-per-node ``ratio``.
    """
    min_nodes, min_edges = _least_budgets(n, e, num_graphs)
    # With this many nodes the graph slots usually bind first (the edge
    # budget can still bind; the result then costs some efficiency, and
    # efficiency is scored on the true batch count).
    high = max(min_nodes, (num_graphs - 1) * int(n.max()) + num_graphs,
               math.ceil((min_edges + 1) / max(ratio, 1e-9)))
    if known_fit is not None:
        high = min(high, known_fit)
    num_nodes = _smallest_node_budget(sizes, int(n.sum()), num_graphs, ratio,
                                      min_nodes, min_edges, batches, high)
    num_edges = _edge_budget(num_nodes, ratio, min_edges)
    count = sizes.batches(num_graphs - 1, num_nodes - 1, num_edges - 1)
    efficiency = min(n.sum() / (count * num_nodes),
                     e.sum() / (count * num_edges) if e.any() else 1.0)
    return float(efficiency), num_nodes, num_edges


def _confirmed_budgets(n: np.ndarray, e: np.ndarray, lookahead: int,
                       num_graphs: int, ratio: float, batches: int,
                       num_nodes: int) -> Tuple[int, int]:
    """``(num_nodes, num_edges)``: the node budget ``num_nodes`` (edges
    following by ``ratio``) raised to the smallest with which all
    :data:`_CONFIRM_SHUFFLES` seeded shuffles, the search's among them, pack
    into at most ``batches`` batches of ``num_graphs`` slots."""
    sizes = _Sizes(n, e, lookahead, True, _CONFIRM_SHUFFLES)
    min_nodes, min_edges = _least_budgets(n, e, num_graphs)

    def packs(nodes: int) -> bool:
        count = sizes.batches(num_graphs - 1, nodes - 1,
                              _edge_budget(nodes, ratio, min_edges) - 1,
                              stop_after=batches)
        return count is not None and count <= batches

    if packs(num_nodes):
        return num_nodes, _edge_budget(num_nodes, ratio, min_edges)
    # ``low`` does not pack. Large enough budgets give every batch all its
    # graph slots (at most ``batches`` batches), so the doubling ends.
    low, step = num_nodes, max(1, num_nodes // 256)
    while not packs(low + step):
        low, step = low + step, step * 2
    high = _smallest_node_budget(sizes, int(n.sum()), num_graphs, ratio,
                                 min_nodes, min_edges, batches, low + step,
                                 low=low + 1)
    return high, _edge_budget(high, ratio, min_edges)


def packing_budget(nodes: Sequence[int], edges: Sequence[int],
                   num_graphs: int, lookahead: int = DEFAULT_LOOKAHEAD,
                   shuffle: bool = True) -> Tuple[int, int]:
    """Node and edge budgets for stream packing graphs of these sizes into
    batches of ``num_graphs`` graph slots (one reserved for padding), with
    ``lookahead`` (0: PopTorch's greedy packing).

    The rule: the edge budget is the node budget times the dataset's
    edges-per-node ratio (so both fill together) and both leave room for
    the largest graph plus the padding graph. For a candidate number of
    batches ``B`` (from the fewest the graph slots allow, ``ceil(len /
    (num_graphs - 1))``, to twice that) the node budget is the smallest with
    which packing needs at most ``B`` batches, in a few seeded shuffles
    (``shuffle``) or the dataset's order; the ``B`` whose budgets give the
    highest slot efficiency (real over allocated nodes and edges, the lower
    of the two) wins. The walk over ``B`` stops once the padding room alone
    keeps every later ``B`` below the best efficiency found
    (:func:`_efficiency_bound`): on NCI with 128 graph slots after 5 of 41
    batch counts, for the same budgets in a quarter of the time. With
    ``shuffle``, its node budget is then raised to the smallest that packs
    :data:`_CONFIRM_SHUFFLES` seeded shuffles into ``B`` batches too
    (:func:`_confirmed_budgets`).
    """
    n, e, ratio = _size_arrays(nodes, edges)
    sizes = _Sizes(n, e, lookahead, shuffle)
    fewest = math.ceil(n.size / (num_graphs - 1))
    step = max(1, fewest // 64)  # every B for small datasets
    best, known_fit = None, None
    # The bar closes when the walk stops early, too.
    with _progress(range(fewest, 2 * fewest + 1, step),
                   "Packing budgets (batch counts)") as batch_counts:
        for batches in batch_counts:
            # Efficiency is not unimodal in B (a drop of several points can
            # come before the best), so B walks on until its bound says no
            # later B can win.
            if best is not None and \
                    _efficiency_bound(n, e, num_graphs, batches) <= best[0]:
                break
            candidate = _tightest_budgets(n, e, sizes, num_graphs, ratio,
                                          batches, known_fit)
            # A budget that fits B batches fits B + 1 as well.
            known_fit = candidate[1]
            if best is None or candidate[0] > best[0]:  # the first on ties
                best = (*candidate, batches)
    if shuffle:
        return _confirmed_budgets(n, e, lookahead, num_graphs, ratio,
                                  best[3], best[1])
    return best[1], best[2]


def batch_size_budget(nodes: Sequence[int], edges: Sequence[int],
                      batch_size: int, lookahead: int = DEFAULT_LOOKAHEAD,
                      shuffle: bool = True) -> Tuple[int, int, int]:
    """``(num_graphs, num_nodes, num_edges)`` with which packing (with
    ``lookahead``) needs at most ``ceil(len / batch_size)`` batches (as many
    as a ``DataLoader(batch_size=batch_size)`` makes), in a few seeded
    shuffles (``shuffle``) or the dataset's order, with the highest node
    and edge slot efficiency.

    More graph slots than ``batch_size`` let the node and edge budgets
    bind instead of the graph count; each slot also reserves one node and
    one edge for padding, so past some point more slots only waste room.
    The search walks the slot count up from the fewest that can reach the
    batch count and stops once the efficiency has not improved for a while;
    with ``shuffle`` the winner's budgets are confirmed as in
    :func:`packing_budget`.
    """
    n, e, ratio = _size_arrays(nodes, edges)
    sizes = _Sizes(n, e, lookahead, shuffle)
    batches = math.ceil(n.size / batch_size)
    # Fewest slots with which `batches` batches can hold every graph (one
    # slot per batch is the padding graph's).
    first = math.ceil(n.size / batches) + 1
    step = max(1, batch_size // 32)
    best, since_best, patience = None, 0, 8
    # The bar closes when the walk stops early, too.
    with _progress(range(first, 2 * batch_size + 2, step),
                   "Packing budgets (graph slots)") as slot_counts:
        for num_graphs in slot_counts:
            candidate = _tightest_budgets(n, e, sizes, num_graphs, ratio,
                                          batches)
            if best is None or candidate[0] > best[0]:
                best, since_best = (*candidate, num_graphs), 0
            else:
                since_best += 1
                if since_best == patience:
                    break
    if shuffle:
        return (best[3], *_confirmed_budgets(n, e, lookahead, best[3], ratio,
                                             batches, best[1]))
    return best[3], best[1], best[2]
