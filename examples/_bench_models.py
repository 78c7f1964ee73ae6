"""The models of the benchmark's training rows, each trained by plain PyG
(eagerly and under ``torch.compile``) and by PopTorch on the simulated IPU.

* ``nci_gine``: ``molecule_model.MoleculeGNN`` (GINE) on the NCI TPSA
  molecules; PyG's ``DataLoader`` of 128 graphs against
  ``FixedSizeDataLoader`` (StreamPack, ``for_batch_size`` budgets: the same
  number of steps per epoch), ``Sync`` and ``Async`` loading; rates in
  graphs/s.
* ``cora_gcn``, ``cora_gat``: ``cora_gcn.GCN`` and :class:`GAT` full-batch
  on Cora (self-loops added once by the data transform); a measured epoch
  is ``--full-batch-steps`` training epochs of one step; rates in
  epochs/s.
* ``sage_power_law``: ``cora_sage.GraphSAGE`` on the power-law graph
  (``power_law_graph``, 1M nodes and 10M edges by default), PyG's
  ``NeighborLoader`` on ``TorchNeighborSampler`` against
  ``FixedSizeNeighborLoader`` (fanout [15, 10], 1024 seeds per batch); a
  measured epoch is ``--sage-steps`` batches of an epoch of the whole
  graph; rates in seed nodes/s.
* ``point_cloud``: ``point_cloud_molecules.PointCloudGNN``, which builds
  its radius graph in ``forward``, on RDKit-embedded NCI molecules, PyG's
  ``DataLoader`` of 32 graphs against ``FixedSizeDataLoader``; rates in
  graphs/s. PyG's ``radius_graph`` needs pyg-lib, which PyPI does not
  ship: the PyG rows search with ``poptorch_geometric.ops.radius_graph``
  (what PopTorch Geometric substitutes while tracing) and keep its real
  edges, the data-dependent edge list PyG's own would return.

Every builder takes the benchmark's arguments and returns a
:class:`ModelBench`; ``MODELS`` lists them in the benchmark's order.
"""
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader as PyGDataLoader
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GATConv

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_core.data._load_placement import async_placement
from poptorch_geometric.datasets import NCITPSA, default_root, \
    power_law_graph
from poptorch_geometric.ops import knn_graph, radius_graph

from _bench_training import SIMULATED, Epoch, Setup, epochs_of, pyg_setups
from _example_common import device_estimate, masked_mean_loss
from _planetoid import load_planetoid
from cora_gcn import GCN
from cora_sage import GraphSAGE
from molecule_model import MoleculeGNN
from point_cloud_molecules import PointCloudGNN, embed_molecules

__all__ = ["GAT", "GRAPHS_PER_BATCH", "MODELS", "ModelBench", "all_setups",
           "nci_dataset", "nci_inputs", "nci_model"]

GRAPHS_PER_BATCH = 128
_NCI_INPUTS = ("x", "edge_index", "edge_attr", "batch", "graphs_mask", "y")
_CLOUD_INPUTS = ("x", "pos", "batch", "graphs_mask", "y")
SAGE_FANOUTS = [15, 10]


@dataclasses.dataclass
class ModelBench:
    """One model's training rows: ``new_model()`` (the same initial weights
    each call) for the PyG rows, ``pyg_epoch(model, forward)`` a plain PyG
    training epoch over ``forward`` (the model, or the model under
    ``torch.compile``), ``ours(backend)`` the simulated-IPU setups of one
    backend by name. ``unit`` is what the rates count; ``config`` goes into
    the record."""
    title: str
    unit: str
    config: Dict[str, Any]
    new_model: Callable[[], torch.nn.Module]
    pyg_epoch: Callable[[torch.nn.Module, Callable], Epoch]
    ours: Callable[[str], Dict[str, Setup]]


def all_setups(bench: ModelBench, backends: Sequence[str],
               compile_backend: str) -> Dict[str, Setup]:
    """The PyG rows, then each backend's rows, in the order of
    ``backends``."""
    setups = pyg_setups(bench.new_model, bench.pyg_epoch, compile_backend)
    for backend in backends:
        setups.update(bench.ours(backend))
    return setups


def _seeded(build: Callable[[], torch.nn.Module]
            ) -> Callable[[], torch.nn.Module]:
    def new_model() -> torch.nn.Module:
        torch.manual_seed(0)
        return build()
    return new_model


def _options(backend: str, device_iterations: int = 1) -> poptorch.Options:
    opts = poptorch.Options().deviceIterations(device_iterations)
    opts.Simulator.backend(backend)
    return opts


def _pyg_step(optimizer: torch.optim.Optimizer, forward: Callable,
              *inputs: Any) -> None:
    optimizer.zero_grad()
    _, loss = forward(*inputs)
    loss.backward()
    optimizer.step()


def _pyg_graph_batches(new_loader: Callable[[], Any], lr: float,
                       inputs: Callable[[Any], Sequence[torch.Tensor]]
                       ) -> Callable[[torch.nn.Module, Callable], Epoch]:
    """The PyG side of a graph-batch model: an epoch over ``new_loader()``
    with Adam at ``lr``; every graph of a PyG batch is real."""
    def pyg_epoch(model: torch.nn.Module, forward: Callable) -> Epoch:
        loader = new_loader()
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)

        def epoch() -> Tuple[int, int]:
            graphs = steps = 0
            for batch in loader:
                model.num_graphs = batch.num_graphs
                batch.graphs_mask = torch.ones(batch.num_graphs,
                                               dtype=torch.bool)
                _pyg_step(optimizer, forward, *inputs(batch))
                graphs += batch.num_graphs
                steps += 1
            return graphs, steps
        return epoch
    return pyg_epoch


# --- NCI molecules, GINE -----------------------------------------------------

def nci_dataset(args: Any) -> Any:
    """The NCI TPSA molecules, the first ``args.limit`` if given."""
    dataset = NCITPSA(root=args.data_root)
    return dataset[:args.limit] if args.limit else dataset


def nci_inputs(batch: Any) -> List[torch.Tensor]:
    """``MoleculeGNN``'s inputs from a batch."""
    return [batch[name] for name in _NCI_INPUTS]


def nci_model(dataset: Any, num_graphs: int, hidden: int) -> MoleculeGNN:
    """``MoleculeGNN`` with fixed initial weights, targets standardised with
    the dataset's mean and deviation."""
    y = torch.cat([d.y.view(-1) for d in dataset])
    torch.manual_seed(0)
    return MoleculeGNN(num_graphs, hidden, 3, float(y.mean()),
                       float(y.std()))


def nci_gine(args: Any) -> ModelBench:
    """GINE on NCI TPSA: PyG's DataLoader against ``FixedSizeDataLoader``
    (StreamPack), ``Sync`` and ``Async`` per backend."""
    dataset = nci_dataset(args)
    sizes = pyg_ipu.FixedSizeOptions.for_batch_size(dataset,
                                                    GRAPHS_PER_BATCH)

    pyg_epoch = _pyg_graph_batches(
        lambda: PyGDataLoader(dataset, batch_size=GRAPHS_PER_BATCH,
                              shuffle=True, exclude_keys=["smiles"]),
        lr=1e-3, inputs=nci_inputs)

    def executor(backend: str, mode: poptorch.DataLoaderMode) -> Setup:
        opts = _options(backend, args.device_iterations)
        loader = pyg_ipu.FixedSizeDataLoader(
            dataset, batch_size=sizes.num_graphs, shuffle=True,
            fixed_size_options=sizes,
            fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
            exclude_keys=["smiles"], options=opts, mode=mode)
        model = nci_model(dataset, sizes.num_graphs, args.hidden)
        ipu_model = poptorch.trainingModel(
            model, opts, poptorch.optim.Adam(model.parameters(), lr=1e-3))

        def epoch() -> Tuple[int, int]:
            graphs = steps = 0
            for batch in loader:
                ipu_model(*nci_inputs(batch))
                graphs += int(batch.graphs_mask.sum())
                steps += args.device_iterations
            return graphs, steps

        return Setup(epoch, SIMULATED, ipu_model.compilations,
                     loader.terminate,
                     lambda graphs: device_estimate(ipu_model, graphs))

    def ours(backend: str) -> Dict[str, Setup]:
        return {f"{backend}_{mode.name.lower()}": executor(backend, mode)
                for mode in (poptorch.DataLoaderMode.Sync,
                             poptorch.DataLoaderMode.Async)}

    return ModelBench(
        title=f"NCI TPSA, GINE, {len(dataset)} molecules, "
              f"{GRAPHS_PER_BATCH} graphs per batch",
        unit="graphs",
        config={"molecules": len(dataset), "hidden": args.hidden,
                "graphs_per_batch": GRAPHS_PER_BATCH,
                "device_iterations": args.device_iterations,
                # Where the Async setups start loading: a worker process,
                # or this process when no CPU is free for one (until
                # loading takes 30% of two epochs in a row).
                "async_placement": async_placement(),
                "fixed_sizes": {"num_graphs": sizes.num_graphs,
                                "num_nodes": sizes.num_nodes,
                                "num_edges": sizes.num_edges}},
        new_model=lambda: nci_model(dataset, GRAPHS_PER_BATCH, args.hidden),
        pyg_epoch=pyg_epoch, ours=ours)


# --- Cora, full batch --------------------------------------------------------

class GAT(torch.nn.Module):
    """PyG's examples/gat.py model (8 heads of 8 channels, dropout 0.6)
    with the masked loss of ``cora_gcn.GCN``: ``forward(x, edge_index, y,
    train_mask)`` returns ``(logits, loss)`` in training mode, ``forward(x,
    edge_index)`` the logits otherwise. Self-loops
    come from the data transform, as for the GCN.

    Example::

        >>> model = GAT(in_channels=1433, out_channels=7)
    """

    def __init__(self, in_channels: int, out_channels: int,
                 hidden_channels: int = 8, heads: int = 8,
                 dropout: float = 0.6) -> None:
        super().__init__()
        self.dropout = dropout
        self.conv1 = GATConv(in_channels, hidden_channels, heads,
                             dropout=dropout, add_self_loops=False)
        self.conv2 = GATConv(hidden_channels * heads, out_channels, heads=1,
                             concat=False, dropout=dropout,
                             add_self_loops=False)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                y: Optional[torch.Tensor] = None,
                train_mask: Optional[torch.Tensor] = None) -> Any:
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.dropout, training=self.training)
        logits = self.conv2(x, edge_index)
        if not self.training:
            return logits
        per_node = F.cross_entropy(logits, y, reduction="none")
        return logits, masked_mean_loss(per_node, train_mask)


def _full_batch(title: str, data: Data, new_model: Callable, args: Any,
                lr: float) -> ModelBench:
    """A measured epoch: ``args.full_batch_steps`` full-batch training
    epochs (Adam, weight decay 5e-4)."""
    steps = args.full_batch_steps
    inputs = (data.x, data.edge_index, data.y, data.train_mask)

    def pyg_epoch(model: torch.nn.Module, forward: Callable) -> Epoch:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr,
                                     weight_decay=5e-4)

        def epoch() -> Tuple[int, int]:
            for _ in range(steps):
                _pyg_step(optimizer, forward, *inputs)
            return steps, steps
        return epoch

    def ours(backend: str) -> Dict[str, Setup]:
        model = new_model()
        ipu_model = poptorch.trainingModel(
            model, _options(backend), poptorch.optim.Adam(
                model.parameters(), lr=lr, weight_decay=5e-4))

        def epoch() -> Tuple[int, int]:
            for _ in range(steps):
                ipu_model(*inputs)
            return steps, steps
        return {backend: Setup(epoch, SIMULATED, ipu_model.compilations)}

    return ModelBench(
        title=f"{title}, full batch ({data.num_nodes} nodes, "
              f"{data.num_edges} edges), {steps} epochs per measured round",
        unit="epochs",
        config={"nodes": data.num_nodes, "edges": data.num_edges,
                "epochs_per_round": steps},
        new_model=new_model, pyg_epoch=pyg_epoch, ours=ours)


def _cora(args: Any) -> Any:
    return load_planetoid(args.data_root or default_root(), "Cora",
                          T.Compose([T.AddSelfLoops(),
                                     T.NormalizeFeatures()]))


def cora_gcn(args: Any) -> ModelBench:
    """The two-layer GCN of ``cora_gcn.py`` (16 channels), full batch."""
    dataset = _cora(args)
    return _full_batch("Cora, GCN", dataset[0], _seeded(lambda: GCN(
        dataset.num_features, 16, dataset.num_classes)), args, lr=0.01)


def cora_gat(args: Any) -> ModelBench:
    """:class:`GAT` (PyG's example's sizes), full batch."""
    dataset = _cora(args)
    return _full_batch("Cora, GAT", dataset[0], _seeded(lambda: GAT(
        dataset.num_features, dataset.num_classes)), args, lr=0.005)


# --- GraphSAGE, neighbour sampling on a large graph --------------------------

def sage_power_law(args: Any) -> ModelBench:
    """GraphSAGE with neighbour sampling on the power-law graph: a measured
    epoch is ``args.sage_steps`` batches of ``args.sage_batch_size`` seed
    nodes (the loaders run on, epoch after epoch of the whole graph)."""
    nodes, batch_size, steps = (args.sage_nodes, args.sage_batch_size,
                                args.sage_steps)
    graph = power_law_graph(nodes, nodes * 10, seed=0)
    sampler = pyg_ipu.TorchNeighborSampler(graph, SAGE_FANOUTS)
    size_batches = 50
    torch.manual_seed(0)
    sizes = pyg_ipu.FixedSizeOptions.from_loader(NeighborLoader(
        graph, SAGE_FANOUTS, batch_size=batch_size, shuffle=True,
        neighbor_sampler=sampler), sample_limit=size_batches)
    classes = int(graph.y.max()) + 1
    new_model = _seeded(lambda: GraphSAGE(graph.num_features, 64, classes,
                                          batch_size))

    def train(step: Callable[[Any], None], loader: Any) -> Epoch:
        batches = epochs_of(loader)

        def epoch() -> Tuple[int, int]:
            for _ in range(steps):
                step(next(batches))
            return steps * batch_size, steps
        return epoch

    def pyg_epoch(model: torch.nn.Module, forward: Callable) -> Epoch:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        loader = NeighborLoader(graph, SAGE_FANOUTS, batch_size=batch_size,
                                shuffle=True, drop_last=True,
                                neighbor_sampler=sampler)
        return train(lambda batch: _pyg_step(
            optimizer, forward, batch.x, batch.edge_index, batch.y), loader)

    def ours(backend: str) -> Dict[str, Setup]:
        opts = _options(backend)
        loader = pyg_ipu.FixedSizeNeighborLoader(
            graph, SAGE_FANOUTS, batch_size=batch_size, shuffle=True,
            fixed_size_options=sizes, neighbor_sampler=sampler,
            options=opts)
        model = new_model()
        ipu_model = poptorch.trainingModel(
            model, opts, poptorch.optim.Adam(model.parameters(), lr=0.01))
        epoch = train(lambda batch: ipu_model(batch.x, batch.edge_index,
                                              batch.y), loader)
        return {backend: Setup(epoch, SIMULATED, ipu_model.compilations)}

    return ModelBench(
        title=f"GraphSAGE, neighbour sampling {SAGE_FANOUTS} on a "
              f"power-law graph of {nodes:,} nodes, {batch_size} seeds per "
              f"batch, {steps} batches per measured round",
        unit="seed nodes",
        config={"nodes": nodes, "edges": graph.num_edges,
                "fanouts": SAGE_FANOUTS, "batch_size": batch_size,
                "batches_per_round": steps,
                "fixed_sizes": {"num_nodes": sizes.num_nodes,
                                "num_edges": sizes.num_edges,
                                "from_batches": size_batches}},
        new_model=new_model, pyg_epoch=pyg_epoch, ours=ours)


# --- Point clouds, the graph built in forward --------------------------------

class _PyGPointCloud(PointCloudGNN):
    """The model as PyG runs it: the same search, returning only the real
    edges (a data-dependent number, as PyG's ``radius_graph`` does)."""

    def edges(self, pos: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        if self.graph == "knn":
            slots = knn_graph(pos, self.neighbors, batch, loop=False)
        else:
            slots = radius_graph(pos, self.cutoff, batch, loop=False,
                                 max_num_neighbors=self.neighbors)
        return slots[:, slots[0] >= 0]


def point_cloud(args: Any) -> ModelBench:
    """``PointCloudGNN`` (radius graph in ``forward``) on the first
    ``args.point_cloud_molecules`` NCI molecules with RDKit coordinates,
    batches of 32 molecules on average."""
    batch_size = 32
    graphs, failed = embed_molecules(NCITPSA(root=args.data_root),
                                     args.point_cloud_molecules, seed=0)
    y = torch.cat([g.y.view(-1) for g in graphs])
    sizes = pyg_ipu.FixedSizeOptions.for_batch_size(graphs, batch_size)

    def build(cls: type, num_graphs: int) -> Callable[[], torch.nn.Module]:
        return _seeded(lambda: cls(num_graphs, target_mean=float(y.mean()),
                                   target_std=float(y.std())))

    pyg_epoch = _pyg_graph_batches(
        lambda: PyGDataLoader(graphs, batch_size=batch_size, shuffle=True),
        lr=3e-3, inputs=lambda batch: [batch[k] for k in _CLOUD_INPUTS])

    def ours(backend: str) -> Dict[str, Setup]:
        opts = _options(backend)
        loader = pyg_ipu.FixedSizeDataLoader(
            graphs, batch_size=sizes.num_graphs, shuffle=True,
            fixed_size_options=sizes,
            fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
            options=opts)
        model = build(PointCloudGNN, sizes.num_graphs)()
        ipu_model = poptorch.trainingModel(
            model, opts, poptorch.optim.Adam(model.parameters(), lr=3e-3))

        def epoch() -> Tuple[int, int]:
            count = steps = 0
            for batch in loader:
                ipu_model(*[batch[k] for k in _CLOUD_INPUTS])
                count += int(batch.graphs_mask.sum())
                steps += 1
            return count, steps
        return {backend: Setup(epoch, SIMULATED, ipu_model.compilations,
                               loader.terminate)}

    return ModelBench(
        title=f"Point clouds (radius graph in forward), {len(graphs)} "
              f"molecules, {batch_size} per batch",
        unit="graphs",
        config={"molecules": len(graphs), "embedding_failures": failed,
                "graphs_per_batch": batch_size,
                "fixed_sizes": {"num_graphs": sizes.num_graphs,
                                "num_nodes": sizes.num_nodes,
                                "num_edges": sizes.num_edges}},
        new_model=build(_PyGPointCloud, batch_size), pyg_epoch=pyg_epoch,
        ours=ours)


#: Model name -> builder, in the benchmark's order.
MODELS: Dict[str, Callable[[Any], ModelBench]] = {
    "nci_gine": nci_gine,
    "cora_gcn": cora_gcn,
    "cora_gat": cora_gat,
    "sage_power_law": sage_power_law,
    "point_cloud": point_cloud,
}
