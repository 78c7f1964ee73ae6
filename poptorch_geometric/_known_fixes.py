"""Known fixes for IPU-rule errors raised inside PyG code.

When an IPU rule breaks inside a PyG layer or function, the error shows the
library frame below the user's line; for the cases below it also says what
to change. Rows are ``(path fragment of the PyG file, function or None,
fix)``; the first row matching a library frame, outermost first, wins.
Overrides that make a case traceable as written (PyG ops substituted while
tracing) make its row unreachable, never wrong: such rows are removed
(TopKPooling and SAGPooling, for example, pool in fixed shapes now).

Example::

    >>> [row[0] for row in KNOWN_FIXES][:2]
    ['torch_geometric/nn/conv/gcn_conv.py', 'torch_geometric/nn/conv/gat_conv.py']
"""
import os
from typing import Optional, Tuple

from poptorch_core import plugins

_SELF_LOOPS = (
    "{layer} adds self-loops inside the model: PyG first removes the existing "
    "ones with a boolean mask, whose result has a data-dependent shape. Add "
    "them once in the data instead (transform=T.AddSelfLoops(), or "
    "torch_geometric.utils.add_self_loops before batching) and build the "
    "layer with {layer}(..., add_self_loops=False).")
_SIZE = (
    "{what} counts the graphs from the data (batch.max() + 1) when size is "
    "not given, which reads a value back from the device. Pass the number of "
    "graphs as a Python int: {call}. In a fixed-size batch it is "
    "data.num_graphs (every batch has the same number of graph slots); add a "
    "batch_size argument to forward and pass data.num_graphs to it.")

#: (path fragment, function or None, fix).
KNOWN_FIXES: Tuple[Tuple[str, Optional[str], str], ...] = (
    ("torch_geometric/nn/conv/gcn_conv.py", None,
     _SELF_LOOPS.format(layer="GCNConv")),
    ("torch_geometric/nn/conv/gat_conv.py", None,
     _SELF_LOOPS.format(layer="GATConv")),
    ("torch_geometric/nn/conv/gatv2_conv.py", None,
     _SELF_LOOPS.format(layer="GATv2Conv")),
    ("torch_geometric/nn/pool/glob.py", None,
     _SIZE.format(what="global_add_pool / global_mean_pool / global_max_pool",
                  call="global_mean_pool(x, batch, size=batch_size)")),
    ("torch_geometric/nn/aggr/", None,
     _SIZE.format(what="An aggregation (Set2Set, SumAggregation, ...)",
                  call="aggr(x, batch, dim_size=batch_size)")),
    ("torch_geometric/utils/_to_dense_batch.py", None,
     "to_dense_batch sizes its output from the data: pass batch_size= (the "
     "number of graphs) and max_num_nodes= (the largest graph) as Python "
     "ints."),
)


def register() -> None:
    """Registers the table, and this package's files as library code."""
    plugins.register_known_fixes(
        KNOWN_FIXES, library_dirs=[os.path.dirname(os.path.abspath(__file__))])
