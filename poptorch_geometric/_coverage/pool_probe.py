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
from .probe import (Case, Probe, Row, _close, _on, _same_inputs, _short,
                    _Stepper)

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
             num_real_graphs: int) -> Optional[str]:
    """The first difference of the real entries, or None."""
    want, got = _entries(expected), _entries(actual)
    for key, value in want.items():
        if key not in got:
            return f"{key} missing"
        if got[key].shape[0] < value.shape[0]:
            return (f"{key}: {got[key].shape[0]} used entries, PyG has "
                    f"{value.shape[0]}")
        problem = _close(got[key], value)
        if problem is not None:
            return f"{key}: {problem}"
    extra = got.get("batch")
    if extra is not None and bool(
            (extra[want["batch"].shape[0]:] < num_real_graphs).any()):
        return "used node slots beyond PyG's belong to real graphs"
    return None


def _real_graphs(data: Batch) -> int:
    return int(data.graphs_mask.sum())


class _Eager:
    """Eager PyG on the plain batch: outputs in eval and train mode, the
    loss's weight and the parameters' gradients."""

    def __init__(self, probe: PoolProbe, pair: BatchPair) -> None:
        model = _copy(probe).eval()
        with torch.no_grad():
            self.out_eval = model.call(model.layer, model.pre(pair.plain.x),
                                       pair.plain)
        channels = self.out_eval["rows"].shape[-1]
        slots = max(pair.padded.num_nodes, pair.padded.num_edges)
        gen = torch.Generator().manual_seed(1)
        self.weight = torch.randn(slots, channels, generator=gen)
        self.weight[int(self.out_eval["used"].sum()):] = 0
        model.train()
        out, loss = model(pair.plain, self.weight)
        loss.backward()
        self.out_train = out
        self.grads = {name: (p.grad if p.grad is not None else
                             torch.zeros_like(p))
                      for name, p in model.named_parameters()}


def _copy(probe: PoolProbe) -> PoolProbe:
    return copy.deepcopy(probe)


def run_pool_case(case: Case, families: Optional[List[BatchPair]] = None,
                  compile_check: bool = True) -> Row:
    """The coverage row of a pooling case: every check on every family
    (:func:`~.data.make_families` by default), stopping at the first that
    fails, with the reason and the family."""
    families = families or make_families(seed=0)
    row = Row(case.name, case.kind, case.note)
    torch.manual_seed(0)
    try:
        probe = PoolProbe(case)
        eager = [_Eager(probe, pair) for pair in families]
    except Exception as error:  # noqa: BLE001 - the row records it
        row.reason = f"PyG itself fails here: {_short(error)}"
        return row
    row.runs_in_pyg = True
    groups = [([families[i] for i in group], [eager[i] for i in group])
              for group in _same_inputs(families)]
    if all(_inference(row, probe, *group) for group in groups) and all(
            _training(row, probe, *group, poptorch.Options(),
                      "trainingModel") for group in groups):
        row.forward = row.gradients = True
        if compile_check:
            options = poptorch.Options()
            options.Simulator.backend("compile")
            row.compiles_once = all(
                _training(row, probe, *group, options, "compile backend")
                for group in groups)
    if row.reason and case.known:
        row.reason = f"{case.known} ({row.reason})"
    return row


def _inference(row: Row, probe: PoolProbe, families: List[BatchPair],
               eager: List[_Eager]) -> bool:
    inference = poptorch.inferenceModel(_copy(probe).eval())
    for index, (pair, reference) in enumerate(zip(families, eager)):
        try:
            out, _ = inference(pair.padded, reference.weight)
        except Exception as error:  # noqa: BLE001
            row.reason = _on(pair, f"does not trace: {_short(error)}"
                             if index == 0 else
                             f"inferenceModel fails: {_short(error)}")
            return False
        row.traces = True
        problem = _compare(out, reference.out_eval, _real_graphs(pair.padded))
        if problem is not None:
            row.reason = _on(pair, f"forward differs from eager PyG: "
                             f"{problem}")
            return False
    return True


def _training(row: Row, probe: PoolProbe, families: List[BatchPair],
              eager: List[_Eager], options: poptorch.Options,
              what: str) -> bool:
    try:
        stepper = _Stepper(probe, options)
    except Exception as error:  # noqa: BLE001
        row.reason = f"{what} fails: {_short(error)}"
        return False
    for pair, reference in zip(families, eager):
        try:
            out, grads = stepper.step(pair.padded, reference.weight)
        except Exception as error:  # noqa: BLE001
            row.reason = _on(pair, f"{what} fails: {_short(error)}")
            return False
        problem = _compare(out, reference.out_train,
                           _real_graphs(pair.padded))
        if problem is not None:
            row.reason = _on(pair, f"{what}: forward differs from eager "
                             f"PyG: {problem}")
            return False
        problem = _gradients(grads, reference.grads)
        if problem is not None:
            row.reason = _on(pair, f"{what}: {problem}")
            return False
    count = stepper.training.compilations()
    if options.Simulator.execution_backend == "compile" and count != 1:
        row.reason = (f"compiled {count} times over {len(families)} batches "
                      "of the same shapes")
        return False
    return True


def _gradients(grads: Dict[str, torch.Tensor],
               expected: Dict[str, torch.Tensor]) -> Optional[str]:
    for name, grad in expected.items():
        problem = _close(grads[name], grad)
        if problem is not None:
            return f"gradient of {name} differs: {problem}"
    return None
