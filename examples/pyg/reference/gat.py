"""GAT on Cora, plain PyG (the structure of PyG's examples/gat.py).

The unconverted script: examples/pyg/gat.py is the same script converted to
the simulated IPU.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GATConv

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent if HERE.name == "reference" else HERE))
from _pyg_common import (data_root, mask_accuracies, parse_args,  # noqa: E402
                         train_epochs)

args = parse_args(epochs=200, hidden_channels=8, heads=8, lr=0.005,
                  dropout=0.6)

# --- data loading ---
dataset = Planetoid(data_root(args), 'Cora', transform=T.NormalizeFeatures())
data = dataset[0]
# --- end of data loading ---


class GAT(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, heads):
        super().__init__()
        self.conv1 = GATConv(in_channels, hidden_channels, heads, dropout=args.dropout)
        # On the Pubmed dataset, use `heads` output heads in `conv2`.
        self.conv2 = GATConv(hidden_channels * heads, out_channels, heads=1,
                             concat=False, dropout=args.dropout)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = self.conv2(x, edge_index)
        return x


model = GAT(dataset.num_features, args.hidden_channels, dataset.num_classes,
            args.heads)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)


def train():
    model.train()
    optimizer.zero_grad()
    out = model(data.x, data.edge_index)
    loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
    loss.backward()
    optimizer.step()
    return float(loss)


@torch.no_grad()
def test():
    model.eval()
    pred = model(data.x, data.edge_index).argmax(dim=-1)
    return mask_accuracies(pred, data)


# Test is reported at the epoch of the best Val.
train_epochs(args.epochs, train, test, select=('Val', 'Test'))
