"""Training throughput of one model's setups, measured in turns: what every
model of the benchmark (``benchmark.py``) shares.

A *setup* trains one model one way: plain PyG eagerly (``pyg_eager``), PyG
with the model under ``torch.compile`` (the peers a PyG user tries for
speed: ``pyg_compile_dynamic`` with ``dynamic=True``, ``pyg_compile_auto``
with torch's default automatic dynamic shapes), or PopTorch on the
simulated IPU with one of the backends the benchmark is given (one row or
more per backend: a backend name added to that list adds its rows).

:func:`measure` runs one warm-up epoch of each setup (compilation, caches;
its time is the setup's first-epoch time), then ``rounds`` rounds in which
every setup trains one epoch in turn, in reverse order every other round.
A setup's rate is the median of its rounds; its ratios are paired: per
round, its rate over the PyG eager loop's and over the best PyG-compiled
setup's rate of the same round (the best: the highest median rate), and
the median of those. Pairing within a round cancels most of the drift of
a machine shared with other work.

Example::

    >>> rates = iter([10, 20, 30, 10, 25, 30])
    >>> setups = {"pyg_eager": Setup(lambda: (next(rates), 1), PYG_EAGER),
    ...           "pyg_compile_auto": Setup(lambda: (next(rates), 1),
    ...                                     PYG_COMPILED),
    ...           "compile": Setup(lambda: (next(rates), 1), SIMULATED)}
    >>> results = measure(setups, rounds=1, clock=iter(range(100)).__next__)
    >>> best_pyg_compiled(results)
    'pyg_compile_auto'
    >>> compiled = results["compile"]
    >>> compiled["over_pyg_eager"], compiled["over_best_pyg_compiled"]
    (3.0, 1.2)
"""
import logging
import statistics
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch._dynamo
from torch._dynamo.utils import counters

__all__ = ["PEERS", "PYG_COMPILED", "PYG_EAGER", "SIMULATED",
           "DynamoCounts", "Setup", "best_pyg_compiled", "epochs_of",
           "measure", "model_ratios", "pyg_setups", "take_turns"]

#: Setup kinds.
PYG_EAGER, PYG_COMPILED, SIMULATED = "pyg_eager", "pyg_compiled", \
    "simulated_ipu"

#: The PyG-compiled peers: setup name -> ``torch.compile`` arguments.
PEERS: Dict[str, Dict[str, Any]] = {
    "pyg_compile_dynamic": {"dynamic": True},
    "pyg_compile_auto": {},
}

#: An epoch: trains one epoch, returns the items it trained on (graphs,
#: seed nodes, ...) and the optimizer steps it took.
Epoch = Callable[[], Tuple[int, int]]


class Setup:
    """One way of training a model: ``epoch()`` trains one epoch and returns
    ``(items, steps)``; ``compilations()`` counts what it compiled so far
    (for a peer, ``dynamo`` counts it, graph breaks too); ``close()``
    releases its loader; ``estimate`` maps items per micro-batch to the
    simulated IPU's estimate."""

    def __init__(self, epoch: Epoch, kind: str,
                 compilations: Callable[[], int] = lambda: 0,
                 close: Callable[[], None] = lambda: None,
                 estimate: Optional[Callable[[float], Dict]] = None,
                 dynamo: Optional["DynamoCounts"] = None):
        if kind not in (PYG_EAGER, PYG_COMPILED, SIMULATED):
            raise ValueError(f"unknown setup kind {kind!r}")
        self.kind, self.close, self.estimate = kind, close, estimate
        self.dynamo = dynamo
        if dynamo is not None:
            epoch = dynamo.wrap(epoch)
            compilations = lambda: dynamo.graphs  # noqa: E731
        self.epoch, self.compilations = epoch, compilations


class DynamoCounts:
    """What dynamo compiles during the calls :meth:`wrap` wraps: graphs
    (each with its backward; a recompilation is one more), graph breaks and
    hits of the recompile limit (after which dynamo runs the frame eagerly).

    Dynamo keeps one cache per code object, shared by every compiled
    instance of a model class in the process: the wrapped calls get the
    default recompile limit once per peer, so that both peers of one model
    together have what each would have alone.
    """

    def __init__(self) -> None:
        self.graphs = self.graph_breaks = self.limit_hits = 0

    def wrap(self, epoch: Epoch) -> Epoch:
        """``epoch``, counting what dynamo compiles while it runs."""
        def counted() -> Tuple[int, int]:
            graphs, breaks = _dynamo_totals()
            handler = _LimitHits()
            logger = logging.getLogger("torch._dynamo.convert_frame")
            logger.addHandler(handler)
            limit = torch._dynamo.config.recompile_limit * len(PEERS)
            try:
                with torch._dynamo.config.patch(recompile_limit=limit):
                    return epoch()
            finally:
                logger.removeHandler(handler)
                after_graphs, after_breaks = _dynamo_totals()
                self.graphs += after_graphs - graphs
                self.graph_breaks += after_breaks - breaks
                self.limit_hits += handler.hits
        return counted


class _LimitHits(logging.Handler):
    """Counts dynamo's warnings that a frame hit the recompile limit."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("torch._dynamo hit config."):
            self.hits += 1


def _dynamo_totals() -> Tuple[int, int]:
    return (counters["stats"]["unique_graphs"],
            sum(counters["graph_break"].values()))


def _inductor_cache() -> Tuple[int, int]:
    inductor = counters["inductor"]
    return inductor["fxgraph_cache_hit"], inductor["fxgraph_cache_miss"]


def pyg_setups(new_model: Callable[[], torch.nn.Module],
               pyg_epoch: Callable[[torch.nn.Module, Callable], Epoch],
               compile_backend: str = "inductor") -> Dict[str, Setup]:
    """``pyg_eager`` and the :data:`PEERS` of one plain PyG training loop.

    ``pyg_epoch(model, forward)`` builds the loop's epoch: the optimizer
    over ``model``'s parameters, every batch through ``forward`` (the model
    itself, or the model under ``torch.compile``). Each setup gets its own
    ``new_model()`` (the same initial weights)."""
    model = new_model()
    setups = {"pyg_eager": Setup(pyg_epoch(model, model), PYG_EAGER)}
    for name, arguments in PEERS.items():
        model = new_model()
        compiled = torch.compile(model, backend=compile_backend, **arguments)
        setups[name] = Setup(pyg_epoch(model, compiled), PYG_COMPILED,
                             dynamo=DynamoCounts())
    return setups


def take_turns(setups: Dict[str, Setup], rounds: int,
               progress: Callable[[str], None] = lambda stage: None,
               clock: Callable[[], float] = time.perf_counter
               ) -> Dict[str, List[Tuple[int, int, float]]]:
    """``rounds`` rounds of one epoch per setup: ``{name: [(items, steps,
    seconds), ...]}``, one entry per round. The setups take turns, in
    reverse order every other round: in a fixed order each setup would
    always follow the same one (the first op after a switch of code paths
    runs on cold caches) and drift within a round would always favour the
    same end."""
    out: Dict[str, List[Tuple[int, int, float]]] = {n: [] for n in setups}
    names = list(setups)
    for round_ in range(rounds):
        progress(f"measured epoch {round_ + 1} of {rounds} of each of "
                 f"{len(setups)} setups")
        for name in (names if round_ % 2 == 0 else names[::-1]):
            start = clock()
            items, steps = setups[name].epoch()
            out[name].append((items, steps, clock() - start))
    return out


def _paired(rates: List[float], base: List[float]) -> List[float]:
    return [rate / other for rate, other in zip(rates, base)]


def best_pyg_compiled(results: Dict[str, Dict[str, Any]]) -> Optional[str]:
    """The PyG-compiled setup of the highest median rate (None if none)."""
    peers = [name for name, r in results.items() if r["kind"] == PYG_COMPILED]
    return max(peers, key=lambda name: results[name]["per_s"], default=None)


def measure(setups: Dict[str, Setup], rounds: int,
            progress: Callable[[str], None] = lambda stage: None,
            after_warm_up: Callable[[], None] = lambda: None,
            clock: Callable[[], float] = time.perf_counter
            ) -> Dict[str, Dict[str, Any]]:
    """Each setup's record: first-epoch seconds and compilations, inductor
    cache hits and misses of that epoch, the rate per round and its median
    (``per_s``), the paired ratios over ``pyg_eager`` and over the best
    PyG-compiled setup (per round and their medians), the compilations
    (and, for peers, graph breaks) of the measured epochs. Every setup is
    closed at the end."""
    results: Dict[str, Dict[str, Any]] = {}
    for name, setup in setups.items():
        progress(f"{name}: warm-up epoch")
        hits, misses = _inductor_cache()
        start = clock()
        setup.epoch()
        seconds = clock() - start
        after_hits, after_misses = _inductor_cache()
        results[name] = {"kind": setup.kind, "first_epoch_s": seconds,
                         "compilations_first_epoch": setup.compilations(),
                         "inductor_cache_first_epoch": {
                             "hits": after_hits - hits,
                             "misses": after_misses - misses}}
        if setup.dynamo is not None:
            results[name]["graph_breaks_first_epoch"] = \
                setup.dynamo.graph_breaks
    after_warm_up()
    measured = take_turns(setups, rounds, progress, clock)
    for name, setup in setups.items():
        result = results[name]
        result["steps_per_epoch"] = measured[name][-1][1]
        result["items_per_epoch"] = measured[name][-1][0]
        result["per_s_per_round"] = [i / s for i, _, s in measured[name]]
        result["per_s"] = statistics.median(result["per_s_per_round"])
        result["compilations_measured_epochs"] = \
            setup.compilations() - result["compilations_first_epoch"]
        if setup.dynamo is not None:
            result["graph_breaks_measured_epochs"] = \
                setup.dynamo.graph_breaks - result["graph_breaks_first_epoch"]
            result["recompile_limit_hits"] = setup.dynamo.limit_hits
        if setup.estimate is not None:
            result["simulated_ipu"] = setup.estimate(statistics.mean(
                items / steps for items, steps, _ in measured[name]))
        setup.close()
    _add_paired_ratios(results)
    return results


def _add_paired_ratios(results: Dict[str, Dict[str, Any]]) -> None:
    bases = {"pyg_eager": "pyg_eager" if "pyg_eager" in results else None,
             "best_pyg_compiled": best_pyg_compiled(results)}
    for label, base in bases.items():
        if base is None:
            continue
        base_rates = results[base]["per_s_per_round"]
        for result in results.values():
            per_round = _paired(result["per_s_per_round"], base_rates)
            result[f"over_{label}_per_round"] = per_round
            result[f"over_{label}"] = statistics.median(per_round)


def model_ratios(model: str, section: Dict[str, Any]) -> Dict[str, float]:
    """The flat ratios of one model's section of the record:
    ``training_<model>_<setup>_over_pyg_eager`` (every setup but the eager
    loop), ``training_<model>_<setup>_over_best_pyg_compiled`` (every
    setup) and ``training_<model>_best_over_best_pyg_compiled``: the best
    simulated-IPU setup over the best peer.

    Example::

        >>> model_ratios("m", {"setups": {
        ...     "pyg_eager": {"kind": PYG_EAGER, "over_pyg_eager": 1.0,
        ...                   "over_best_pyg_compiled": 0.5},
        ...     "compile": {"kind": SIMULATED, "over_pyg_eager": 3.0,
        ...                 "over_best_pyg_compiled": 1.5}}})
        ... # doctest: +NORMALIZE_WHITESPACE
        {'training_m_compile_over_pyg_eager': 3.0,
         'training_m_pyg_eager_over_best_pyg_compiled': 0.5,
         'training_m_compile_over_best_pyg_compiled': 1.5,
         'training_m_best_over_best_pyg_compiled': 1.5}
    """
    setups = section["setups"]
    ratios = {f"training_{model}_{name}_over_pyg_eager": r["over_pyg_eager"]
              for name, r in setups.items()
              if name != "pyg_eager" and "over_pyg_eager" in r}
    ours = [r["over_best_pyg_compiled"] for r in setups.values()
            if r["kind"] == SIMULATED and "over_best_pyg_compiled" in r]
    ratios.update({
        f"training_{model}_{name}_over_best_pyg_compiled":
        r["over_best_pyg_compiled"]
        for name, r in setups.items() if "over_best_pyg_compiled" in r})
    if ours:
        ratios[f"training_{model}_best_over_best_pyg_compiled"] = max(ours)
    return ratios


def epochs_of(loader: Any) -> Iterator[Any]:
    """The loader's batches, epoch after epoch (for setups whose measured
    "epoch" is a fixed number of steps of a long epoch)."""
    while True:
        yield from loader
