"""One coverage row of a node-selection pooling (TopK, SAG, ASA, Edge,
``filter_adj``): eager PyG on the plain batch against the simulated IPU on
the padded batch, on the real entries, for every family of graphs of
:mod:`.data` through one traced model.

A pooling's output shapes differ between the two: PyG keeps the selected
entries only, the fixed-shape version keeps slots and marks the used ones.
So each case's call returns a dict: ``rows`` (the rows whose weighted sum
is the loss: pooled features, or kept edges' values for ``filter_adj``),
``used`` (which of them are used; all of PyG's), ``edge_index`` and
``edge_values`` (the pooled edges and their attributes or weights), and
further row-level tensors (``batch``, ``perm``, ``score``). The real
entries compared are:

- row-level tensors: the used rows, in order (PyG's order is part of the
  contract); used rows beyond PyG's count must belong to padding graphs;
- edges: those that are not empty slots, sorted by (source, target) with
  their values (PyG's order of a sparse product's edges is its own).

The loss weighs the k-th used row by the k-th row of a fixed random weight
(rows past PyG's count weigh 0), the same on both sides, so gradients
compare whatever the slots' layout.
"""
import copy
from typing import Any, Dict, List, Optional

import torch
from torch_geometric.data import Batch

import poptorch_core as poptorch

from .data import BatchPair, make_families
from .probe import Case, Probe, Row, mismatch, run_checks

__all__ = ["PoolProbe", "run_pool_case"]

_EDGE_KEYS = ("edge_index", "edge_values", "used")


class PoolProbe(Probe):
    """``pre`` -> the pooling -> the weighted sum of its used rows."""

    def forward(self, data: Batch, weight: torch.Tensor):
        out = self.call(self.layer, self.pre(data.x), data)
        used = out["used"]
        rank = used.long().cumsum(0) - 1
        rows_weight = weight.index_select(0, rank.clamp(min=0)) * \
            used.unsqueeze(-1).to(weight.dtype)
        loss = (out["rows"] * rows_weight).sum()
        return out, poptorch.identity_loss(loss, reduction="none")


def _entries(out: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """The used row-level tensors, and the edges that are not empty
    sorted by (source, target) with their values."""
    used = out["used"]
    entries = {key: value[used] for key, value in out.items()
               if key not in _EDGE_KEYS and value is not None}
    edge_index = out.get("edge_index")
    if edge_index is not None:
        kept = (edge_index >= 0).all(0)
        edge_index = edge_index[:, kept]
        stride = int(edge_index.max()) + 1 if edge_index.numel() else 1
        order = torch.sort(edge_index[0] * stride + edge_index[1],
                           stable=True).indices
        entries["edge_index"] = edge_index[:, order].t()
        if out.get("edge_values") is not None:
            entries["edge_values"] = out["edge_values"][kept][order]
    return entries


def _compare(actual: Dict[str, Any], expected: Dict[str, Any],
             pair: BatchPair) -> Optional[str]:
    """The first difference of the real entries, or None."""
    want, got = _entries(expected), _entries(actual)
    num_real_graphs = int(pair.padded.graphs_mask.sum())
    for key, value in want.items():
        if key not in got:
            return f"{key} missing"
        if got[key].shape[0] < value.shape[0]:
            return (f"{key}: {got[key].shape[0]} used entries, PyG has "
                    f"{value.shape[0]}")
        problem = mismatch(got[key], value)
        if problem is not None:
            return f"{key}: {problem}"
    extra = got.get("batch")
    if extra is not None and bool(
            (extra[want["batch"].shape[0]:] < num_real_graphs).any()):
        return "used node slots beyond PyG's belong to real graphs"
    return None


class _Eager:
    """Eager PyG on the plain batch: outputs in eval and train mode, the
    parameters' gradients, and the loss's weight (for both sides)."""

    def __init__(self, probe: PoolProbe, _case: Case,
                 pair: BatchPair) -> None:
        model = copy.deepcopy(probe).eval()
        with torch.no_grad():
            self.out_eval = model.call(model.layer, model.pre(pair.plain.x),
                                       pair.plain)
        channels = self.out_eval["rows"].shape[-1]
        slots = max(pair.padded.num_nodes, pair.padded.num_edges)
        gen = torch.Generator().manual_seed(1)
        self.weight_padded = torch.randn(slots, channels, generator=gen)
        self.weight_padded[int(self.out_eval["used"].sum()):] = 0
        model.train()
        self.out_train, loss = model(pair.plain, self.weight_padded)
        loss.backward()
        self.grads = {name: (p.grad if p.grad is not None else
                             torch.zeros_like(p))
                      for name, p in model.named_parameters()}


def run_pool_case(case: Case, families: Optional[List[BatchPair]] = None,
                  compile_check: bool = True) -> Row:
    """The coverage row of a pooling case: every check on every family
    (:func:`~.data.make_families` by default), stopping at the first that
    fails, with the reason and the family."""
    return run_checks(case, families or make_families(seed=0),
                      compile_check, PoolProbe, _Eager, _compare)
