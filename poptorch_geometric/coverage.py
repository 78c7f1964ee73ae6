"""Which PyG layers run on the simulated IPU with fixed-size batches.

``python -m poptorch_geometric.coverage`` tries every class of
``torch_geometric.nn.conv``, every model of
``torch_geometric.nn.models.basic_gnn``, every aggregation of
``torch_geometric.nn.aggr``, the global and node-selection poolings and
the norms on a fixed-size padded batch, through ``inferenceModel`` and
``trainingModel``, and prints a Markdown table (``--out`` writes it to a
file): whether each traces, matches eager PyG on the real entries (forward
and gradients) and compiles once with the ``compile`` backend, or why not.
The full run takes about an hour on 2 cores (``--jobs 2`` runs two rows at
a time; ``--no-compile``: a few minutes).

Example::

    >>> rows = run(["global_add_pool"], compile_check=False)
    >>> rows[0].traces, rows[0].forward, rows[0].gradients
    (True, True, True)
"""
import argparse
import concurrent.futures
import multiprocessing
import sys
import warnings
from typing import Iterable, List, Optional

import torch

from poptorch_core.files import atomic_write

from ._coverage.data import make_families
from ._coverage.pool_probe import run_pool_case
from ._coverage.probe import Row, run_case
from ._coverage.table import all_rows, conv_count, render, row_line

__all__ = ["run", "render", "row_line", "main"]


def _row(name: str, compile_check: bool, threads: int = 0) -> Row:
    """The row ``name`` (in a worker process with ``threads`` threads)."""
    if threads:
        torch.set_num_threads(threads)
    (kind, _, case, reason), = all_rows([name])
    if case is None:
        return Row(name, kind, reason=reason)
    # Poolings' outputs have other shapes than PyG's: their own probe
    # compares the real entries.
    run_row = run_pool_case if kind == "select" else run_case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_row(case, make_families(seed=0), compile_check)


def _collect(results: Iterable[Row], progress: bool) -> List[Row]:
    rows = []
    for row in results:
        rows.append(row)
        if progress:
            print(row_line(row), file=sys.stderr, flush=True)
    return rows


def run(only: Optional[Iterable[str]] = None, compile_check: bool = True,
        progress: bool = False, jobs: int = 1) -> List[Row]:
    """The coverage rows, all of them or those named in ``only``, computed
    ``jobs`` at a time (each in its own process when ``jobs > 1``)."""
    names = [name for _, name, _, _ in all_rows(only)]
    if jobs <= 1:
        return _collect((_row(name, compile_check) for name in names),
                        progress)
    threads = max(1, torch.get_num_threads() // jobs)
    with concurrent.futures.ProcessPoolExecutor(
            jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return _collect(pool.map(_row, names, [compile_check] * len(names),
                                 [threads] * len(names)), progress)


def main(argv: Optional[List[str]] = None) -> int:
    """The command line: runs the rows and prints or writes the table."""
    parser = argparse.ArgumentParser(
        prog="python -m poptorch_geometric.coverage",
        description="Coverage of PyG layers on the simulated IPU.")
    parser.add_argument("--out", help="write the Markdown table here")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="run only these rows")
    parser.add_argument("--no-compile", action="store_true",
                        help="skip the compile-backend column (fast)")
    parser.add_argument("--progress", action="store_true",
                        help="print each row to stderr as it is done")
    parser.add_argument("--jobs", type=int, default=1,
                        help="rows computed at a time, one process each")
    args = parser.parse_args(argv)
    rows = run(args.only, not args.no_compile, args.progress, args.jobs)
    text = render(rows)
    if args.out:
        with atomic_write(args.out, "w", encoding="utf-8") as file:
            file.write(text)
        green, runnable = conv_count(rows)
        print(f"{args.out}: {green} of {runnable} runnable conv classes "
              "green")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
