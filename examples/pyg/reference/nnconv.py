"""NNConv + GRU + Set2Set regression, plain PyG (the structure of PyG's
examples/qm9_nn_conv.py), on the NCI molecules that ship with RDKit:
predict a molecule's (standardised) polar surface area.

The unconverted script: examples/pyg/nnconv.py is the same script converted
to the simulated IPU.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn import GRU, Linear, ReLU, Sequential

from torch_geometric.loader import DataLoader
from torch_geometric.nn import NNConv, Set2Set

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent if HERE.name == "reference" else HERE))
from _pyg_common import molecules, parse_args, train_epochs  # noqa: E402

args = parse_args(epochs=20, batch_size=128, dim=32, lr=0.001)

# --- data loading ---
dataset, train_dataset, test_dataset = molecules(args, task='regression')
train_loader = DataLoader(train_dataset, args.batch_size, shuffle=True)
test_loader = DataLoader(test_dataset, args.batch_size)
# --- end of data loading ---


class Net(torch.nn.Module):
    def __init__(self, num_features, edge_dim, dim):
        super().__init__()
        self.lin0 = torch.nn.Linear(num_features, dim)

        nn = Sequential(Linear(edge_dim, 128), ReLU(), Linear(128, dim * dim))
        self.conv = NNConv(dim, dim, nn, aggr='mean')
        self.gru = GRU(dim, dim)

        self.set2set = Set2Set(dim, processing_steps=3)
        self.lin1 = torch.nn.Linear(2 * dim, dim)
        self.lin2 = torch.nn.Linear(dim, 1)

    def forward(self, data):
        out = F.relu(self.lin0(data.x))
        h = out.unsqueeze(0)

        for i in range(3):
            m = F.relu(self.conv(out, data.edge_index, data.edge_attr))
            out, h = self.gru(m.unsqueeze(0), h)
            out = out.squeeze(0)

        out = self.set2set(out, data.batch)
        out = F.relu(self.lin1(out))
        out = self.lin2(out)
        return out.view(-1)


model = Net(dataset.num_features, dataset.num_edge_features, args.dim)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)


def train():
    model.train()
    loss_all = 0

    for data in train_loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(data), data.y)
        loss.backward()
        loss_all += loss.item() * data.num_graphs
        optimizer.step()
    return loss_all / len(train_loader.dataset)


@torch.no_grad()
def test(loader):
    model.eval()
    error = 0

    for data in loader:
        error += (model(data) - data.y).abs().sum().item()  # MAE
    return error / len(loader.dataset)


train_epochs(args.epochs, train, lambda: dict(Test_MAE=test(test_loader)))
