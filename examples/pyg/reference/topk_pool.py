"""Graph classification with TopKPooling, plain PyG: PyG's
examples/proteins_topk_pool.py (GraphConv, TopKPooling with ratio 0.8 and
global max + mean pooling readouts after every layer, summed) on the NCI
molecules that ship with RDKit (is a molecule's polar surface area above the
median?).

The unconverted script: examples/pyg/topk_pool.py is the same script
converted to the simulated IPU.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from torch_geometric.loader import DataLoader
from torch_geometric.nn import GraphConv, TopKPooling
from torch_geometric.nn import global_max_pool as gmp
from torch_geometric.nn import global_mean_pool as gap

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent if HERE.name == "reference" else HERE))
from _pyg_common import molecules, parse_args, train_epochs  # noqa: E402

args = parse_args(epochs=20, batch_size=60, hidden_channels=128, lr=0.0005,
                  dropout=0.5, ratio=0.8)

# --- data loading ---
dataset, train_dataset, test_dataset = molecules(args)
train_loader = DataLoader(train_dataset, args.batch_size, shuffle=True)
test_loader = DataLoader(test_dataset, args.batch_size)
# --- end of data loading ---


class Net(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.convs = torch.nn.ModuleList([
            GraphConv(in_channels, hidden_channels),
            GraphConv(hidden_channels, hidden_channels),
            GraphConv(hidden_channels, hidden_channels),
        ])
        self.pools = torch.nn.ModuleList([
            TopKPooling(hidden_channels, ratio=args.ratio)
            for _ in range(3)])
        self.lin1 = torch.nn.Linear(2 * hidden_channels, hidden_channels)
        self.lin2 = torch.nn.Linear(hidden_channels, hidden_channels // 2)
        self.lin3 = torch.nn.Linear(hidden_channels // 2, out_channels)

    def forward(self, data):
        x, edge_index, batch = data.x, data.edge_index, data.batch

        readout = 0
        for conv, pool in zip(self.convs, self.pools):
            x = F.relu(conv(x, edge_index))
            x, edge_index, _, batch, _, _ = pool(x, edge_index, None, batch)
            readout = readout + torch.cat([gmp(x, batch), gap(x, batch)], dim=1)

        x = F.relu(self.lin1(readout))
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = F.relu(self.lin2(x))
        x = F.log_softmax(self.lin3(x), dim=-1)
        return x


model = Net(dataset.num_features, args.hidden_channels, 2)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)


def train():
    model.train()

    loss_all = 0
    for data in train_loader:
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, data.y)
        loss.backward()
        loss_all += data.num_graphs * loss.item()
        optimizer.step()
    return loss_all / len(train_loader.dataset)


@torch.no_grad()
def test(loader):
    model.eval()

    correct = 0
    for data in loader:
        pred = model(data).max(dim=1)[1]
        correct += pred.eq(data.y).sum().item()
    return correct / len(loader.dataset)


train_epochs(args.epochs, train, lambda: dict(
    Train=test(train_loader), Test=test(test_loader)))
