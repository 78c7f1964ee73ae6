"""The fixed sizes (nodes, edges, graphs) every batch is padded to.

Example::

    >>> opts = FixedSizeOptions(num_nodes=10, num_edges=20, num_graphs=3)
    >>> opts.total_num_nodes, opts.num_graphs
    (10, 3)
    >>> FixedSizeOptions(num_nodes=4).num_edges   # fully connected default
    12
"""
import numbers
from typing import Any, Dict, Iterable, Optional, Union

from torch_geometric.data import HeteroData
from torch_geometric.data.summary import Summary
from torch_geometric.transforms.pad import Padding
from torch_geometric.typing import EdgeType, NodeType

from ._best_fit import DEFAULT_LOOKAHEAD
from ._packing import batch_size_budget, packing_budget
from ._refusals import public
from ._padding.sizes import edge_count, node_count
from ._padding.values import check_pad_graph_defaults, check_pad_value

__all__ = ["FixedSizeOptions", "validate_num_graphs"]

Count = Union[int, Dict[Any, int]]


def validate_num_graphs(num_graphs: int) -> None:
    """Raises ``TypeError`` unless ``num_graphs`` is an int and
    ``ValueError`` unless a batch has room for at least one real graph and
    one padding graph."""
    if isinstance(num_graphs, bool) or \
            not isinstance(num_graphs, numbers.Integral):
        raise TypeError(
            f"num_graphs must be an int, got {num_graphs!r} "
            f"({type(num_graphs).__name__}).")
    if num_graphs < 2:
        raise ValueError(
            f"num_graphs ({num_graphs}) must be at least 2: a fixed-size "
            "batch needs at least one real graph and one padding graph.")


def _check_count(name: str, value: Any, optional: bool = False) -> None:
    """Raises unless ``value`` is a positive int or a non-empty dict of
    them. ``optional`` sizes may be None, or ``{}`` (no edge type), which
    PopTorch reads as "not given"; 0 is refused, where PopTorch silently
    takes the default for it too."""
    if optional and (value is None or (isinstance(value, dict)
                                       and not value)):
        return
    if isinstance(value, dict) and not value:
        raise ValueError(
            f"{name} is an empty dict: give a size for every "
            f"{name[4:-1]} type of the data.")
    values = value.values() if isinstance(value, dict) else [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) \
                or v < 1:
            why = ""
            if isinstance(v, numbers.Real) and v < 1:
                why = (f": every batch needs at least one {name[4:-1]} "
                       "slot, for its padding graph")
            default = (f" Leave {name} out (None) for the fully connected "
                       "default, num_nodes x (num_nodes - 1), or derive the "
                       "sizes from the data (FixedSizeOptions.from_dataset, "
                       "for_packing or for_batch_size).") if optional else ""
            raise ValueError(
                f"{name} must be a positive int or a dict of positive ints "
                f"per type, got {value!r}{why}.{default}")


class FixedSizeOptions:
    """The size every fixed-size batch is padded to.

    Args:
        num_nodes: node slots per batch, an int or a dict per node type.
        num_edges: edge slots per batch, an int or a dict per edge type;
            if None (or ``{}``), the fully connected count ``T * (T - 1)``
            with ``T`` the (total) number of nodes. Unlike PopTorch, 0 is
            refused rather than read as None.
        num_graphs: graph slots per batch, including at least one padding
            graph (so at least 2).
        node_pad_value: value of padding node features (default 0.0).
        edge_pad_value: value of padding edge features (default 0.0).
        graph_pad_value: value of graph-level tensors of padding graphs
            (default 0.0).
        pad_graph_defaults: values of non-tensor graph attributes of padding
            graphs, by key (default: copy the first real graph's value).

    At least one node, one edge and one graph of each batch are reserved for
    padding by the loaders that derive these sizes.

    Pad values (also a PyG ``Padding`` object's, and numbers in
    ``pad_graph_defaults``) must be finite, here and when set later: a NaN
    or an infinity survives the mask of a masked loss (NaN x 0 is NaN) and
    one step would turn every weight into NaN.

    Raises:
        ValueError: a pad value is NaN or infinite (the message names it).
        TypeError: a pad value is neither a number nor a ``Padding``.
    """

    @public
    def __init__(self,
                 num_nodes: Count,
                 num_edges: Optional[Count] = None,
                 num_graphs: int = 2,
                 node_pad_value: Optional[float] = None,
                 edge_pad_value: Optional[float] = None,
                 graph_pad_value: Optional[float] = None,
                 pad_graph_defaults: Optional[Dict[str, Any]] = None) -> None:
        _check_count("num_nodes", num_nodes)
        _check_count("num_edges", num_edges, optional=True)
        validate_num_graphs(num_graphs)
        self.num_nodes = num_nodes
        if num_edges:
            self.num_edges = num_edges
        else:
            total = sum(num_nodes.values()) if isinstance(num_nodes, dict) \
                else num_nodes
            self.num_edges = total * (total - 1)
        self.num_graphs = num_graphs
        self.node_pad_value = 0.0 if node_pad_value is None \
            else node_pad_value
        self.edge_pad_value = 0.0 if edge_pad_value is None \
            else edge_pad_value
        self.graph_pad_value = 0.0 if graph_pad_value is None \
            else graph_pad_value
        self.pad_graph_defaults = {} if pad_graph_defaults is None \
            else pad_graph_defaults
        self.total_num_nodes_hetero: Optional[int] = None
        self.total_num_edges_hetero: Optional[int] = None
        #: How many upcoming samples a StreamPack loader may top a batch up
        #: from (see :class:`StreamPackingSampler`): 0, PopTorch's greedy
        #: packing, unless these budgets were chosen for a lookahead by
        #: :meth:`for_packing` or :meth:`for_batch_size`.
        self.packing_lookahead = 0

    # The pad values are checked whenever they are set, not only here.
    @property
    def node_pad_value(self) -> Union[float, Padding]:
        """Value of padding node features."""
        return self._node_pad_value

    @node_pad_value.setter
    def node_pad_value(self, value: Union[float, Padding]) -> None:
        check_pad_value("node_pad_value", value)
        self._node_pad_value = value

    @property
    def edge_pad_value(self) -> Union[float, Padding]:
        """Value of padding edge features."""
        return self._edge_pad_value

    @edge_pad_value.setter
    def edge_pad_value(self, value: Union[float, Padding]) -> None:
        check_pad_value("edge_pad_value", value)
        self._edge_pad_value = value

    @property
    def graph_pad_value(self) -> Union[float, Padding]:
        """Value of graph-level tensors of padding graphs."""
        return self._graph_pad_value

    @graph_pad_value.setter
    def graph_pad_value(self, value: Union[float, Padding]) -> None:
        check_pad_value("graph_pad_value", value)
        self._graph_pad_value = value

    @property
    def pad_graph_defaults(self) -> Dict[str, Any]:
        """Values of non-tensor graph attributes of padding graphs."""
        return self._pad_graph_defaults

    @pad_graph_defaults.setter
    def pad_graph_defaults(self, value: Dict[str, Any]) -> None:
        check_pad_graph_defaults(value)
        self._pad_graph_defaults = value

    def is_hetero(self) -> bool:
        """True when both node and edge sizes are given per type."""
        return isinstance(self.num_nodes, dict) and \
            isinstance(self.num_edges, dict)

    def to_hetero(self, node_types: Iterable[NodeType],
                  edge_types: Iterable[EdgeType]) -> "FixedSizeOptions":
        """Gives every node (edge) type the scalar node (edge) size; sizes
        that already are dicts stay as they are. Mutates and returns
        ``self``."""
        if not isinstance(self.num_nodes, dict):
            self.num_nodes = {t: self.num_nodes for t in node_types}
        if not isinstance(self.num_edges, dict):
            self.num_edges = {t: self.num_edges for t in edge_types}
        return self

    # Unlike upstream, the totals are recomputed on every access, so they
    # never go stale when a per-type dict is changed after the first read.
    @property
    def total_num_nodes(self) -> Count:
        """All node slots (the sum over types when hetero)."""
        return self._total("nodes")

    @property
    def total_num_edges(self) -> Count:
        """All edge slots (the sum over types when hetero)."""
        return self._total("edges")

    def _total(self, kind: str) -> Count:
        value = getattr(self, f"num_{kind}")
        if not self.is_hetero():
            return value
        total = sum(value.values())
        setattr(self, f"total_num_{kind}_hetero", total)
        return total

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_nodes={self.num_nodes} "
                f"(At least one node reserved for padding), "
                f"num_edges={self.num_edges} "
                f"(At least one edge reserved for padding), "
                f"num_graphs={self.num_graphs} "
                f"(At least one graph reserved for padding), "
                f"node_pad_value={self.node_pad_value}, "
                f"edge_pad_value={self.edge_pad_value}, "
                f"graph_pad_value={self.graph_pad_value}, "
                f"pad_graph_defaults={self.pad_graph_defaults})")

    @classmethod
    @public
    def from_dataset(cls,
                     dataset: Any,
                     batch_size: int,
                     sample_limit: Optional[int] = None,
                     progress_bar: Optional[bool] = None
                     ) -> "FixedSizeOptions":
        """Sizes that fit any ``batch_size - 1`` graphs of ``dataset`` plus
        one padding graph (the worst case, for PadToMax).

        Each size is ``max_per_graph * (batch_size - 1) + 1``, per type for
        heterogeneous data. ``sample_limit`` is accepted for compatibility
        but the whole dataset is always scanned: a limit derived from part of
        it could be too small for a graph not looked at.

        Example::

            >>> from torch_geometric.datasets import FakeDataset
            >>> ds = FakeDataset(num_graphs=20, avg_num_nodes=10)
            >>> opts = FixedSizeOptions.from_dataset(ds, batch_size=10)
            >>> opts.num_graphs
            10
        """
        del sample_limit  # see the docstring
        if len(dataset) == 0:
            raise ValueError(
                "The dataset is empty: fixed sizes come from "
                "its graphs, so it needs at least one.")
        validate_num_graphs(batch_size)
        summary = Summary.from_dataset(dataset, progress_bar=progress_bar)

        def limit(max_per_graph: float) -> int:
            return int(max_per_graph) * (batch_size - 1) + 1

        num_nodes: Count = limit(summary.num_nodes.max)
        num_edges: Count = limit(summary.num_edges.max)
        if summary.num_nodes_per_type is not None:
            num_nodes = {t: limit(s.max)
                         for t, s in summary.num_nodes_per_type.items()}
        if summary.num_edges_per_type is not None:
            num_edges = {t: limit(s.max)
                         for t, s in summary.num_edges_per_type.items()}
        return cls(num_nodes=num_nodes, num_edges=num_edges,
                   num_graphs=batch_size)

    @classmethod
    @public
    def from_loader(cls, loader: Iterable,
                    sample_limit: int = 1000) -> "FixedSizeOptions":
        """Sizes that fit the largest of the first ``sample_limit`` batches
        of ``loader`` plus one padding graph (``max + 1`` for nodes, edges
        and graphs). The loader is restarted as often as needed to see
        ``sample_limit`` batches; a loader yielding plain ``Data`` (not
        ``Batch``), such as PyG's ``NeighborLoader`` and ``ClusterLoader``,
        counts as one graph per batch. A loader that pads (the fixed-size
        neighbour and cluster loaders) is measured before padding, through
        its ``unpadded_loader``.

        Example::

            >>> from torch_geometric.datasets import FakeDataset
            >>> from torch_geometric.loader import DataLoader
            >>> loader = DataLoader(FakeDataset(num_graphs=20), batch_size=5)
            >>> FixedSizeOptions.from_loader(loader, sample_limit=4).num_graphs
            6
        """
        if sample_limit < 1:
            raise ValueError(
                f"sample_limit ({sample_limit}) must be at "
                "least 1.")
        loader = getattr(loader, "unpadded_loader", loader)
        maxima = _LoaderMaxima()
        seen = 0
        while seen < sample_limit:
            epoch_start = seen
            for batch in loader:
                maxima.update(batch)
                seen += 1
                if seen == sample_limit:
                    break
            if seen == epoch_start:
                raise ValueError(
                    "The loader yielded no batch: cannot derive "
                    "fixed sizes from an empty loader.")
        return maxima.to_options(cls)

    @classmethod
    @public
    def for_packing(cls, dataset: Any, graphs_per_batch: int, *,
                    shuffle: bool = True,
                    lookahead: int = DEFAULT_LOOKAHEAD) -> "FixedSizeOptions":
        """Budgets for :attr:`FixedSizeStrategy.StreamPack` chosen from the
        dataset's size distribution rather than its worst case, so packed
        batches waste few node and edge slots.

        The rule: ``num_graphs = graphs_per_batch``; the edge budget is the
        node budget times the dataset's edges-per-node ratio (both fill
        together) and both hold the largest graph plus one node and edge
        per other graph slot (nothing is ever skipped). For each candidate
        number of batches ``B``, from ``ceil(len(dataset) /
        (graphs_per_batch - 1))`` to twice that, the node budget is the
        smallest with which packing (one slot of each kind kept for
        padding) needs ``B`` batches, found by bisection (packing is not
        quite monotone in the budget, so rarely a slightly larger one); the
        budgets with the best slot efficiency (the lower of the node and
        edge figures) win. Candidates stop once the padding room that ``B``
        batches must keep (one node and edge per free slot) caps their
        efficiency at no more than the best found.

        Packing tops batches up from the next ``lookahead`` samples (see
        :class:`StreamPackingSampler`; 0 is PopTorch's greedy packing), and
        the options remember it as :attr:`packing_lookahead`, which the
        loaders use. The budgets are searched with six seeded shuffles of
        the dataset and then raised to fit thirty (``shuffle=True``, for a
        shuffling loader: about one epoch in twenty to thirty, in another
        random order, needs a batch more) or with the dataset's own order
        (``shuffle=False``).

        Homogeneous datasets only.

        Example::

            >>> from poptorch_geometric.datasets import SyntheticMolecules
            >>> ds = SyntheticMolecules(500)
            >>> opts = FixedSizeOptions.for_packing(ds, graphs_per_batch=32)
            >>> opts.num_graphs, opts.num_nodes < 31 * 16.4
            (32, True)
        """
        validate_num_graphs(graphs_per_batch)
        _check_lookahead(lookahead)
        num_nodes, num_edges = packing_budget(
            *_graph_sizes(dataset), graphs_per_batch, lookahead=lookahead,
            shuffle=shuffle)
        opts = cls(num_nodes=num_nodes, num_edges=num_edges,
                   num_graphs=graphs_per_batch)
        opts.packing_lookahead = lookahead
        return opts

    @classmethod
    @public
    def for_batch_size(cls, dataset: Any, batch_size: int, *,
                       shuffle: bool = True,
                       lookahead: int = DEFAULT_LOOKAHEAD
                       ) -> "FixedSizeOptions":
        """StreamPack budgets that match PyG's
        ``DataLoader(dataset, batch_size)`` step for step: packed batches
        hold ``batch_size`` graphs on average, so an epoch takes at most
        ``ceil(len(dataset) / batch_size)`` steps, with as few padded node
        and edge slots as that allows.

        Use it to swap a PyG loader for a fixed-size one without changing
        the number of optimizer steps per epoch. ``num_graphs`` comes out
        above ``batch_size``: the spare graph slots let small graphs fill a
        batch, so that the node and edge budgets, not the graph count, bind.
        Pass ``batch_size=opts.num_graphs`` to the loader. The rule:
        :meth:`for_packing`'s budgets for exactly that many batches, at the
        graph-slot count with the best slot efficiency; ``shuffle`` and
        ``lookahead`` mean what they mean there.

        Homogeneous datasets only.

        Example::

            >>> from poptorch_geometric import (FixedSizeDataLoader,
            ...                                 FixedSizeStrategy)
            >>> from poptorch_geometric.datasets import SyntheticMolecules
            >>> ds = SyntheticMolecules(500)
            >>> # For epochs in dataset order (the loader does not shuffle).
            >>> opts = FixedSizeOptions.for_batch_size(ds, batch_size=32,
            ...                                        shuffle=False)
            >>> opts.num_graphs > 32
            True
            >>> loader = FixedSizeDataLoader(
            ...     ds, batch_size=opts.num_graphs, fixed_size_options=opts,
            ...     fixed_size_strategy=FixedSizeStrategy.StreamPack)
            >>> len(list(loader)) <= 16
            True
        """
        if isinstance(batch_size, bool) or \
                not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(f"batch_size ({batch_size!r}) must be a "
                             "positive integer.")
        _check_lookahead(lookahead)
        num_graphs, num_nodes, num_edges = batch_size_budget(
            *_graph_sizes(dataset), batch_size, lookahead=lookahead,
            shuffle=shuffle)
        opts = cls(num_nodes=num_nodes, num_edges=num_edges,
                   num_graphs=num_graphs)
        opts.packing_lookahead = lookahead
        return opts


def _check_lookahead(lookahead: Any) -> None:
    if isinstance(lookahead, bool) or \
            not isinstance(lookahead, numbers.Integral) or lookahead < 0:
        raise ValueError(
            f"lookahead ({lookahead!r}) must be a non-negative "
            "integer (0: PopTorch's greedy packing).")


def _graph_sizes(dataset: Any):
    """Node and edge counts of every graph (homogeneous datasets only)."""
    nodes, edges = [], []
    for data in dataset:
        if isinstance(data, HeteroData):
            raise ValueError(
                "for_packing and for_batch_size support homogeneous "
                "datasets (Data) only; use from_dataset for HeteroData.")
        nodes.append(node_count(data))
        edges.append(edge_count(data))
    return nodes, edges


class _LoaderMaxima:
    """Running maxima of the sizes of the batches seen by ``from_loader``."""

    def __init__(self) -> None:
        self.hetero: Optional[bool] = None
        self.nodes: Dict[Any, int] = {}
        self.edges: Dict[Any, int] = {}
        self.graphs = 0

    @staticmethod
    def _raise(store: Dict[Any, int], key: Any, value: int) -> None:
        store[key] = max(store.get(key, 0), int(value))

    def update(self, batch: Any) -> None:
        if self.hetero is None:
            self.hetero = isinstance(batch, HeteroData)
        if self.hetero:
            for t in batch.node_types:
                self._raise(self.nodes, t, batch[t].num_nodes)
            for t in batch.edge_types:
                self._raise(self.edges, t, batch[t].num_edges)
        else:
            self._raise(self.nodes, None, batch.num_nodes)
            self._raise(self.edges, None, batch.num_edges)
        self.graphs = max(self.graphs, getattr(batch, "num_graphs", 1))

    def to_options(self, cls: type) -> FixedSizeOptions:
        nodes: Count = {k: v + 1 for k, v in self.nodes.items()}
        edges: Count = {k: v + 1 for k, v in self.edges.items()}
        if not self.hetero:
            nodes, edges = nodes[None], edges[None]
        return cls(num_nodes=nodes, num_edges=edges,
                   num_graphs=self.graphs + 1)
