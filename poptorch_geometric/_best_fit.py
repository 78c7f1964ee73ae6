"""Packing with a bounded lookahead: greedy in sampling order, then topped
up with the best-fitting graphs among the next ``lookahead`` samples.

PopTorch's stream packing closes a batch as soon as the next graph does not
fit, wasting whatever room is left. Here each batch starts with the oldest
graph not yet packed and takes the following graphs while they fit (PopTorch's
rule); then, while graph slots are free, it adds the graph of the window that
fills the remaining node and edge room most evenly (the largest
``min(nodes / node room, edges / edge room)``; the earliest on ties), among
those that fit the room the greedy prefix left (a graph without edges gives
back its padding edge, but graphs that did not fit are not looked at
again). The padding-room rule holds throughout: a batch of ``c`` graphs
keeps one node and one edge for each of its ``max_graphs - c`` free slots.

Guarantees: every graph is packed exactly once; each batch starts with the
oldest graph still waiting and takes only from the next ``lookahead`` (at
least ``max_graphs``) graphs still waiting, so a graph overtakes fewer than
``lookahead`` waiting graphs; the result depends only on the order and the
sizes (no randomness). Each batch costs O(``lookahead``) work, whatever
the dataset's length (re-slicing the list of waiting graphs per batch made
an epoch of a million graphs quadratic: 0.5 ms per batch instead of
0.03 ms).

Example (room for 2 graphs and 9 nodes; sizes 5, 5, 4, 4 in that order)::

    >>> import numpy as np
    >>> nodes = np.array([5, 5, 4, 4])
    >>> [b.tolist() for b in best_fit_batches(nodes, nodes * 0 + 1, 2, 9,
    ...                                       10, lookahead=0)]
    [[0], [1, 2], [3]]
    >>> [b.tolist() for b in best_fit_batches(nodes, nodes * 0 + 1, 2, 9,
    ...                                       10, lookahead=4)]
    [[0, 2], [1, 3]]
"""
from typing import Iterator, List

import numpy as np

__all__: list = []

#: Samples a batch may be topped up from. On NCI with
#: ``FixedSizeOptions.for_packing(dataset, 128)``: greedy 97.6% of node and
#: edge slots, lookahead 64 about 98.9%, 256 about 99.1%; the cost per batch
#: grows little with the window (the candidates are filtered once).
DEFAULT_LOOKAHEAD = 256


def _top_up(nodes: np.ndarray, edges: np.ndarray, node_room: int,
            edge_room: int, slots: int) -> List[int]:
    """Indices into ``nodes``/``edges`` (sizes minus one) chosen to fill
    ``node_room`` and ``edge_room`` with at most ``slots`` graphs."""
    chosen: List[int] = []
    index = ((nodes <= node_room) & (edges <= edge_room)).nonzero()[0]
    cand_nodes, cand_edges = nodes[index], edges[index]
    while index.size and len(chosen) < slots:
        score = np.minimum(cand_nodes * (1.0 / max(node_room, 1)),
                           cand_edges * (1.0 / max(edge_room, 1)))
        best = int(score.argmax())
        chosen.append(int(index[best]))
        node_room -= int(cand_nodes[best])
        edge_room -= int(cand_edges[best])
        keep = (cand_nodes <= node_room) & (cand_edges <= edge_room)
        keep[best] = False
        index, cand_nodes, cand_edges = (index[keep], cand_nodes[keep],
                                         cand_edges[keep])
    return chosen


def best_fit_batches(nodes: np.ndarray, edges: np.ndarray, max_graphs: int,
                     max_nodes: int, max_edges: int,
                     lookahead: int) -> Iterator[np.ndarray]:
    """Packs graphs of these node and edge counts, given in sampling order,
    into batches of at most ``max_graphs`` graphs, ``max_nodes`` nodes and
    ``max_edges`` edges (padding-room rule included). Yields each batch as
    the sorted positions of its graphs. Every graph must fit an empty batch
    (callers reject the others first). ``lookahead=0`` is PopTorch's greedy
    packing."""
    # The padding-room rule in terms of sizes minus one: a batch of c
    # graphs fits iff its sums of (size - 1) stay within these rooms.
    node_room, edge_room = max_nodes - max_graphs, max_edges - max_graphs
    nodes, edges = nodes - 1, edges - 1
    width = max(lookahead, max_graphs)
    total = len(nodes)
    # The positions not packed yet, in order, are ``carry`` (passed over by
    # earlier batches: fewer than ``width``) then ``cursor`` onwards. Each
    # batch touches only its window, so an epoch costs O(batches x width),
    # however long the dataset.
    carry = np.empty(0, dtype=np.int64)
    cursor = 0
    while carry.size or cursor < total:
        fresh = min(cursor + width - carry.size, total)
        window = np.concatenate((carry, np.arange(cursor, fresh)))
        cursor = fresh
        head = window[:max_graphs]
        node_sums, edge_sums = nodes[head].cumsum(), edges[head].cumsum()
        # The greedy prefix ends at the first graph that overflows either
        # room (a graph without edges has size -1 here, so sums can fall
        # again later: only the first overflow counts, as in PopTorch).
        fits = (node_sums <= node_room) & (edge_sums <= edge_room)
        count = fits.size if fits.all() else int(fits.argmin())
        if not lookahead or count == max_graphs or window.size == count:
            carry = window[count:]
            yield head[:count]
            continue
        rest = window[count:]
        extra = _top_up(nodes[rest], edges[rest],
                        node_room - int(node_sums[count - 1]),
                        edge_room - int(edge_sums[count - 1]),
                        max_graphs - count)
        taken = np.zeros(window.size, dtype=bool)
        taken[:count] = True
        taken[np.asarray(extra, dtype=np.int64) + count] = True
        carry = window[~taken]
        yield window[taken]
