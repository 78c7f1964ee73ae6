"""GCN on Cora, plain PyG (the structure of PyG's examples/gcn.py).

The unconverted script: examples/pyg/gcn.py is the same script converted to
the simulated IPU.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCNConv

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent if HERE.name == "reference" else HERE))
from _pyg_common import (data_root, mask_accuracies, parse_args,  # noqa: E402
                         train_epochs)

args = parse_args(epochs=200, hidden_channels=16, lr=0.01, dropout=0.5)

# --- data loading ---
dataset = Planetoid(data_root(args), 'Cora', transform=T.NormalizeFeatures())
data = dataset[0]
# --- end of data loading ---


class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, out_channels)

    def forward(self, x, edge_index, edge_weight=None):
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = self.conv1(x, edge_index, edge_weight).relu()
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = self.conv2(x, edge_index, edge_weight)
        return x


model = GCN(dataset.num_features, args.hidden_channels, dataset.num_classes)
optimizer = torch.optim.Adam([
    dict(params=model.conv1.parameters(), weight_decay=5e-4),
    dict(params=model.conv2.parameters(), weight_decay=0)
], lr=args.lr)  # Only perform weight-decay on first convolution.


def train():
    model.train()
    optimizer.zero_grad()
    out = model(data.x, data.edge_index, data.edge_attr)
    loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
    loss.backward()
    optimizer.step()
    return float(loss)


@torch.no_grad()
def test():
    model.eval()
    pred = model(data.x, data.edge_index, data.edge_attr).argmax(dim=-1)
    return mask_accuracies(pred, data)


# Test is reported at the epoch of the best Val.
train_epochs(args.epochs, train, test, select=('Val', 'Test'))
