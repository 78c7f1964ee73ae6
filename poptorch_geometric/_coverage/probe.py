"""One coverage row: run a PyG layer eagerly on the plain batch and on the
simulated IPU on the padded batch, and compare the real entries, for every
family of graphs of :mod:`.data` through one traced model.

The layer sits behind a linear projection of ``x`` (so gradients through the
layer's inputs reach a parameter) and under a loss that weighs each real
output entry by a fixed random weight and each padding entry by zero. The
parameters' gradients on the IPU are read back as the change of one SGD
step with learning rate 1.
"""
import copy
import dataclasses
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch_geometric.data import Batch

import poptorch_core as poptorch

from .data import IN_CHANNELS, BatchPair, make_families

__all__ = ["Case", "Row", "Probe", "Compare", "run_case", "run_checks"]

#: float32 results of different summation orders (padding adds terms).
RTOL, ATOL = 1e-4, 1e-5


@dataclasses.dataclass(frozen=True)
class Case:
    """How to build and call one PyG layer or function.

    ``call(layer, x, data)`` returns the layer's output for node features
    ``x`` of the batch ``data``; ``level`` says whether its rows are nodes
    or graphs. ``note`` records the arguments a fixed-size run needs;
    ``known`` explains a known cause of failure, shown with the reason.
    """
    name: str
    kind: str
    build: Callable[[], torch.nn.Module]
    call: Callable[[torch.nn.Module, torch.Tensor, Batch], Any]
    level: str = "node"
    note: str = ""
    known: str = ""


@dataclasses.dataclass
class Row:
    """The result of one case; ``reason`` explains the first check that
    did not pass (empty when all pass)."""
    name: str
    kind: str
    note: str = ""
    runs_in_pyg: bool = False
    traces: bool = False
    forward: bool = False
    gradients: bool = False
    compiles_once: bool = False
    reason: str = ""

    @property
    def green(self) -> bool:
        return self.traces and self.forward and self.gradients and \
            self.compiles_once


class Probe(torch.nn.Module):
    """``pre`` -> the layer -> a weighted sum of its output as the loss."""

    def __init__(self, case: Case):
        super().__init__()
        self.pre = torch.nn.Linear(IN_CHANNELS, IN_CHANNELS)
        self.layer = case.build()
        self.call = case.call

    def forward(self, data: Batch, weight: torch.Tensor):
        out = _first_tensor(self.call(self.layer, self.pre(data.x), data))
        loss = (out * weight).sum()
        return out, poptorch.identity_loss(loss, reduction="none")


def _first_tensor(out: Any) -> torch.Tensor:
    while not isinstance(out, torch.Tensor):
        out = out[0]
    return out


def _short(error: BaseException) -> str:
    """The error's type and first line; for an error without a message
    (a bare ``assert``), the line of code that raised it."""
    text = str(error).strip().splitlines()
    if text:
        return f"{type(error).__name__}: {text[0]}"[:200]
    frame = traceback.extract_tb(error.__traceback__)[-1]
    where = frame.filename.split("site-packages/")[-1]
    return f"{type(error).__name__} at {where}:{frame.lineno}: {frame.line}"


def _rows(level: str, data: Batch) -> int:
    return data.num_nodes if level == "node" else data.num_graphs


@dataclasses.dataclass
class _Eager:
    out_eval: torch.Tensor
    out_train: torch.Tensor
    grads: Dict[str, torch.Tensor]
    weight_padded: torch.Tensor


def _eager(probe: Probe, case: Case, pair: BatchPair) -> _Eager:
    """Eager PyG on the plain batch: outputs in eval and train mode, and the
    parameters' gradients of the weighted loss."""
    model = copy.deepcopy(probe).eval()
    with torch.no_grad():
        out_eval = _first_tensor(model.call(model.layer, model.pre(
            pair.plain.x), pair.plain))
    gen = torch.Generator().manual_seed(1)
    n_real = out_eval.shape[0]
    padded_shape = (_rows(case.level, pair.padded), ) + out_eval.shape[1:]
    weight = torch.randn(padded_shape, generator=gen)
    weight[n_real:] = 0
    model.train()
    out_train, loss = model(pair.plain, weight[:n_real])
    if loss.requires_grad:
        loss.backward()
    grads = {name: (p.grad if p.grad is not None else torch.zeros_like(p))
             for name, p in model.named_parameters()}
    return _Eager(out_eval, out_train.detach(), grads, weight)


def mismatch(actual: torch.Tensor, expected: torch.Tensor) -> Optional[str]:
    """What differs between ``actual`` (its leading ``expected.shape[0]``
    rows) and ``expected`` beyond the probe's tolerances, or None."""
    actual = actual[:expected.shape[0]]
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if torch.allclose(actual.float(), expected.float(), rtol=RTOL, atol=ATOL,
                      equal_nan=True):
        return None
    diff = (actual.float() - expected.float()).abs().nan_to_num(1e30).max()
    return f"max abs difference {float(diff):.2g}"


class _Stepper:
    """One ``trainingModel`` (SGD, learning rate 1) of a copy of the probe,
    stepped once per batch from the same initial weights: before each step
    the host weights are reset and copied to the device. So one traced
    model takes every family, and a parameter's gradient is its change."""

    def __init__(self, probe: Probe, options: poptorch.Options) -> None:
        self.model = copy.deepcopy(probe).train()
        self.initial = copy.deepcopy(self.model.state_dict())
        self.training = poptorch.trainingModel(
            self.model, options,
            torch.optim.SGD(self.model.parameters(), lr=1.0))
        self.steps = 0

    def step(self, data: Batch, weight: torch.Tensor
             ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """The output of one step on ``data`` and the parameters'
        gradients."""
        if self.steps:
            self.model.load_state_dict(self.initial)
            self.training.copyWeightsToDevice()
        self.steps += 1
        out, _ = self.training(data, weight)
        params = dict(self.model.named_parameters())
        return out, {n: self.initial[n] - params[n].detach()
                     for n in params}


#: How a row's outputs are compared: ``(simulated IPU output, eager PyG
#: output, the batch pair)`` -> the first problem, or None.
Compare = Callable[[Any, Any, BatchPair], Optional[str]]


def _compare_rows(actual: torch.Tensor, expected: torch.Tensor,
                  _pair: BatchPair) -> Optional[str]:
    return mismatch(actual, expected)


def run_case(case: Case, families: Optional[List[BatchPair]] = None,
             compile_check: bool = True) -> Row:
    """Runs every check of ``case`` on every family of graphs
    (:func:`~.data.make_families` by default) and stops at the first that
    fails, recording why and on which family."""
    return run_checks(case, families or make_families(seed=0),
                      compile_check, Probe, _eager, _compare_rows)


def run_checks(case: Case, families: List[BatchPair], compile_check: bool,
               probe_class: Callable[[Case], Probe],
               eager: Callable[[Probe, Case, BatchPair], Any],
               compare: Compare) -> Row:
    """The checks of :func:`run_case` with another probe: ``eager`` gives
    the reference of a family (``out_eval``, ``out_train``, ``grads``,
    ``weight_padded``), ``compare`` the first difference of an output."""
    row = _run_checks(case, families, compile_check,
                      (probe_class, eager, compare))
    if row.reason and case.known:
        row.reason = f"{case.known} ({row.reason})"
    return row


def _on(pair: BatchPair, problem: str) -> str:
    return f"{problem} ({pair.name} graphs)"


def _same_inputs(families: List[BatchPair]) -> List[List[int]]:
    """Indices of ``families`` grouped by the attributes their batches
    hold: one traced model takes the batches of a group (another set of
    attributes is another input structure, traced again)."""
    groups: Dict[Tuple[str, ...], List[int]] = {}
    for index, pair in enumerate(families):
        groups.setdefault(tuple(sorted(pair.padded.keys())), []).append(index)
    return list(groups.values())


def _run_checks(case: Case, families: List[BatchPair],
                compile_check: bool, how: Tuple[Any, Any, Compare]) -> Row:
    probe_class, make_eager, compare = how
    row = Row(case.name, case.kind, case.note)
    torch.manual_seed(0)
    try:
        probe = probe_class(case)
    except Exception as error:  # noqa: BLE001 - the row records it
        row.reason = f"PyG itself fails here: {_short(error)}"
        return row
    eager = []
    for pair in families:
        try:
            eager.append(make_eager(probe, case, pair))
        except Exception as error:  # noqa: BLE001
            row.reason = _on(pair, f"PyG itself fails here: {_short(error)}")
            return row
    row.runs_in_pyg = True
    groups = [([families[i] for i in group], [eager[i] for i in group])
              for group in _same_inputs(families)]
    if not all(_check_inference(row, probe, *group, compare)
               for group in groups):
        return row
    if not all(_check_training(row, probe, *group, compare,
                               poptorch.Options(), "trainingModel")
               for group in groups):
        return row
    row.forward = row.gradients = True
    if compile_check:
        options = poptorch.Options()
        options.Simulator.backend("compile")
        row.compiles_once = all(
            _check_training(row, probe, *group, compare, options,
                            "compile backend") for group in groups)
    return row


def _check_inference(row: Row, probe: Probe, families: List[BatchPair],
                     eager: List[_Eager], compare: Compare) -> bool:
    """One ``inferenceModel`` for every family of a group (the first
    traces it), against eager PyG in eval mode. Records the first problem
    in ``row``."""
    inference = poptorch.inferenceModel(copy.deepcopy(probe).eval())
    for index, (pair, reference) in enumerate(zip(families, eager)):
        try:
            out, _ = inference(pair.padded, reference.weight_padded)
        except Exception as error:  # noqa: BLE001
            row.reason = _on(pair, f"does not trace: {_short(error)}"
                             if index == 0 else
                             f"inferenceModel fails: {_short(error)}")
            return False
        row.traces = True
        problem = compare(out, reference.out_eval, pair)
        if problem is not None:
            row.reason = _on(pair, f"forward differs from eager PyG: "
                             f"{problem}")
            return False
    return True


def _check_training(row: Row, probe: Probe, families: List[BatchPair],
                    eager: List[_Eager], compare: Compare,
                    options: poptorch.Options, what: str) -> bool:
    """One training step per family, each from the same weights, against
    eager PyG's output and gradients; with the compile backend also one
    compilation for all of them. Records the first problem in ``row``."""
    try:
        stepper = _Stepper(probe, options)
    except Exception as error:  # noqa: BLE001
        row.reason = f"{what} fails: {_short(error)}"
        return False
    for pair, reference in zip(families, eager):
        try:
            out, grads = stepper.step(pair.padded, reference.weight_padded)
        except Exception as error:  # noqa: BLE001
            row.reason = _on(pair, f"{what} fails: {_short(error)}")
            return False
        problem = compare(out, reference.out_train, pair)
        if problem is not None:
            row.reason = _on(pair, f"{what}: forward differs from eager "
                             f"PyG: {problem}")
            return False
        for name, grad in reference.grads.items():
            problem = mismatch(grads[name], grad)
            if problem is not None:
                row.reason = _on(pair, f"{what}: gradient of {name} "
                                 f"differs: {problem}")
                return False
    count = stepper.training.compilations()
    if options.Simulator.execution_backend == "compile" and count != 1:
        row.reason = (f"compiled {count} times over {len(families)} batches "
                      "of the same shapes")
        return False
    return True
