"""Order-preserving packing of graphs into fixed-size batches: PopTorch's
greedy rule, or greedy topped up from a bounded lookahead window.

Example (node budget 9, at most 3 graphs, graph sizes 3, 5, 2, 4, 6, 1, 3)::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ds = [Data(num_nodes=n, edge_index=torch.zeros(2, 0).long())
    ...       for n in [3, 5, 2, 4, 6, 1, 3]]
    >>> list(StreamPackingSampler(ds, max_num_graphs=3, max_num_nodes=9,
    ...                           max_num_edges=3))
    [[0, 1], [2, 3], [4, 5], [6]]
    >>> list(StreamPackingSampler(ds, max_num_graphs=3, max_num_nodes=9,
    ...                           max_num_edges=3, lookahead=6))
    [[0, 1, 5], [2, 3, 6], [4]]
"""
from typing import Any, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset, RandomSampler, Sampler, SequentialSampler

from poptorch_core import logger

from ._best_fit import best_fit_batches
from ._refusals import public, refusing_iterator
from ._packing import batch_length

__all__ = ["StreamPackingSampler"]


def _budget(kind: str, value: Optional[int], max_num_graphs: int,
            data_source: Dataset) -> int:
    """The node or edge budget: checked when given, else room for the
    largest graph in every slot (reads the whole dataset)."""
    if value is None:
        return max(getattr(d, f"num_{kind}") for d in data_source) * \
            max_num_graphs
    if value < max_num_graphs:
        raise ValueError(
            f"max_num_{kind} ({value}) must be at least max_num_graphs "
            f"({max_num_graphs}): every graph slot needs room for one "
            f"{kind[:-1]}.")
    return value


def _check_sources(data_source: Dataset, base_sampler: Any,
                   max_num_graphs: Optional[int]) -> None:
    """Raises unless there are samples to pack and graph slots for them."""
    if len(data_source) == 0:
        raise ValueError("The dataset is empty: StreamPackingSampler "
                         "needs at least one sample to pack.")
    if base_sampler is not None and len(base_sampler) == 0:
        raise ValueError("The base sampler is empty: "
                         "StreamPackingSampler needs at least one "
                         "sample to pack.")
    if max_num_graphs is None:
        raise ValueError("max_num_graphs must be set: the number of "
                         "graph slots in one packed batch.")
    if max_num_graphs < 1:
        raise ValueError(f"max_num_graphs ({max_num_graphs}) must "
                         "be at least 1.")


def sampling_order(sampler: Iterable[int]) -> np.ndarray:
    """The indices one pass over ``sampler`` yields, as an int64 array.

    Torch's ``SequentialSampler`` and (default) ``RandomSampler`` are drawn
    with one tensor op and the same random draws as iterating them, rather
    than with a Python loop over every index; other samplers are
    iterated. A ``RandomSampler`` draws its order with one ``randperm`` and
    then an empty tail with another: the tail is drawn here too when the
    sampler has a generator of its own, which it advances; without one, both
    come from a generator seeded from torch's global one and dropped after
    the epoch, so the tail changes nothing (and costs one small draw).
    """
    if type(sampler) is SequentialSampler:
        return np.arange(len(sampler.data_source), dtype=np.int64)
    if type(sampler) is RandomSampler and not sampler.replacement and \
            sampler._num_samples is None:
        generator = sampler.generator
        if generator is None:
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            generator = torch.Generator()
            generator.manual_seed(seed)
        size = len(sampler.data_source)
        order = torch.randperm(size, generator=generator).numpy()
        if sampler.generator is not None:
            torch.randperm(size, generator=generator)  # the empty tail
        return order
    return np.fromiter((int(i) for i in sampler), dtype=np.int64)


class _LengthDependsOnOrder(NotImplementedError, TypeError):
    """``len()`` of a shuffled packing sampler. A ``TypeError`` too, so that
    ``list(loader)`` treats the length as unknown instead of failing."""


class _PackedBatch:
    """The accumulator of one batch: its indices and the room they use."""

    __slots__ = ("indices", "num_nodes", "num_edges")

    def __init__(self) -> None:
        self.indices: List[int] = []
        self.num_nodes = 0
        self.num_edges = 0

    def add(self, idx: int, num_nodes: int, num_edges: int) -> None:
        self.indices.append(idx)
        self.num_nodes += num_nodes
        self.num_edges += num_edges


class StreamPackingSampler(Sampler[List[int]]):
    """Packs consecutive samples of ``base_sampler`` greedily into batches
    that fit ``max_num_graphs`` graphs, ``max_num_nodes`` nodes and
    ``max_num_edges`` edges.

    A sample is added to the current batch only if the batch keeps at least
    one node and one edge of room for every graph slot still free (the
    *padding-room rule*): a fixed-size collater can then always fill the
    remaining graph slots with non-empty padding graphs. When a sample does
    not fit, the current batch is yielded and a new one starts with it; the
    order of ``base_sampler`` is kept and nothing is looked ahead.

    With ``lookahead > 0`` a batch that greedy packing would close is
    topped up with the samples among the next ``lookahead`` still waiting
    that fill its remaining node and edge room best (the padding-room rule
    still holds), so fewer slots go to padding; each batch starts with the
    oldest sample still waiting, so a sample overtakes fewer than
    ``lookahead`` waiting samples. ``FixedSizeOptions.for_packing`` and
    ``for_batch_size`` choose budgets for a lookahead and the loaders pass
    it on. Sizes must not change between accesses (no dataset
    ``transform``).

    A sample that does not fit even an empty batch raises ``RuntimeError``,
    or with ``allow_skip_data=True`` is skipped: skipped indices are counted
    in :attr:`skipped_indices` (reset at the start of each epoch) and logged;
    an epoch that skips every sample raises, naming the smallest. With
    ``trim_oversize=True`` (what the loaders pass for
    ``OverSizeStrategy.Trim*``) it makes a batch of its own instead, which
    the fixed-size collater then trims to fit.

    Each sample's size is read from the dataset once and kept for later
    epochs, unless the dataset has a ``transform`` (which may change sizes
    from one access to the next).

    Args:
        data_source: the dataset; ``data_source[i].num_nodes`` and
            ``.num_edges`` give the sizes (totals over types for hetero data).
        max_num_graphs: the most graphs in one batch (at least 1).
        max_num_nodes: the node budget; default: the largest graph's node
            count times ``max_num_graphs`` (reads the whole dataset).
        max_num_edges: the edge budget; default likewise.
        base_sampler: the order in which samples are taken (default:
            sequential).
        allow_skip_data: skip samples that can never fit instead of raising.
        lookahead: how many upcoming samples may top up a batch (0, the
            default, is PopTorch's greedy packing).
        trim_oversize: give a sample that fits no batch a batch of its own
            (for a collater that trims) instead of raising or skipping it.
    """

    @public
    def __init__(self,
                 data_source: Dataset,
                 max_num_graphs: int,
                 max_num_nodes: Optional[int] = None,
                 max_num_edges: Optional[int] = None,
                 base_sampler: Optional[Union[Sampler[int],
                                              Iterable[int]]] = None,
                 allow_skip_data: bool = False,
                 lookahead: int = 0, *, trim_oversize: bool = False) -> None:
        super().__init__()
        _check_sources(data_source, base_sampler, max_num_graphs)
        max_num_nodes = _budget("nodes", max_num_nodes, max_num_graphs,
                                data_source)
        max_num_edges = _budget("edges", max_num_edges, max_num_graphs,
                                data_source)

        self.data_source = data_source
        self.max_num_graphs = max_num_graphs
        self.max_num_nodes = max_num_nodes
        self.max_num_edges = max_num_edges
        self.base_sampler = (SequentialSampler(data_source)
                             if base_sampler is None else base_sampler)
        self.allow_skip_data = allow_skip_data
        self.lookahead = lookahead
        self.trim_oversize = trim_oversize
        #: Indices skipped (never fit) during the current or last epoch.
        self.skipped_indices: List[int] = []
        self._len: Optional[int] = None
        # Sizes are read once per sample and kept, unless the dataset has a
        # transform (which may change them on every access).
        self._cache_sizes = getattr(data_source, "transform", None) is None
        if isinstance(lookahead, bool) or not isinstance(lookahead, int) \
                or lookahead < 0:
            raise ValueError(
                f"lookahead ({lookahead!r}) must be a non-negative integer "
                "(0: greedy packing).")
        if lookahead and not self._cache_sizes:
            raise ValueError(
                "lookahead packing reads sizes ahead of loading, so they must "
                "not change between accesses, and this dataset has a "
                "transform: use lookahead=0, or apply the transform as a "
                "pre_transform.")
        self._node_array: Optional[np.ndarray] = None
        self._edge_array: Optional[np.ndarray] = None
        #: Whether every sample's size is in the arrays above.
        self._all_sizes_known = False
        #: The budgets for which every sample fits an empty batch, once
        #: all sizes are known: epochs then skip the per-epoch check.
        self._all_fit_budgets: Optional[Tuple[int, int, int]] = None

    @property
    def num_skipped(self) -> int:
        """How many samples the current or last epoch skipped."""
        return len(self.skipped_indices)

    def _has_space(self, batch: _PackedBatch, num_nodes: int,
                   num_edges: int) -> bool:
        nodes_left = self.max_num_nodes - (batch.num_nodes + num_nodes)
        edges_left = self.max_num_edges - (batch.num_edges + num_edges)
        graphs_left = self.max_num_graphs - (len(batch.indices) + 1)
        return (graphs_left >= 0 and nodes_left >= graphs_left
                and edges_left >= graphs_left)

    def __iter__(self) -> Iterator[List[int]]:
        return refusing_iterator(self._epoch())

    def _epoch(self) -> Iterator[List[int]]:
        skipped: List[int] = []
        self.skipped_indices = skipped
        yield from self._at_least_one(self._pack(skipped), skipped)
        if skipped:
            more = "" if len(skipped) <= 10 else ", ..."
            logger.warning(
                "StreamPackingSampler skipped %d sample(s) this epoch that "
                "do not fit an empty batch (indices %s%s); increase the "
                "node/edge budgets to keep them.", len(skipped),
                skipped[:10], more)

    def _at_least_one(self, batches: Iterator[List[int]],
                      skipped: List[int]) -> Iterator[List[int]]:
        """``batches``, then an error if there was none because every
        sample was skipped: an epoch of nothing trains nothing."""
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty and skipped:
            raise RuntimeError(self._nothing_fits(skipped))

    def _nothing_fits(self, skipped: List[int]) -> str:
        sizes = {idx: self._size(idx) for idx in skipped}
        idx = min(skipped, key=lambda i: (sum(sizes[i]), i))
        nodes, edges = sizes[idx]
        room = self.max_num_graphs - 1
        return (
            f"StreamPackingSampler skipped all {len(skipped)} sample(s): none "
            f"fits an empty batch of at most {self.max_num_graphs} graph(s), "
            f"{self.max_num_nodes} node(s) and {self.max_num_edges} edge(s), "
            f"so there is no batch to train on. The smallest, sample {idx}, "
            f"has {nodes} node(s) and {edges} edge(s): it needs "
            f"max_num_nodes >= {nodes + room} and max_num_edges >= "
            f"{edges + room}. Increase the budgets (a FixedSizeDataLoader's "
            "FixedSizeOptions have one graph, node and edge more than its "
            "sampler; FixedSizeOptions.for_packing derives them from the "
            "data), or trim over-size samples (OverSizeStrategy."
            "TrimNodesAndEdges).")

    def _pack(self, skipped: List[int]) -> Iterator[List[int]]:
        if self.lookahead:
            return self._pack_best_fit(skipped)
        if self._cache_sizes:
            return self._pack_known_sizes(skipped)
        return self._pack_one_by_one(skipped)

    def _pack_best_fit(self, skipped: List[int]) -> Iterator[List[int]]:
        """Greedy topped up from the next ``lookahead`` samples
        (``_best_fit``). Samples that fit no batch are rejected first."""
        order = sampling_order(self.base_sampler)
        nodes, edges = self._window_sizes(order)
        if not self._all_fit():
            too_big = self._too_big(nodes, edges)
            for position in np.flatnonzero(too_big).tolist():
                idx = int(order[position])
                if self._oversize(idx, int(nodes[position]),
                                  int(edges[position]), skipped):
                    yield [idx]
            keep = ~too_big
            order, nodes, edges = order[keep], nodes[keep], edges[keep]
        for batch in best_fit_batches(nodes, edges, self.max_num_graphs,
                                      self.max_num_nodes, self.max_num_edges,
                                      self.lookahead):
            yield order[batch].tolist()

    def _pack_known_sizes(self, skipped: List[int]) -> Iterator[List[int]]:
        """:meth:`_pack_one_by_one` for sizes that do not change: the
        batch that starts at a sample is the longest run of the next
        ``max_num_graphs`` samples whose running totals keep the
        padding-room rule, found with a few NumPy operations instead of a
        Python step per sample."""
        order = sampling_order(self.base_sampler)
        node_room = self.max_num_nodes - self.max_num_graphs
        edge_room = self.max_num_edges - self.max_num_graphs
        start = 0
        while start < len(order):
            window = order[start:start + self.max_num_graphs]
            nodes, edges = self._window_sizes(window)
            count = batch_length(nodes, edges, node_room, edge_room)
            if count == 0:  # does not fit even an empty batch
                idx = int(window[0])
                if self._oversize(idx, int(nodes[0]), int(edges[0]), skipped):
                    yield [idx]
                start += 1
                continue
            yield window[:count].tolist()
            start += count

    def _too_big(self, nodes: np.ndarray, edges: np.ndarray) -> np.ndarray:
        """Which of these sizes do not fit an empty batch."""
        return ((nodes - 1 > self.max_num_nodes - self.max_num_graphs) |
                (edges - 1 > self.max_num_edges - self.max_num_graphs))

    def _all_fit(self) -> bool:
        """Whether every sample of the dataset is known to fit an empty
        batch under the current budgets."""
        budgets = (self.max_num_graphs, self.max_num_nodes,
                   self.max_num_edges)
        if self._all_fit_budgets == budgets:
            return True
        if not self._all_sizes_known or \
                self._too_big(self._node_array, self._edge_array).any():
            return False
        self._all_fit_budgets = budgets
        return True

    def _window_sizes(self, window: np.ndarray):
        """Node and edge counts of the samples ``window``, each read from
        the dataset the first time it is needed."""
        if self._node_array is None:
            self._node_array = np.full(len(self.data_source), -1, np.int64)
            self._edge_array = np.full(len(self.data_source), -1, np.int64)
        nodes = self._node_array[window]
        if not self._all_sizes_known and (nodes < 0).any():
            for idx in window[nodes < 0].tolist():
                num_nodes, num_edges = self._size(idx)
                self._node_array[idx] = num_nodes
                self._edge_array[idx] = num_edges
            nodes = self._node_array[window]
            self._all_sizes_known = bool((self._node_array >= 0).all())
        return nodes, self._edge_array[window]

    def _pack_one_by_one(self, skipped: List[int]) -> Iterator[List[int]]:
        batch = _PackedBatch()
        for idx in self.base_sampler:
            num_nodes, num_edges = self._size(idx)
            if not self._has_space(batch, num_nodes, num_edges):
                if batch.indices:
                    yield batch.indices
                    batch = _PackedBatch()
                if not self._has_space(batch, num_nodes, num_edges):
                    if self._oversize(idx, num_nodes, num_edges, skipped):
                        yield [idx]
                    continue
            batch.add(idx, num_nodes, num_edges)
        if batch.indices:
            yield batch.indices

    def _size(self, idx: int) -> Tuple[int, int]:
        data = self.data_source[idx]
        return data.num_nodes, data.num_edges

    def _oversize(self, idx: int, num_nodes: int, num_edges: int,
                  skipped: List[int]) -> bool:
        """Deals with a sample that fits no batch: True when it makes a
        batch of its own (to be trimmed); otherwise raises, or records it
        in ``skipped``."""
        if self.trim_oversize:
            return True
        self._reject(idx, num_nodes, num_edges)
        skipped.append(idx)
        return False

    def _reject(self, idx: int, num_nodes: int, num_edges: int) -> None:
        if not self.allow_skip_data:
            raise RuntimeError(
                f"Sample {idx} with {num_nodes} node(s) and {num_edges} "
                f"edge(s) does not fit an empty batch of at most "
                f"{self.max_num_graphs} graph(s), {self.max_num_nodes} "
                f"node(s) and {self.max_num_edges} edge(s). Increase the "
                "budgets, skip such samples (allow_skip_data=True, "
                "OverSizeStrategy.Skip) or trim them (trim_oversize=True, "
                "OverSizeStrategy.TrimNodesAndEdges).")
        logger.debug("StreamPackingSampler skips sample %d (%d nodes, %d "
                     "edges).", idx, num_nodes, num_edges)

    @public
    def __len__(self) -> int:
        if isinstance(self.base_sampler, RandomSampler):
            raise _LengthDependsOnOrder(
                "The number of packed batches depends on the sample order, "
                "which a RandomSampler changes every epoch.")
        if self._len is None:
            skipped: List[int] = []
            self._len = sum(1 for _ in self._at_least_one(
                self._pack(skipped), skipped))
        return self._len


def packing_sampler(dataset: Any, opts: Any, shuffle: bool, generator: Any,
                    allow_skip_data: bool, trim_oversize: bool = False
                    ) -> StreamPackingSampler:
    """The batch sampler of ``FixedSizeStrategy.StreamPack`` for a
    loader with ``opts`` (its ``FixedSizeOptions``): one graph,
    node and edge of each batch stay free for the padding graph, and
    batches are topped up from the lookahead the budgets were chosen for
    (greedy for a dataset whose transform may change sizes). With
    ``trim_oversize`` a graph too large for any batch makes a batch of its
    own, which the loader's collater trims."""
    # The loader's generator (if any) drives the shuffle, as it would
    # without packing.
    base = RandomSampler(dataset, generator=generator) if shuffle \
        else SequentialSampler(dataset)
    lookahead = getattr(opts, "packing_lookahead", 0)
    if lookahead and getattr(dataset, "transform", None) is not None:
        logger.info("The dataset has a transform, which may change graph "
                    "sizes between accesses: packing greedily (lookahead 0) "
                    "instead of with lookahead %d.", lookahead)
        lookahead = 0
    return StreamPackingSampler(
        dataset, opts.num_graphs - 1, max_num_nodes=opts.total_num_nodes - 1,
        max_num_edges=opts.total_num_edges - 1, base_sampler=base,
        allow_skip_data=allow_skip_data, lookahead=lookahead,
        trim_oversize=trim_oversize)
