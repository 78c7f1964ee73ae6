"""Pieces shared by the drop-in examples (``cora_gcn.py``,
``graph_classification.py``): the common flags, the simulator options, a
masked loss that keeps shapes static, a timed training loop, the
side-by-side table and the JSON record; and the simulated IPU's estimate
(also used by ``train_molecules.py`` and the benchmark).

Example::

    >>> import argparse
    >>> parser = example_parser("Demo.")
    >>> args = parser.parse_args(["--cpu-reference", "--seed", "3"])
    >>> args.cpu_reference, args.seed, args.backend
    (True, 3, 'interpret')
"""
import argparse
import dataclasses
import json
import os
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from tqdm import tqdm

import poptorch
from poptorch_core.files import atomic_write

__all__ = ["CPU_COLUMN", "CalledWithBatch", "IPU_COLUMN", "TrainingLog",
           "add_common_arguments",
           "device_estimate", "example_parser", "ipu_options", "loss_change",
           "masked_mean_loss", "percent", "positive_int", "results_table",
           "side_by_side", "train_epochs", "write_json"]

#: Column titles of the two sides.
IPU_COLUMN = "simulated IPU"
CPU_COLUMN = "CPU (PyG)"


def example_parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of ``doc``,
    showing defaults, with the common flags (:func:`add_common_arguments`)
    in a group of their own."""
    parser = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_arguments(parser.add_argument_group("common flags"))
    return parser


def add_common_arguments(parser: Any) -> None:
    """Adds the flags every example has to ``parser`` (or an argument
    group): backend, host device, data root, seed, quick mode, CPU
    reference, JSON record and progress bars."""
    parser.add_argument("--backend", choices=("interpret", "compile",
                                              "auto"),
                        default="interpret",
                        help="how the simulator runs the traced graph "
                             "(these runs are short: a background build "
                             "for auto would hardly be used)")
    parser.add_argument("--host-device", choices=("cpu", "cuda"),
                        default="cpu",
                        help="where the simulator executes the graph")
    parser.add_argument("--data-root", default=None,
                        help="dataset folder; None means "
                             "$POPTORCH_SIM_DATA_ROOT or ./datasets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="a few epochs: a smoke test in seconds")
    parser.add_argument("--cpu-reference", action="store_true",
                        help="also train the same model with plain PyG on "
                             "the CPU and print both results side by side")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the summary to this JSON file")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars")


def ipu_options(args: argparse.Namespace,
                device_iterations: int = 1) -> poptorch.Options:
    """``poptorch.Options`` seeded with ``args.seed``, on the simulator
    backend and host device the flags chose."""
    opts = poptorch.Options().randomSeed(args.seed)
    opts.deviceIterations(device_iterations)
    opts.Simulator.backend(args.backend).hostDevice(args.host_device)
    return opts


def masked_mean_loss(per_item: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``per_item`` over the entries where ``mask`` is true, as
    the model's final loss.

    ``per_item[mask]`` would have a data-dependent shape, which an IPU (and
    the simulator's tracer) rejects; weighting by the float mask keeps every
    shape static. The ``identity_loss`` wrapper makes this sum the one final
    loss: without it PopTorch takes the unreduced torch loss inside (for
    example ``cross_entropy(..., reduction="none")``) as the loss and would
    back-propagate through the masked-out entries too. Outside PopTorch it
    is an identity.

    Example::

        >>> masked_mean_loss(torch.tensor([1., 2., 30.]),
        ...                  torch.tensor([True, True, False]))
        tensor(1.5000)
    """
    weight = mask.to(per_item.dtype)
    loss = (per_item * weight).sum() / weight.sum().clamp(min=1.0)
    return poptorch.identity_loss(loss, reduction="none")


class CalledWithBatch(torch.nn.Module):
    """``model`` called with the attributes ``keys`` of a whole batch.

    A training model called with the batch itself, rather than with its
    tensors, sees the batch's ``graphs_mask``: PopTorch then leaves the
    padding-only mini-batches that complete a loader's last step out of the
    optimizer step (``Mean`` averages the real mini-batches only).

    Example::

        >>> from torch_geometric.data import Data
        >>> wrapped = CalledWithBatch(torch.nn.Linear(2, 1), ["x"])
        >>> wrapped(Data(x=torch.ones(3, 2))).shape
        torch.Size([3, 1])
    """

    def __init__(self, model: torch.nn.Module, keys: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.keys = tuple(keys)

    def forward(self, batch: Any) -> Any:
        return self.model(*[batch[key] for key in self.keys])


@dataclasses.dataclass
class TrainingLog:
    """The mean training loss of each epoch, the time spent in training
    steps and the number of samples they processed."""
    losses: List[float] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    samples: int = 0

    @property
    def seconds_per_epoch(self) -> float:
        return self.seconds / max(len(self.losses), 1)

    @property
    def samples_per_second(self) -> float:
        return self.samples / max(self.seconds, 1e-9)


def train_epochs(epochs: int, run_epoch: Callable[[], Tuple[float, int]],
                 desc: str, progress: bool = True) -> TrainingLog:
    """Calls ``run_epoch()`` (which returns the epoch's mean loss and its
    sample count) ``epochs`` times under a progress bar, timing each call.

    Example::

        >>> log = train_epochs(3, lambda: (0.5, 10), "demo", progress=False)
        >>> log.losses, log.samples
        ([0.5, 0.5, 0.5], 30)
    """
    log = TrainingLog()
    bar = tqdm(range(epochs), desc=desc, leave=False, disable=not progress)
    for _ in bar:
        start = time.perf_counter()
        loss, samples = run_epoch()
        log.seconds += time.perf_counter() - start
        if not math.isfinite(loss):
            raise FloatingPointError(
                f"{desc}: the training loss became {loss} after "
                f"{len(log.losses)} epoch(s); lower the learning rate.")
        log.losses.append(loss)
        log.samples += samples
        bar.set_postfix(loss=f"{loss:.4f}")
    return log


def side_by_side(title: str, rows: Sequence[Tuple[str, Sequence[str]]],
                 columns: Sequence[str]) -> str:
    """A plain-text table: one row per metric, one column per side.

    Example::

        >>> print(side_by_side("Demo", [("loss", ["0.10", "0.11"])],
        ...                    ["simulated IPU", "CPU (PyG)"]))
        === Demo ===
                simulated IPU  CPU (PyG)
        loss             0.10       0.11
    """
    label_width = max(len(label) for label, _ in rows) + 2
    widths = [max(len(c), *(len(v[i]) for _, v in rows)) + 2
              for i, c in enumerate(columns)]
    lines = [f"=== {title} ===",
             " " * label_width + "".join(
                 f"{c:>{w}}" for c, w in zip(columns, widths))]
    lines += [f"{label:<{label_width}}" + "".join(
        f"{v:>{w}}" for v, w in zip(values, widths))
        for label, values in rows]
    return "\n".join(lines)


def loss_change(side: Dict[str, Any]) -> str:
    """``"first -> last"`` of a side's ``loss_history``."""
    history = side["loss_history"]
    return f"{history[0]:.4f} -> {history[-1]:.4f}"


def percent(key: str) -> Callable[[Dict[str, Any]], str]:
    """A metric formatter showing ``side[key]`` as a percentage.

    Example::

        >>> percent("acc")({"acc": 0.8125})
        '81.2%'
    """
    return lambda side: f"{side[key]:.1%}"


def results_table(title: str, summary: Dict[str, Any],
                  metrics: Sequence[Tuple[str, Callable[[Dict[str, Any]],
                                                        str]]]) -> str:
    """:func:`side_by_side` of ``summary["simulated_ipu"]`` and, when it is
    not None, ``summary["cpu_reference"]``: one row per ``(label,
    format(side))`` metric.

    Example::

        >>> print(results_table("Demo", {
        ...     "simulated_ipu": {"acc": 0.5}, "cpu_reference": None},
        ...     [("accuracy", lambda side: f"{side['acc']:.0%}")]))
        === Demo ===
                    simulated IPU
        accuracy              50%
    """
    sides = [(IPU_COLUMN, summary["simulated_ipu"])]
    if summary.get("cpu_reference") is not None:
        sides.append((CPU_COLUMN, summary["cpu_reference"]))
    rows = [(label, [fmt(side) for _, side in sides])
            for label, fmt in metrics]
    return side_by_side(title, rows, [column for column, _ in sides])


def device_estimate(ipu_model: Any, samples_per_micro_batch: float,
                    what: str = "graphs") -> Dict[str, Any]:
    """The simulated IPU's estimate for a compiled model: a one-line
    summary and the figures behind it (``simulationReport()``).

    Args:
        samples_per_micro_batch: what one micro-batch holds (e.g. the real
            graphs of a packed batch), for the throughput.
    """
    report = ipu_model.simulationReport()
    fullest = report.fullest()
    rate = report.throughput(samples_per_micro_batch)
    line = (f"{report.chip.name} x {report.ipus_per_replica}: "
            f"{fullest.total / 1e6:.1f} of {fullest.capacity / 1e6:.1f} MB "
            f"({fullest.utilisation:.2%}), step "
            f"{report.step_seconds * 1e6:.1f} us, {rate:,.0f} {what}/s "
            "(roofline)")
    return {"chip": report.chip.name, "ipus": report.num_ipus,
            "fits": report.fits, "peak_ipu_bytes": fullest.total,
            "capacity_bytes": fullest.capacity,
            "step_seconds": report.step_seconds,
            f"estimated_{what}_per_second": rate, "summary": line}


def positive_int(text: str) -> int:
    """An argparse ``type`` for counts that must be at least 1."""
    return int_at_least(1)(text)


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for ints of at least ``minimum``: a smaller
    value (or a word) is an error naming the flag and the valid range.

    Example::

        >>> parser = argparse.ArgumentParser()
        >>> _ = parser.add_argument("--limit", type=int_at_least(128))
        >>> parser.parse_args(["--limit", "200"]).limit
        200
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an integer of at least {minimum}, got "
                f"{text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be at least {minimum}, got {value}")
        return value
    parse.__name__ = f"int >= {minimum}"
    return parse


def write_json(path: Optional[str], summary: Dict[str, Any]) -> None:
    """Writes ``summary`` to ``path`` (if given) as strict JSON: a NaN or
    infinity is an error rather than an unreadable record."""
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with atomic_write(path, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2, allow_nan=False)
