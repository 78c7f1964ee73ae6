"""A GINE graph-regression model for fixed-size molecule batches.

Atoms and bonds arrive as the categorical features that
``torch_geometric.utils.from_smiles`` produces; each column gets an
embedding. Padding graphs (``graphs_mask`` False) are excluded from the loss
and padding nodes only ever reach padding graphs, so the padding is inert.
"""
import torch
import torch.nn.functional as F
from torch_geometric.nn import GINEConv, global_add_pool
from torch_geometric.utils.smiles import e_map, x_map

import poptorch


class _CategoricalEncoder(torch.nn.Module):
    """Sum of one embedding per categorical column."""

    def __init__(self, cardinalities, hidden: int):
        super().__init__()
        self.embeddings = torch.nn.ModuleList(
            torch.nn.Embedding(n, hidden) for n in cardinalities)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return sum(emb(features[:, i]) for i, emb in enumerate(self.embeddings))


class MoleculeGNN(torch.nn.Module):
    """GINE over atom/bond embeddings, an MLP read-out per atom and sum
    pooling.

    ``forward(x, edge_index, edge_attr, batch, graphs_mask, y)`` returns
    ``(prediction, loss)`` in training mode and ``prediction`` otherwise.
    Targets are standardised with ``target_mean``/``target_std`` inside the
    model; predictions come out in the original units.

    Example::

        >>> model = MoleculeGNN(num_graphs=128, target_mean=60.0,
        ...                     target_std=30.0)
    """

    def __init__(self, num_graphs: int, hidden: int = 64, layers: int = 3,
                 target_mean: float = 0.0, target_std: float = 1.0):
        super().__init__()
        self.num_graphs = num_graphs
        self.atoms = _CategoricalEncoder([len(v) for v in x_map.values()],
                                         hidden)
        self.bonds = _CategoricalEncoder([len(v) for v in e_map.values()],
                                         hidden)
        self.convs = torch.nn.ModuleList(
            GINEConv(torch.nn.Sequential(
                torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                torch.nn.Linear(hidden, hidden)), train_eps=True)
            for _ in range(layers))
        self.head = torch.nn.Sequential(torch.nn.Linear(hidden, hidden),
                                        torch.nn.ReLU(),
                                        torch.nn.Linear(hidden, 1))
        # Start from predicting the mean: the summed read-out is large at
        # random initialisation and would dominate the first epochs.
        torch.nn.init.zeros_(self.head[-1].weight)
        torch.nn.init.zeros_(self.head[-1].bias)
        self.register_buffer("target_mean", torch.tensor(float(target_mean)))
        self.register_buffer("target_std", torch.tensor(float(target_std)))

    def forward(self, x, edge_index, edge_attr, batch, graphs_mask, y=None):
        h = self.atoms(x)
        e = self.bonds(edge_attr)
        for conv in self.convs:
            h = h + F.relu(conv(h, edge_index, e))
        # TPSA is a sum of atom contributions: read out per atom, then sum.
        normalised = global_add_pool(self.head(h), batch,
                                     size=self.num_graphs).squeeze(-1)
        prediction = normalised * self.target_std + self.target_mean
        if not self.training:
            return prediction
        mask = graphs_mask.to(normalised.dtype)
        target = (y.view(-1) - self.target_mean) / self.target_std
        loss = ((normalised - target) ** 2 * mask).sum() / mask.sum().clamp(1)
        return prediction, poptorch.identity_loss(loss, reduction="none")
