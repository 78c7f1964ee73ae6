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

A well-filled batch has the data's shape: its graphs' edges per node (sizes
minus one, over the whole epoch: ``ratio``) on average. The batch's *skew* is
its nodes minus its edges / ``ratio``: how many more nodes it holds than that
shape would. A greedy prefix is *lopsided* when its skew passes
:data:`LOPSIDED` of the node room, or when it takes every graph slot with more
than that share of both rooms still free and larger graphs in the window could
fill one (:func:`_fillable`). Topping it up as it is would leave the roomier
side's slack unused (an edge-heavy run of graphs fills the edge budget with
hundreds of node slots free; a run of small graphs takes every slot), so the
top-up's score also steers the skew back to 0: it subtracts ``BALANCE * |skew
after the candidate| / (node room + edge room / ratio)``, the rooms as they are
before the candidate; and a prefix holding more than :data:`PREFIX_SLOTS` of
the graph slots is cut back to that many (at least the first graph), which
leaves the top-up slots to balance with. On long-tailed size distributions
many prefixes are lopsided, and balancing them fills more of the slots, for
more top-up steps per batch; ``docs/design/packing.rst`` has the fill and the
cost on NCI and on long-tailed sizes, and the rules tried before.

Guarantees: every graph is packed exactly once; each batch starts with the
oldest graph still waiting and takes only from the next ``lookahead`` (at
least ``max_graphs``) graphs still waiting, so a graph overtakes fewer than
``lookahead`` waiting graphs; the result depends only on the order and the
sizes (no randomness). Each batch costs O(``lookahead``) work, whatever
the dataset's length (re-slicing the list of waiting graphs per batch
would make an epoch quadratic in its length).

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
from typing import Callable, Iterator, List, Optional, Tuple

import numpy as np

#: Samples a batch may be topped up from: past this window the fill hardly
#: improves (``docs/design/packing.rst``). The cost per batch grows little
#: with the window (the candidates are filtered once).
DEFAULT_LOOKAHEAD = 256

#: A prefix whose skew passes this share of the node room (or that takes
#: every slot with more than this share of both rooms left) is lopsided
#: (higher thresholds balance fewer batches and fill less; tuned on the
#: benchmark's long-tailed sizes, ``docs/design/packing.rst``).
LOPSIDED = 0.02
#: The share of the graph slots a lopsided prefix keeps: the rest is the
#: balancing top-up's to choose (lower and higher shares balance worse on
#: the long-tailed sizes).
PREFIX_SLOTS = 0.9
#: Weight of the skew penalty in a balancing top-up's score (lower weights
#: balance less, higher ones no better).
BALANCE = 10.0


def _top_up(nodes: np.ndarray, edges: np.ndarray, node_room: int,
            edge_room: int, slots: int, ratio: float = 0.0,
            skew: Optional[float] = None) -> List[int]:
    """Indices into ``nodes``/``edges`` (sizes minus one) chosen to fill
    ``node_room`` and ``edge_room`` with at most ``slots`` graphs. With a
    ``skew`` (the batch's nodes minus its edges / ``ratio``, the data's
    edges per node), also steering the skew towards 0."""
    # Rooms are compared as 0-d arrays: NumPy 2 takes a slower path for a
    # Python int against an array (weak-scalar promotion), and at these
    # sizes a call's overhead is most of its cost.
    chosen: List[int] = []
    index = ((nodes <= np.array(node_room)) &
             (edges <= np.array(edge_room))).nonzero()[0]
    cand_nodes, cand_edges = nodes[index], edges[index]
    balance = skew is not None
    shape = cand_nodes - cand_edges / ratio if balance else None
    while index.size:
        score = np.minimum(cand_nodes * np.array(1.0 / max(node_room, 1)),
                           cand_edges * np.array(1.0 / max(edge_room, 1)))
        if balance:
            weight = BALANCE / max(node_room + edge_room / ratio, 1.0)
            score -= weight * np.abs(skew + shape)
        best = int(score.argmax())
        chosen.append(int(index[best]))
        if len(chosen) == slots:
            break
        node_room -= int(cand_nodes[best])
        edge_room -= int(cand_edges[best])
        keep = ((cand_nodes <= np.array(node_room)) &
                (cand_edges <= np.array(edge_room)))
        keep[best] = False
        if balance:
            skew += float(shape[best])
            shape = shape[keep]
        index, cand_nodes, cand_edges = (index[keep], cand_nodes[keep],
                                         cand_edges[keep])
    return chosen


def _leading(fits: np.ndarray) -> int:
    """How many of the leading entries of ``fits`` are True."""
    if not fits.size:
        return 0
    first = int(fits.argmin())  # the first False, or 0 when all are True
    return fits.size if fits[first] else first


def greedy_length(node_sums: np.ndarray, edge_sums: np.ndarray,
                  node_room: int, edge_room: int) -> int:
    """How many leading graphs (running sizes minus one ``node_sums``,
    ``edge_sums``) PopTorch's rule takes: up to the first that overflows
    either room (a graph without edges has size -1 here, so sums can fall
    again later: only the first overflow counts, as in PopTorch)."""
    return _leading((node_sums <= node_room) & (edge_sums <= edge_room))


def _cut_if_lopsided(node_sums: np.ndarray, edge_sums: np.ndarray,
                     count: int, rest: Callable[[int], Tuple[np.ndarray,
                                                             np.ndarray]],
                     node_room: int, edge_room: int, max_graphs: int,
                     ratio: float) -> Tuple[int, Optional[float]]:
    """``(count, skew)``: the greedy prefix of ``count`` graphs (running
    sizes minus one ``node_sums``, ``edge_sums``) as it is, skew None, or,
    when lopsided, cut back (:func:`_balanced_length`) with its skew (nodes
    minus edges / ``ratio``) for the balancing top-up. ``rest(c)`` gives
    the sizes of the window's graphs from position ``c`` on."""
    used_nodes, used_edges = (int(node_sums[count - 1]),
                              int(edge_sums[count - 1]))
    skewed = abs((used_nodes - used_edges / ratio) /
                 max(node_room, 1)) > LOPSIDED
    if not skewed and (
            count < max_graphs or
            min(1 - used_nodes / max(node_room, 1),
                1 - used_edges / max(edge_room, 1)) <= LOPSIDED):
        return count, None
    cut = _balanced_length(count, max_graphs)
    if not skewed and not _fillable(
            *rest(cut), node_room - int(node_sums[cut - 1]),
            edge_room - int(edge_sums[cut - 1]), max_graphs - cut,
            LOPSIDED * node_room, LOPSIDED * edge_room):
        return count, None
    return cut, float(node_sums[cut - 1] - edge_sums[cut - 1] / ratio)


def _fillable(nodes: np.ndarray, edges: np.ndarray, node_room: int,
              edge_room: int, slots: int, node_slack: float,
              edge_slack: float) -> bool:
    """Whether the ``slots`` largest of these graphs (sizes minus one) come
    within the slack of filling either room. A batch that ran out of graph
    slots with room left is rebuilt only then: with budgets that the slots
    bind anyway (generous node and edge budgets), larger graphs would not
    fill it, and rebuilding every batch cost 20 times the packing time."""
    if slots < nodes.size:
        nodes = np.partition(nodes, -slots)[-slots:]
        edges = np.partition(edges, -slots)[-slots:]
    return nodes.sum() >= node_room - node_slack or \
        edges.sum() >= edge_room - edge_slack


def _balanced_length(count: int, max_graphs: int) -> int:
    """The leading graphs a lopsided prefix of ``count`` graphs is cut back
    to: those within :data:`PREFIX_SLOTS` of the slots, at least the
    first."""
    return max(1, min(count, int(PREFIX_SLOTS * max_graphs)))


def _edges_per_node(nodes: np.ndarray, edges: np.ndarray) -> float:
    """The data's edges per node over all graphs (sizes minus one), the
    shape a well-filled batch has; 0 (no balancing) when either total is
    not positive (graphs without edges, or of one node)."""
    node_total, edge_total = int(nodes.sum()), int(edges.sum())
    return edge_total / node_total if node_total > 0 and edge_total > 0 \
        else 0.0


def _fits_no_batch(position: int, nodes: np.ndarray, edges: np.ndarray,
                   max_graphs: int, max_nodes: int,
                   max_edges: int) -> ValueError:
    """The error for the graph at ``position`` (sizes minus one), which no
    batch can take: callers reject such graphs first, and packing must not
    loop on one (it would yield empty batches for ever)."""
    return ValueError(
        f"The graph at position {position} ({nodes[position] + 1:.0f} "
        f"nodes, {edges[position] + 1:.0f} edges) does not fit an empty "
        f"batch of {max_graphs} graphs, {max_nodes} nodes and {max_edges} "
        "edges: reject such graphs before packing.")


def best_fit_batches(nodes: np.ndarray, edges: np.ndarray, max_graphs: int,
                     max_nodes: int, max_edges: int,
                     lookahead: int) -> Iterator[np.ndarray]:
    """Packs graphs of these node and edge counts, given in sampling order,
    into batches of at most ``max_graphs`` graphs, ``max_nodes`` nodes and
    ``max_edges`` edges (padding-room rule included). Yields each batch as
    the sorted positions of its graphs. Every graph must fit an empty batch
    (callers reject the others first): one that does not raises
    ``ValueError`` when its batch comes. ``lookahead=0`` is PopTorch's
    greedy packing."""
    # The padding-room rule in terms of sizes minus one: a batch of c
    # graphs fits iff its sums of (size - 1) stay within these rooms.
    node_room, edge_room = max_nodes - max_graphs, max_edges - max_graphs
    # Float64 sizes (exact: counts stay far below 2**53) and 0-d rooms
    # spare NumPy an int-to-float cast in every score and a slow path for
    # Python scalars in every comparison: a batch costs a few dozen NumPy
    # calls on a few hundred entries, so their overhead is the cost.
    nodes, edges = nodes - 1.0, edges - 1.0
    ratio = _edges_per_node(nodes, edges) if lookahead else 0.0
    width = max(lookahead, max_graphs)
    rooms = np.array(float(node_room)), np.array(float(edge_room))
    total = len(nodes)
    # The positions not packed yet, in order: ``carry`` (passed over, fewer
    # than ``width``), then ``cursor`` on. A batch touches only its window.
    positions = np.arange(total)
    carry = positions[:0]
    cursor = 0
    while carry.size or cursor < total:
        fresh = min(cursor + width - carry.size, total)
        window = np.concatenate((carry, positions[cursor:fresh]))
        cursor = fresh
        head = window[:max_graphs]
        node_sums = np.add.accumulate(nodes[head])
        edge_sums = np.add.accumulate(edges[head])
        count = greedy_length(node_sums, edge_sums, rooms[0], rooms[1])
        if not count:  # no batch can take the oldest graph
            raise _fits_no_batch(int(head[0]), nodes, edges, max_graphs,
                                 max_nodes, max_edges)
        skew = None
        if ratio and 1 < count < window.size:
            count, skew = _cut_if_lopsided(
                node_sums, edge_sums, count,
                lambda c: (nodes[window[c:]], edges[window[c:]]),
                node_room, edge_room, max_graphs, ratio)
        if not lookahead or count == max_graphs or window.size == count:
            carry = window[count:]
            yield head[:count]
            continue
        rest = window[count:]
        extra = _top_up(nodes[rest], edges[rest],
                        node_room - int(node_sums[count - 1]),
                        edge_room - int(edge_sums[count - 1]),
                        max_graphs - count, ratio, skew)
        taken = np.zeros(window.size, dtype=bool)
        taken[:count] = True
        for i in extra:
            taken[count + i] = True
        carry = window[~taken]
        yield window[taken]
