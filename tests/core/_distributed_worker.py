"""One process of the distributed tests.

:func:`run` runs in a process with torchrun's environment (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ...); each process writes
what it saw to ``OUT_DIR/rank<r>.pt``. ``tests/core/_distributed.py``
launches them (``python -m tests.core._distributed_worker SCENARIO OUT_DIR
CONFIG`` runs one by hand).

Scenarios:

- ``train``: for each config, train the MLP for a few calls with
  ``replicationFactor(R)`` replicas here (``R x processes`` in all) on this
  process's replicas' share of a global batch; record outputs, losses and
  the final weights. Every process starts from different weights (seeded by
  rank), so the broadcast from rank 0 is exercised. A config with
  ``padding`` (global micro-batch indices) passes the batch as a
  ``_padding.Rows`` whose mask marks those micro-batches padding only.
- ``fail``: train until the ``victim`` rank kills itself (SIGKILL), hangs or
  ends its program at step 3 (or never starts); survivors record the ``poptorch.Error`` and
  how long the failing call took, and exit with status 3.
- ``adopt``: ``train`` in a process group the program started itself.
- ``mismatch``: each config lists per-rank overrides that make the processes
  disagree; every process records the compile error.
"""
import json
import os
import signal
import sys
import time
from typing import Any, Dict, List

import torch

import poptorch

from ._padding import Rows, register

FAILED_STATUS = 3


class MLP(torch.nn.Module):
    """x -> (out, mse loss); PyG-free, so that processes start quickly."""

    def __init__(self, hidden: int = 8):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, hidden)
        self.fc2 = torch.nn.Linear(hidden, 3)

    def forward(self, x, y):
        out = self.fc2(torch.relu(self.fc1(x)))
        return out, torch.nn.functional.mse_loss(out, y)


class RowsMLP(MLP):
    """The MLP called with ``Rows`` (features, targets, real-row mask)."""

    def forward(self, rows):
        return super().forward(rows.x, rows.y)


def real_rows(config: Dict[str, Any], world: int) -> torch.Tensor:
    """The real-row mask of a global batch: False on the micro-batches
    ``config["padding"]`` names."""
    n = config["D"] * config["G"] * config["R"] * world
    real = torch.ones(n, config["micro"], dtype=torch.bool)
    real[config.get("padding", [])] = False
    return real.reshape(-1)


def global_batch(config: Dict[str, Any], call: int, world: int):
    """The inputs of one call for all ``R x world`` replicas, in PopTorch's
    ``[D][G][replica][micro]`` layout."""
    gen = torch.Generator().manual_seed(1000 * config.get("seed", 0) + call)
    n = config["D"] * config["G"] * config["R"] * world * config["micro"]
    return torch.randn(n, 4, generator=gen), torch.randn(n, 3, generator=gen)


def local_share(tensor: torch.Tensor, config: Dict[str, Any], world: int,
                rank: int) -> torch.Tensor:
    """The rows of ``tensor`` (global layout) that ``rank``'s replicas read:
    global replicas ``rank * R .. rank * R + R - 1``."""
    d, g, r = config["D"], config["G"], config["R"]
    blocks = tensor.reshape(d, g, r * world, -1, *tensor.shape[1:])
    return blocks[:, :, rank * r:(rank + 1) * r].reshape(-1, *tensor.shape[1:])


def make_optimizer(config: Dict[str, Any], params) -> Any:
    if config.get("optimizer") == "adam":
        return poptorch.optim.Adam(params, lr=config["lr"])
    return poptorch.optim.SGD(params, lr=config["lr"], momentum=0.5)


def _options(config: Dict[str, Any]) -> poptorch.Options:
    opts = poptorch.Options().deviceIterations(config["D"])
    opts.replicationFactor(config["R"])
    opts.Training.gradientAccumulation(config["G"])
    opts.Training.accumulationAndReplicationReductionType(
        getattr(poptorch.ReductionType, config["reduction"]))
    opts.outputMode(poptorch.OutputMode.All)
    opts.Simulator.distributedTimeout(config.get("timeout", 20))
    return opts


def _train(config: Dict[str, Any], rank: int, world: int) -> Dict[str, Any]:
    torch.manual_seed(100 + rank)  # rank 0's weights must win
    padded = "padding" in config
    model = RowsMLP() if padded else MLP()
    if padded:
        register()
    ipu_model = poptorch.trainingModel(
        model, _options(config), make_optimizer(config, model.parameters()))
    outputs, losses = [], []
    for call in range(config["calls"]):
        x, y = (local_share(t, config, world, rank)
                for t in global_batch(config, call, world))
        if padded:
            real = local_share(real_rows(config, world), config, world, rank)
            out, loss = ipu_model(Rows(x, y, real))
        else:
            out, loss = ipu_model(x, y)
        # Plain tensors: PopTorch outputs carry a backward() that refuses.
        outputs.append(out.detach().clone())
        losses.append(loss.detach().clone())
    return {"outputs": outputs, "losses": losses,
            "weights": {k: v.clone() for k, v in model.state_dict().items()}}


def train(configs: List[Dict[str, Any]], rank: int, world: int) -> Any:
    return [_train(config, rank, world) for config in configs]


def fail(config: Dict[str, Any], rank: int, world: int) -> Any:
    if rank == config["victim"] and config["how"] == "never":
        return {"error": None}  # never joins the run
    model = MLP()
    ipu_model = poptorch.trainingModel(
        model, _options(config), make_optimizer(config, model.parameters()))
    x, y = (local_share(t, config, world, rank)
            for t in global_batch(config, 0, world))
    for step in range(config["steps"]):
        if rank == config["victim"] and step == 3:
            if config["how"] == "exit":
                return {"error": None}  # fewer steps than the others
            if config["how"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(600)  # hung: the test kills it
        start = time.monotonic()
        try:
            ipu_model(x, y)
        except poptorch.Error as error:
            return {"error": str(error), "type": type(error).__name__,
                    "seconds": time.monotonic() - start, "step": step}
    return {"error": None}


def mismatch(configs: List[Dict[str, Any]], rank: int, world: int) -> Any:
    errors = []
    for config in configs:
        config = {**config, **config.get("per_rank", {}).get(str(rank), {})}
        model = MLP(hidden=config.get("hidden", 8))
        ipu_model = poptorch.trainingModel(
            model, _options(config), make_optimizer(config,
                                                    model.parameters()))
        try:
            ipu_model(*global_batch(config, 0, 1))
            errors.append(None)
        except poptorch.Error as error:
            errors.append(str(error))
    return errors


def adopt(configs: List[Dict[str, Any]], rank: int, world: int) -> Any:
    """The program starts torch.distributed itself: PopTorch uses that
    group and leaves it to the program."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    dist.init_process_group("gloo")
    results = train(configs, rank, world)
    poptorch.distributed.shutdown()
    still_there = dist.is_initialized()
    dist.destroy_process_group()
    return {"runs": results, "group_left_alone": still_there}


SCENARIOS = {"train": train, "fail": fail, "mismatch": mismatch,
             "adopt": adopt}


def run(scenario: str, out_dir: str, config: Any) -> int:
    """Runs ``scenario`` as the process that the environment describes,
    saves its result and returns the exit status."""
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    result = SCENARIOS[scenario](config, rank, world)
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    poptorch.distributed.shutdown()
    failed = isinstance(result, dict) and result.get("error")
    return FAILED_STATUS if failed else 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
