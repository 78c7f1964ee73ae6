"""Checks of the graphs a fixed-size batch is made of, where they are cheap.

Three mistakes would otherwise give a batch that looks right and is wrong,
or an error that names none of the graphs:

- an ``edge_index`` entry outside ``[0, num_nodes)`` of its own graph, which
  after batching connects the graph to a padding graph or to its neighbour
  in the batch;
- graphs with different attribute sets, which PyG either rejects with a
  ``KeyError`` or batches with the attribute silently missing;
- graphs whose tensors of one attribute differ in shape beyond the dim
  they are joined along (``x`` of 4 and of 5 features), which
  ``torch.cat`` rejects naming neither the attribute nor the graphs.

Each raises a ``ValueError`` that names the graph (its position in the
batch) and the value or attribute. The edge check is one comparison over
the batch's edges (vectorised, in both collation paths); the shape check
runs only once a concatenation has failed.

Example::

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> good = Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0], [2]]))
    >>> bad = Data(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [2]]))
    >>> check_edge_index([good, bad])
    Traceback (most recent call last):
    ...
    ValueError: Graph 1 of the batch has an edge_index entry 2, outside its \
2 node(s) (valid: 0 to 1): an edge must join two nodes of its own graph, or \
it would join another graph of the batch. Fix the dataset's edge_index.
"""
from typing import Any, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor


def first_out_of_range(indices: Tensor, sizes: Sequence[int],
                       counts: Sequence[int]) -> Optional[Tuple[int, int]]:
    """``(graph, value)`` of the first entry of ``indices`` (the graphs'
    local node indices concatenated along the last dim, graph ``k`` holding
    ``sizes[k]`` columns) outside ``[0, counts[k])``, or None."""
    if indices.numel() == 0:
        return None
    bounds = torch.from_numpy(np.repeat(np.asarray(counts, dtype=np.int64),
                                        np.asarray(sizes, dtype=np.int64)))
    # Graphs already on an accelerator are checked there.
    bounds = bounds.to(indices.device)
    bad = (indices < 0) | (indices >= bounds)
    if not bool(bad.any()):
        return None
    bad = bad.reshape(-1, bad.shape[-1])
    column = int(bad.any(0).nonzero()[0])
    graph = int(np.searchsorted(np.cumsum(sizes), column, side="right"))
    value = int(indices.reshape(-1, indices.shape[-1])[:, column][
        bad[:, column]][0])
    return graph, value


def out_of_range_error(where: str, value: int, count: int,
                       what: str = "edge_index",
                       node_kind: str = "node") -> ValueError:
    """The error for an index ``value`` of ``where`` (e.g. "Graph 3 of the
    batch"), a graph of ``count`` nodes."""
    return ValueError(
        f"{where} has an {what} entry {value}, outside its {count} "
        f"{node_kind}(s) (valid: 0 to {count - 1}): an edge must join two "
        "nodes of its own graph, or it would join another graph of the "
        f"batch. Fix the dataset's {what}.")


def check_local_indices(indices: Tensor, sizes: Sequence[int],
                        counts: Sequence[int], what: str = "edge_index",
                        node_kind: str = "node") -> None:
    """Raises unless every entry of ``indices`` (as for
    :func:`first_out_of_range`) lies in its graph's range."""
    found = first_out_of_range(indices, sizes, counts)
    if found is not None:
        graph, value = found
        raise out_of_range_error(f"Graph {graph} of the batch", value,
                                 counts[graph], what, node_kind)


def check_edge_index(data_list: Sequence[Any],
                     node_counts: Optional[Sequence[int]] = None) -> None:
    """:func:`check_local_indices` for the ``edge_index`` of homogeneous
    graphs (a no-op when they have none)."""
    stores = [data._store for data in data_list]
    if "edge_index" not in stores[0]:
        return
    edge_indices = [store["edge_index"] for store in stores]
    if node_counts is None:
        node_counts = [data.num_nodes for data in data_list]
    check_local_indices(torch.cat(edge_indices, dim=-1),
                        [e.shape[-1] for e in edge_indices], node_counts)


def check_hetero_edge_index(data_list: Sequence[Any]) -> None:
    """The source and destination checks for every edge type of
    ``HeteroData`` graphs."""
    first = data_list[0]
    for edge_type in first.edge_types:
        if "edge_index" not in first[edge_type]:
            continue
        src, _, dst = edge_type
        edge_indices = [d[edge_type].edge_index for d in data_list]
        sizes = [e.shape[-1] for e in edge_indices]
        joined = torch.cat(edge_indices, dim=-1)
        for row, node_type in ((0, src), (1, dst)):
            check_local_indices(
                joined[row], sizes, [d[node_type].num_nodes for d in data_list],
                f"edge_index of {edge_type}", f"'{node_type}' node")


def check_same_attributes(mappings: Sequence[Any],
                          ignored: Sequence[str] = ()) -> None:
    """Raises unless every graph has the attributes of the first (keys in
    ``ignored``, which the batch leaves out, may differ)."""
    keys = mappings[0].keys()
    if all(m.keys() == keys for m in mappings):
        return
    ignored = set(ignored)
    expected = set(keys) - ignored
    for graph, mapping in enumerate(mappings):
        got = set(mapping.keys()) - ignored
        if got == expected:
            continue
        missing, extra = sorted(expected - got), sorted(got - expected)
        problem = (f"has no '{missing[0]}', which graph 0 has" if missing
                   else f"has '{extra[0]}', which graph 0 has not")
        raise ValueError(
            f"Graph {graph} of the batch {problem}: every graph of a batch "
            "needs the same attributes (give the graphs that lack it a "
            "value, or leave the attribute out with exclude_keys).")


def check_same_shapes(column: Sequence[Tensor], key: str, dim: int,
                      store: str = "") -> None:
    """Raises unless every tensor of ``column`` (attribute ``key`` of each
    graph, of ``store`` such as "'paper' nodes" in hetero graphs) has graph
    0's shape in every dim but ``dim``, the one they are joined along."""
    first = column[0]
    dim = dim % max(first.dim(), 1)
    for graph, value in enumerate(column):
        if value.dim() == first.dim() and all(
                a == b for i, (a, b) in enumerate(zip(first.shape,
                                                      value.shape))
                if i != dim):
            continue
        where = f" of {store}" if store else ""
        raise ValueError(
            f"Graphs 0 and {graph} of the batch have '{key}'{where} of shapes "
            f"{list(first.shape)} and {list(value.shape)}: a batch joins "
            f"every graph's '{key}' along dim {dim}, so their other dims "
            f"must agree. Give every graph's '{key}' the same shape apart "
            f"from dim {dim} (the same number of features), or leave "
            f"'{key}' out of the batch with exclude_keys.")


def check_graphs_join(data_list: Sequence[Any],
                      ignored: Sequence[str] = ()) -> None:
    """:func:`check_same_shapes` for every tensor attribute of the graphs
    (of every store of ``HeteroData``) but the ``ignored`` keys, which the
    batch leaves out: what to look at once PyG's collation has failed."""
    first = data_list[0]
    for store in first.stores:
        name = store._key
        kind = "" if name is None else \
            f"{name!r} {'edges' if isinstance(name, tuple) else 'nodes'}"
        for key, value in store.items():
            if key in ignored or not isinstance(value, Tensor) or \
                    value.dim() == 0:
                continue
            dim = first.__cat_dim__(key, value, store)
            if not isinstance(dim, int):
                continue
            column = [(d._store if name is None else d[name])[key]
                      for d in data_list]
            if all(isinstance(v, Tensor) for v in column):
                check_same_shapes(column, key, dim, kind)
