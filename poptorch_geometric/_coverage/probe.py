"""One coverage row: run a PyG layer eagerly on the plain batch and on the
simulated IPU on the padded batch, and compare the real entries.

The layer sits behind a linear projection of ``x`` (so gradients through the
layer's inputs reach a parameter) and under a loss that weighs each real
output entry by a fixed random weight and each padding entry by zero. The
parameters' gradients on the IPU are read back as the change of one SGD
step with learning rate 1.
"""
import copy
import dataclasses
import traceback
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch_geometric.data import Batch

import poptorch_core as poptorch

from .data import IN_CHANNELS, BatchPair, make_batches

__all__ = ["Case", "Row", "Probe", "run_case"]

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


def _close(actual: torch.Tensor, expected: torch.Tensor) -> Optional[str]:
    actual = actual[:expected.shape[0]]
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if torch.allclose(actual.float(), expected.float(), rtol=RTOL, atol=ATOL,
                      equal_nan=True):
        return None
    diff = (actual.float() - expected.float()).abs().nan_to_num(1e30).max()
    return f"max abs difference {float(diff):.2g}"


def _ipu_step(probe: Probe, data: Batch, weight: torch.Tensor,
              options: poptorch.Options) -> Tuple[Any, torch.Tensor,
                                                   Dict[str, torch.Tensor]]:
    """One SGD step (lr 1) on the IPU: its output, the model it ran and
    the parameters' gradients, read back as their change."""
    model = copy.deepcopy(probe).train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    training = poptorch.trainingModel(
        model, options, torch.optim.SGD(model.parameters(), lr=1.0))
    out, _ = training(data, weight)
    grads = {n: before[n] - p.detach() for n, p in model.named_parameters()}
    return training, out, grads


def run_case(case: Case, pair: Optional[BatchPair] = None,
             compile_check: bool = True) -> Row:
    """Runs every check of ``case`` in order and stops at the first that
    fails, recording why."""
    row = _run_checks(case, pair or make_batches(seed=0), compile_check)
    if row.reason and case.known:
        row.reason = f"{case.known} ({row.reason})"
    return row


def _run_checks(case: Case, pair: BatchPair, compile_check: bool) -> Row:
    row = Row(case.name, case.kind, case.note)
    torch.manual_seed(0)
    try:
        probe = Probe(case)
        eager = _eager(probe, case, pair)
    except Exception as error:  # noqa: BLE001 - the row records it
        row.reason = f"PyG itself fails here: {_short(error)}"
        return row
    row.runs_in_pyg = True
    try:
        inference = poptorch.inferenceModel(copy.deepcopy(probe).eval())
        out, _ = inference(pair.padded, eager.weight_padded)
        row.traces = True
    except Exception as error:  # noqa: BLE001
        row.reason = f"does not trace: {_short(error)}"
        return row
    problem = _close(out, eager.out_eval)
    if problem is None:
        try:
            _, out, grads = _ipu_step(probe, pair.padded,
                                      eager.weight_padded, poptorch.Options())
        except Exception as error:  # noqa: BLE001
            row.reason = f"trainingModel fails: {_short(error)}"
            return row
        problem = _close(out, eager.out_train)
    if problem is not None:
        row.reason = f"forward differs from eager PyG: {problem}"
        return row
    row.forward = True
    for name, grad in eager.grads.items():
        problem = _close(grads[name], grad)
        if problem is not None:
            row.reason = f"gradient of {name} differs: {problem}"
            return row
    row.gradients = True
    if compile_check:
        _check_compile(row, probe, pair, eager)
    return row


def _check_compile(row: Row, probe: Probe, pair: BatchPair,
                   eager: _Eager) -> None:
    options = poptorch.Options()
    options.Simulator.backend("compile")
    try:
        training, out, _ = _ipu_step(probe, pair.padded, eager.weight_padded,
                                     options)
        other = make_batches(seed=1).padded
        training(other, eager.weight_padded)
    except Exception as error:  # noqa: BLE001
        row.reason = f"compile backend fails: {_short(error)}"
        return
    problem = _close(out, eager.out_train)
    if problem is not None:
        row.reason = f"compiled forward differs: {problem}"
    elif training.compilations() != 1:
        row.reason = (f"compiled {training.compilations()} times over two "
                      "batches of the same shapes")
    else:
        row.compiles_once = True
