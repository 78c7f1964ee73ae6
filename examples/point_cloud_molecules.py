"""Molecules as 3-D point clouds on the simulated IPU: the model builds its
graph inside ``forward`` with PyG's ``radius_graph`` (or ``knn_graph``).

A subset of the NCI molecules that ship inside the RDKit wheel gets 3-D
coordinates from RDKit's conformer embedding (ETKDG). The model never reads
the bonds: in ``forward`` it connects atoms closer than ``--cutoff``
angstroms (at most ``--neighbors`` per atom) and runs SchNet-style
continuous-filter convolutions over the distances, then sums the atoms of
each molecule to predict its polar surface area (TPSA).

PyG's ``radius_graph`` returns a data-dependent number of edges. While
PopTorch traces the model, PopTorch Geometric substitutes the fixed-shape
``poptorch_geometric.ops.radius_graph``: ``N * K`` edge slots whatever the
positions, empty slots marked -1. The model clamps those to a real index
and weighs their messages by 0, so with fixed-size (stream-packed) batches
every shape is static and the model compiles once.

Usage::

    python examples/point_cloud_molecules.py           # ~1 min on 2 cores
    python examples/point_cloud_molecules.py --quick   # ~20 s
    python examples/point_cloud_molecules.py --graph knn --backend compile
"""
import argparse
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch_geometric.data import Data
from torch_geometric.nn import MessagePassing, global_add_pool, knn_graph, \
    radius_graph
from torch_geometric.utils.smiles import x_map
from tqdm import tqdm

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric.datasets import NCITPSA

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _example_common import (example_parser, ipu_options,  # noqa: E402
                             masked_mean_loss, write_json)
from molecule_model import _CategoricalEncoder  # noqa: E402

_INPUTS = ("x", "pos", "batch", "graphs_mask", "y")


def embed_molecules(dataset, limit: int, seed: int) -> Tuple[List[Data], int]:
    """The first ``limit`` molecules with RDKit-embedded heavy-atom
    coordinates ``pos`` [n, 3]; returns them and the number of molecules
    whose embedding failed (left out)."""
    from rdkit import Chem, RDLogger
    from rdkit.Chem import AllChem
    RDLogger.DisableLog("rdApp.*")
    graphs, failed = [], 0
    for data in dataset[:limit]:
        mol = Chem.AddHs(Chem.MolFromSmiles(data.smiles))
        if AllChem.EmbedMolecule(mol, randomSeed=seed) != 0:
            failed += 1
            continue
        # Hydrogens were appended after the heavy atoms, whose order
        # (the order of data.x) RemoveHs keeps.
        positions = Chem.RemoveHs(mol).GetConformer().GetPositions()
        graphs.append(Data(x=data.x, edge_index=data.edge_index, y=data.y,
                           pos=torch.tensor(positions, dtype=torch.float)))
    return graphs, failed


class DistanceConv(MessagePassing):
    """A continuous-filter convolution (SchNet): each message is the
    neighbour's features times a filter of the distance, times ``weight``
    (a smooth cutoff that is 0 for empty edge slots)."""

    def __init__(self, hidden: int, num_rbf: int):
        super().__init__(aggr="add")
        self.filter = torch.nn.Sequential(
            torch.nn.Linear(num_rbf, hidden), torch.nn.SiLU(),
            torch.nn.Linear(hidden, hidden))
        self.lin_in = torch.nn.Linear(hidden, hidden, bias=False)
        self.lin_out = torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden), torch.nn.SiLU(),
            torch.nn.Linear(hidden, hidden))

    def forward(self, h, edge_index, rbf, weight):
        filters = self.filter(rbf) * weight.unsqueeze(-1)
        return self.lin_out(self.propagate(edge_index, x=self.lin_in(h),
                                           filters=filters))

    def message(self, x_j, filters):
        return x_j * filters


class PointCloudGNN(torch.nn.Module):
    """Atom embeddings, ``layers`` distance convolutions over the graph
    built in ``forward``, and a summed read-out per molecule.

    ``forward(x, pos, batch, graphs_mask, y)`` returns ``(prediction,
    loss)`` in training mode and the prediction otherwise.
    """

    def __init__(self, num_graphs: int, hidden: int = 64, layers: int = 3,
                 cutoff: float = 5.0, neighbors: int = 12,
                 graph: str = "radius", target_mean: float = 0.0,
                 target_std: float = 1.0, num_rbf: int = 32):
        super().__init__()
        self.num_graphs, self.cutoff = num_graphs, cutoff
        self.neighbors, self.graph = neighbors, graph
        self.target_mean, self.target_std = target_mean, target_std
        self.atoms = _CategoricalEncoder([len(v) for v in x_map.values()],
                                         hidden)
        self.register_buffer("centres", torch.linspace(0, cutoff, num_rbf))
        self.convs = torch.nn.ModuleList(
            DistanceConv(hidden, num_rbf) for _ in range(layers))
        self.head = torch.nn.Sequential(torch.nn.Linear(hidden, hidden),
                                        torch.nn.SiLU(),
                                        torch.nn.Linear(hidden, 1))
        # Start from predicting the mean: a summed read-out of random
        # weights is large and would dominate the first epochs.
        torch.nn.init.zeros_(self.head[-1].weight)
        torch.nn.init.zeros_(self.head[-1].bias)

    def edges(self, pos, batch):
        """Neighbour edges of each atom; empty slots are -1."""
        if self.graph == "knn":
            return knn_graph(pos, self.neighbors, batch, loop=False)
        return radius_graph(pos, self.cutoff, batch, loop=False,
                            max_num_neighbors=self.neighbors)

    def forward(self, x, pos, batch, graphs_mask, y=None):
        edge_index = self.edges(pos, batch)
        # Empty slots (-1) become edges 0 -> 0 whose messages weigh 0.
        valid = (edge_index[0] >= 0).to(pos.dtype)
        edge_index = edge_index.clamp(min=0)
        dist = (pos[edge_index[0]] - pos[edge_index[1]]).norm(dim=-1)
        envelope = 0.5 * (torch.cos(math.pi * dist / self.cutoff) + 1)
        weight = envelope * (dist < self.cutoff) * valid
        rbf = torch.exp(-4.0 * (dist.unsqueeze(-1) - self.centres) ** 2)
        h = self.atoms(x)
        for conv in self.convs:
            h = h + conv(h, edge_index, rbf, weight)
        out = global_add_pool(self.head(h), batch, size=self.num_graphs)
        prediction = out.view(-1) * self.target_std + self.target_mean
        if not self.training:
            return prediction
        target = (y.view(-1) - self.target_mean) / self.target_std
        per_graph = (out.view(-1) - target) ** 2
        return prediction, masked_mean_loss(per_graph, graphs_mask)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = example_parser(__doc__)
    parser.add_argument("--molecules", type=int, default=500,
                        help="embed and use the first N NCI molecules")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="molecules per batch on average")
    parser.add_argument("--graph", choices=("radius", "knn"),
                        default="radius",
                        help="radius_graph or knn_graph in forward")
    parser.add_argument("--cutoff", type=float, default=5.0,
                        help="radius of the graph, angstroms")
    parser.add_argument("--neighbors", type=int, default=12,
                        help="edge slots per atom (max_num_neighbors or k)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args(argv)
    if args.cpu_reference:
        parser.error("--cpu-reference is not implemented for this example: "
                     "it trains on the simulated IPU only.")
    if args.quick:
        args.epochs, args.molecules = 3, min(args.molecules, 100)
    return args


def _loader(graphs, sizes, args, shuffle: bool):
    return pyg_ipu.FixedSizeDataLoader(
        graphs, batch_size=sizes.num_graphs, shuffle=shuffle,
        fixed_size_options=sizes,
        fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
        options=ipu_options(args))


def _train(model, loader, args) -> Tuple[Any, List[float], float]:
    optimizer = poptorch.optim.Adam(model.parameters(), lr=args.lr)
    train_model = poptorch.trainingModel(model, loader.options, optimizer)
    history, seconds = [], 0.0
    for epoch in range(args.epochs):
        losses, start = [], time.perf_counter()
        for batch in tqdm(loader, leave=False, disable=args.no_progress,
                          desc=f"epoch {epoch + 1}/{args.epochs}"):
            _, loss = train_model(*[batch[k] for k in _INPUTS])
            losses.append(float(loss.mean()))
        seconds += time.perf_counter() - start
        history.append(sum(losses) / len(losses))
        if not math.isfinite(history[-1]):
            raise FloatingPointError("the training loss diverged; lower "
                                     "--lr")
    return train_model, history, seconds


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Embeds, trains and evaluates; returns the summary."""
    torch.manual_seed(args.seed)
    graphs, failed = embed_molecules(NCITPSA(root=args.data_root),
                                     args.molecules, args.seed)
    perm = torch.randperm(len(graphs)).tolist()
    num_val = max(1, len(graphs) // 10)
    val_set = [graphs[i] for i in perm[:num_val]]
    train_set = [graphs[i] for i in perm[num_val:]]
    train_y = torch.cat([g.y.view(-1) for g in train_set])
    sizes = pyg_ipu.FixedSizeOptions.for_batch_size(train_set,
                                                    args.batch_size)
    model = PointCloudGNN(sizes.num_graphs, args.hidden, args.layers,
                          args.cutoff, args.neighbors, args.graph,
                          float(train_y.mean()), float(train_y.std()))
    train_loader = _loader(train_set, sizes, args, shuffle=True)
    train_model, history, seconds = _train(model, train_loader, args)

    model.eval()
    eval_model = poptorch.inferenceModel(model, train_loader.options)
    errors, baseline, mean = [], [], float(train_y.mean())
    for batch in _loader(val_set, sizes, args, shuffle=False):
        prediction = eval_model(*[batch[k] for k in _INPUTS[:4]])
        mask = batch.graphs_mask.bool()
        target = batch.y.view(-1)[mask]
        errors.append((prediction[mask] - target).abs())
        baseline.append((target - mean).abs())
    return {
        "molecules": len(graphs), "embedding_failures": failed,
        "train_molecules": len(train_set), "val_molecules": len(val_set),
        "graph": args.graph, "epochs": args.epochs, "loss_history": history,
        "final_train_loss": history[-1],
        "val_mae": float(torch.cat(errors).mean()),
        "val_mae_predicting_mean": float(torch.cat(baseline).mean()),
        "train_graphs_per_second": len(train_set) * args.epochs / seconds,
        "budgets": {"num_nodes": sizes.num_nodes,
                    "num_edges": sizes.num_edges,
                    "num_graphs": sizes.num_graphs,
                    "edge_slots_in_forward": sizes.num_nodes * args.neighbors},
        "compilations": {"train": train_model.compilations(),
                         "inference": eval_model.compilations()},
        "backend": args.backend,
    }


def print_summary(summary: Dict[str, Any]) -> None:
    budgets = summary["budgets"]
    print("\n".join([
        "",
        "=== 3-D molecules, graph built in forward, on the simulated IPU ===",
        f"molecules          {summary['train_molecules']} train / "
        f"{summary['val_molecules']} validation (embedding failed for "
        f"{summary['embedding_failures']})",
        f"graph in forward   {summary['graph']}_graph, "
        f"{budgets['edge_slots_in_forward']} edge slots per batch",
        f"train loss         {summary['loss_history'][0]:.4f} -> "
        f"{summary['final_train_loss']:.4f} (standardised MSE)",
        f"validation MAE     {summary['val_mae']:.2f} A^2 (predicting the "
        f"mean: {summary['val_mae_predicting_mean']:.2f})",
        f"batch budgets      {budgets['num_graphs']} graphs, "
        f"{budgets['num_nodes']} atoms",
        f"backend            {summary['backend']} (compilations: train "
        f"{summary['compilations']['train']}, inference "
        f"{summary['compilations']['inference']})",
    ]))


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    summary = run(args)
    print_summary(summary)
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
