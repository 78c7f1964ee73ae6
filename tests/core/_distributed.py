"""Launching the processes of a distributed test, as ``torchrun`` does.

Each process is forked from the test process (so it starts without
importing torch again, which costs seconds per process on a small machine)
and given torchrun's variables before it touches PopTorch. By default this
test process hosts the rendezvous store, as torchrun's agent does
(``TORCHELASTIC_USE_AGENT_STORE``), so ports never collide and the store
outlives a killed process; ``agent_store=False`` lets process 0 host it, as
under PopRun or ``configureProcessId``. Forked children skip ``atexit``, so
the worker leaves the run explicitly (``poptorch.distributed.shutdown()``);
the ``torchrun`` test of the example covers the exit path.
"""
import dataclasses
import multiprocessing
import os
import pathlib
import socket
import sys
import time
from typing import Any, Dict, Iterable, List, Optional

import torch
import torch.distributed as dist

from . import _distributed_worker

#: Longest a launch may take before the test fails (and kills it).
DEADLINE = 120.0


@dataclasses.dataclass
class Process:
    rank: int
    returncode: Optional[int]
    output: str
    result: Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(rank: int, world: int, port: int, agent_store: bool
         ) -> Dict[str, str]:
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    if agent_store:
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    return env


def _child(scenario: str, out_dir: str, config: Any,
           env: Dict[str, str], log: str) -> None:
    with open(log, "w", encoding="utf-8") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    for key in list(os.environ):
        if key.startswith(("OMPI_", "TORCHELASTIC_")):
            del os.environ[key]
    os.environ.update(env)
    sys.exit(_distributed_worker.run(scenario, out_dir, config))


def launch(scenario: str, world: int, config: Any, out_dir: pathlib.Path,
           agent_store: bool = True,
           wait_for: Optional[Iterable[int]] = None) -> List[Process]:
    """Runs ``world`` processes of ``scenario`` and returns what each one
    reported. Only the ranks in ``wait_for`` (default: all) must exit; the
    others are killed once they have."""
    store = dist.TCPStore("127.0.0.1", 0, world, is_master=True,
                          wait_for_workers=False) if agent_store else None
    port = store.port if store is not None else _free_port()
    context = multiprocessing.get_context("fork")
    logs = [str(out_dir / f"rank{r}.log") for r in range(world)]
    procs = [context.Process(target=_child, args=(
        scenario, str(out_dir), config,
        _env(r, world, port, agent_store), logs[r])) for r in range(world)]
    for proc in procs:
        proc.start()
    waited = set(range(world) if wait_for is None else wait_for)
    deadline = time.monotonic() + DEADLINE
    try:
        while any(procs[r].exitcode is None for r in waited):
            if time.monotonic() > deadline:
                raise AssertionError(f"{scenario}: processes still running "
                                     f"after {DEADLINE} s")
            time.sleep(0.05)
    finally:
        for proc in procs:
            if proc.exitcode is None:
                proc.kill()
            proc.join()
    results = []
    for rank, proc in enumerate(procs):
        path = out_dir / f"rank{rank}.pt"
        with open(logs[rank], encoding="utf-8") as f:
            output = f.read()
        results.append(Process(rank, proc.exitcode, output,
                               torch.load(path) if path.exists() else None))
    del store
    return results
