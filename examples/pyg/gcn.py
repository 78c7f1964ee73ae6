"""GCN on Cora on the simulated IPU: PyG's examples/gcn.py, converted.

Run with --cpu-reference to also run the unconverted script,
examples/pyg/reference/gcn.py, and compare.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import poptorch
import poptorch_geometric as pyg_ipu
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCNConv

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent if HERE.name == "reference" else HERE))
from _pyg_common import (data_root, mask_accuracies, parse_args,  # noqa: E402
                         train_epochs)

args = parse_args(epochs=200, hidden_channels=16, lr=0.01, dropout=0.5)

# --- data loading ---
dataset = Planetoid(data_root(args), 'Cora',
                    transform=T.Compose([T.AddSelfLoops(), T.NormalizeFeatures()]))
data = dataset[0]
# --- end of data loading ---


class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels, add_self_loops=False)
        self.conv2 = GCNConv(hidden_channels, out_channels, add_self_loops=False)

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
train_model = poptorch.trainingModel(pyg_ipu.with_loss(model, F.cross_entropy, mask='train_mask'), optimizer=optimizer)
test_model = poptorch.inferenceModel(model.eval())


def train():
    model.train()
    out, loss = train_model(data)
    return float(loss)


@torch.no_grad()
def test():
    model.eval()
    pred = test_model(data.x, data.edge_index, data.edge_attr).argmax(dim=-1)
    return mask_accuracies(pred, data)


# Test is reported at the epoch of the best Val.
train_epochs(args.epochs, train, test, select=('Val', 'Test'))
