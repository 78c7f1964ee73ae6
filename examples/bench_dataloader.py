"""Benchmark: batches per second of ``DataLoaderMode.Async`` over ``Sync``.

The dataset does real work in ``__getitem__``: it parses a SMILES string of
the NCI molecules shipped with RDKit into a PyG graph
(``torch_geometric.utils.from_smiles``) and pads it to a fixed size, so that
batches collate with torch's default collate. Two consumers are timed:

- ``load only``: the loop just takes the batches (Async can only move the
  loading to another core, not remove it);
- ``train step``: a small message-passing network does a forward and
  backward pass on each batch, which Async overlaps with loading.

The ``Preloaded`` rows iterate batches loaded beforehand: for ``train step``
that is the ceiling Async can reach, with loading entirely hidden.

Usage::

    python examples/bench_dataloader.py [--molecules 1024] [--repeats 5]
        [--json results.json]
"""
import argparse
import csv
import os
import statistics
import time
from typing import Any, Dict, Iterable, List, Tuple

import torch
from torch_geometric.utils import from_smiles

import poptorch_core as poptorch

from _example_common import write_json

MAX_NODES = 128  # the largest of the 4,999 molecules has 122 atoms
MAX_EDGES = 272  # ... and 264 directed bonds
NUM_ATOM_FEATURES = 9  # from_smiles' node features


def load_smiles(limit: int) -> Tuple[List[str], List[float], int]:
    """The first ``limit`` parsable SMILES with their TPSA, and how many
    unparsable ones were skipped."""
    import rdkit  # pylint: disable=import-outside-toplevel
    from rdkit import Chem, RDLogger  # pylint: disable=import-outside-toplevel
    RDLogger.DisableLog("rdApp.*")
    path = os.path.join(os.path.dirname(rdkit.__file__), "Data", "NCI",
                        "first_5k.tpsa.csv")
    smiles, targets, skipped = [], [], 0
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.reader(handle):
            if not row or row[0].startswith("#"):
                continue
            if Chem.MolFromSmiles(row[0]) is None:
                skipped += 1
                continue
            smiles.append(row[0])
            targets.append(float(row[1]))
            if len(smiles) == limit:
                break
    return smiles, targets, skipped


class SmilesGraphs(torch.utils.data.Dataset):
    """Molecule ``i`` as fixed-size tensors, built from SMILES on access.

    Padding nodes have all-zero features and ``node_mask`` False; padding
    edges are self-loops on the last (padding) node.
    """

    def __init__(self, smiles: List[str], targets: List[float]):
        self.smiles = smiles
        self.targets = targets

    def __len__(self) -> int:
        return len(self.smiles)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        graph = from_smiles(self.smiles[index])
        num_nodes, num_edges = graph.num_nodes, graph.edge_index.shape[1]
        if num_nodes >= MAX_NODES or num_edges > MAX_EDGES:
            raise ValueError(
                f"Molecule {index} has {num_nodes} atoms and {num_edges} "
                f"directed bonds: more than MAX_NODES - 1 = {MAX_NODES - 1} "
                f"or MAX_EDGES = {MAX_EDGES}.")
        x = torch.zeros(MAX_NODES, NUM_ATOM_FEATURES)
        x[:num_nodes] = graph.x.float()
        edge_index = torch.full((2, MAX_EDGES), MAX_NODES - 1)
        edge_index[:, :num_edges] = graph.edge_index
        node_mask = torch.zeros(MAX_NODES, dtype=torch.bool)
        node_mask[:num_nodes] = True
        return {"x": x, "edge_index": edge_index, "node_mask": node_mask,
                "y": torch.tensor([self.targets[index]])}


class MessagePassing(torch.nn.Module):
    """Three sum-aggregation rounds over padded graphs, then a masked sum."""

    def __init__(self, hidden: int = 128, rounds: int = 3):
        super().__init__()
        self.embed = torch.nn.Linear(NUM_ATOM_FEATURES, hidden)
        self.layers = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(hidden, hidden),
                                torch.nn.ReLU(),
                                torch.nn.Linear(hidden, hidden))
            for _ in range(rounds))
        self.head = torch.nn.Linear(hidden, 1)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        graphs = batch["x"].shape[0]
        h = self.embed(batch["x"]).reshape(graphs * MAX_NODES, -1)
        offsets = torch.arange(graphs).repeat_interleave(MAX_EDGES) * MAX_NODES
        source = batch["edge_index"][:, 0].reshape(-1) + offsets
        target = batch["edge_index"][:, 1].reshape(-1) + offsets
        for layer in self.layers:
            messages = torch.zeros_like(h).index_add_(0, target, h[source])
            h = h + layer(messages)
        h = h.reshape(graphs, MAX_NODES, -1) * batch["node_mask"][..., None]
        prediction = self.head(h.sum(dim=1))
        return torch.nn.functional.mse_loss(prediction, batch["y"])


def run_epochs(loader: Iterable[Any], epochs: int,
               step=None) -> Tuple[float, int]:
    """Seconds for ``epochs`` epochs and the number of batches seen."""
    batches = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            if step is not None:
                step(batch)
            batches += 1
    return time.perf_counter() - start, batches


def make_step(model: torch.nn.Module):
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)

    def step(batch):
        optimizer.zero_grad()
        model(batch).backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--molecules", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device-iterations", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1,
                        help="epochs per timed run")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed runs per mode, alternating the modes")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of the consumer process")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    smiles, targets, skipped = load_smiles(args.molecules)
    dataset = SmilesGraphs(smiles, targets)
    options = poptorch.Options().deviceIterations(args.device_iterations)
    consumers = {"load only": None, "train step": make_step(MessagePassing())}
    modes = (poptorch.DataLoaderMode.Sync, poptorch.DataLoaderMode.Async)

    loaders, startup = {}, {}
    for mode in modes:
        start = time.perf_counter()
        loaders[mode.name] = poptorch.DataLoader(
            options, dataset, batch_size=args.batch_size, mode=mode)
        startup[mode.name] = time.perf_counter() - start
    # The ceiling for "train step": the same steps on batches loaded
    # beforehand, i.e. with loading fully hidden.
    preloaded = list(loaders["Sync"])
    startup["Preloaded"] = 0.0
    # Alternating the modes spreads the noise of other processes over all.
    rates: Dict[Tuple[str, str], List[float]] = {}
    try:
        for consumer, step in consumers.items():
            runs = dict(loaders)
            if step is not None:
                runs["Preloaded"] = preloaded
            for _ in range(args.repeats):
                for mode, loader in runs.items():
                    seconds, batches = run_epochs(loader, args.epochs, step)
                    rates.setdefault((consumer, mode), []).append(
                        batches / seconds)
    finally:
        for loader in loaders.values():
            loader.terminate()

    print(f"{len(dataset)} molecules ({skipped} unparsable SMILES skipped), "
          f"combined batch {args.batch_size * args.device_iterations}, "
          f"{args.repeats} runs of {args.epochs} epoch(s) per mode, consumer "
          f"threads {args.threads}, {os.cpu_count()} CPUs")
    print(f"{'consumer':<12} {'mode':<9} {'best b/s':>9} {'median b/s':>11}"
          f" {'startup s':>10}")
    for (consumer, mode), values in rates.items():
        print(f"{consumer:<12} {mode:<9} {max(values):>9.2f} "
              f"{statistics.median(values):>11.2f} {startup[mode]:>10.2f}")
    ratios = {}
    for consumer in consumers:
        sync, asynchronous = rates[(consumer, "Sync")], rates[(consumer, "Async")]
        ratios[consumer] = {
            "best": max(asynchronous) / max(sync),
            "median": statistics.median(asynchronous) / statistics.median(sync)}
        print(f"Async / Sync batches per second ({consumer}): "
              f"{ratios[consumer]['best']:.2f} (best), "
              f"{ratios[consumer]['median']:.2f} (median)")
    if args.json:
        write_json(args.json, {
            "batches_per_s": {f"{c}/{m}": v for (c, m), v in rates.items()},
            "startup_s": startup, "async_over_sync": ratios,
            "args": vars(args)})


if __name__ == "__main__":
    main()
