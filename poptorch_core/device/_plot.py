"""The PNG of a :class:`~.report.SimulationReport`: memory per IPU as
stacked bars against capacity, and the Gantt chart of one step.

matplotlib is optional (the ``examples`` and ``test`` extras install it);
it is imported only when a plot is asked for.

Example::

    >>> model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
    >>> _ = model(torch.randn(2, 4))
    >>> import os, tempfile
    >>> path = model.simulationReport().plot(
    ...     os.path.join(tempfile.mkdtemp(), "report.png"))
    >>> os.path.getsize(path) > 0
    True
"""
from typing import Any, Tuple

from ..files import atomic_write
from .memory import CATEGORIES

_KIND_COLOURS = {"forward": "#4C72B0", "backward": "#DD8452",
                 "forward+backward": "#8172B3", "optimizer": "#55A868",
                 "all-reduce": "#C44E52", "weights": "#937860"}


def _pyplot() -> Any:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            "SimulationReport.plot() needs matplotlib, which is not "
            "installed: pip install 'poptorch-sim[examples]' (or pip "
            "install matplotlib)") from error
    return plt


def _memory_axes(ax: Any, report: Any) -> None:
    labels = [f"IPU{m.ipu}" for m in report.memory]
    bottoms = [0.0] * len(labels)
    for category in CATEGORIES:
        heights = [m.breakdown.get(category, 0) / 1e6 for m in report.memory]
        if any(heights):
            ax.bar(labels, heights, bottom=bottoms, label=category)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.axhline(report.chip.memory_bytes / 1e6, color="black", linestyle="--",
               label=f"capacity ({report.chip.name})")
    ax.set_ylabel("MB")
    ax.set_title("Memory per IPU")
    ax.legend(fontsize="x-small", loc="upper right")


def _time_unit(seconds: float) -> Tuple[str, float]:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return unit, scale
    return "ns", 1e-9


def _gantt_axes(ax: Any, report: Any) -> None:
    rows = {m.ipu: i for i, m in enumerate(report.memory)}
    unit, scale = _time_unit(report.step_seconds)
    seen = set()
    for bar in report.gantt:
        label = None if bar.kind in seen else bar.kind
        seen.add(bar.kind)
        ax.barh(rows.get(bar.ipu, 0), (bar.end - bar.start) / scale,
                left=bar.start / scale, height=0.6, label=label,
                color=_KIND_COLOURS.get(bar.kind, "grey"),
                edgecolor="white", linewidth=0.3)
    ax.set_yticks(list(rows.values()), [f"IPU{i}" for i in rows])
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(f"One step, {report.schedule} (bubble "
                 f"{report.bubble_fraction:.1%})")
    ax.legend(fontsize="x-small", loc="lower right")


def plot_report(report: Any, path: str) -> None:
    """Writes ``report``'s figure to ``path`` (PNG)."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [1, 2.2]})
    _memory_axes(left, report)
    _gantt_axes(right, report)
    fig.tight_layout()
    # Written atomically, as every file the package writes: a failed
    # overwrite keeps the previous chart.
    with atomic_write(path) as file:
        fig.savefig(file, format="png", dpi=80)
    plt.close(fig)
