"""GIN graph classification, plain PyG (the structure of PyG's
examples/mutag_gin.py), on the NCI molecules that ship with RDKit: is a
molecule's polar surface area above the median?

The unconverted script: examples/pyg/gin.py is the same script converted to
the simulated IPU.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from torch_geometric.loader import DataLoader
from torch_geometric.nn import MLP, GINConv, global_add_pool

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent if HERE.name == "reference" else HERE))
from _pyg_common import molecules, parse_args, train_epochs  # noqa: E402

args = parse_args(epochs=20, batch_size=128, hidden_channels=32,
                  num_layers=5, lr=0.01, dropout=0.5)

# --- data loading ---
dataset, train_dataset, test_dataset = molecules(args)
train_loader = DataLoader(train_dataset, args.batch_size, shuffle=True)
test_loader = DataLoader(test_dataset, args.batch_size)
# --- end of data loading ---


class Net(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers):
        super().__init__()

        self.convs = torch.nn.ModuleList()
        for _ in range(num_layers):
            mlp = MLP([in_channels, hidden_channels, hidden_channels])
            self.convs.append(GINConv(nn=mlp, train_eps=False))
            in_channels = hidden_channels

        self.mlp = MLP([hidden_channels, hidden_channels, out_channels],
                       norm=None, dropout=args.dropout)

    def forward(self, x, edge_index, batch, batch_size):
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        x = global_add_pool(x, batch, batch_size)
        return self.mlp(x)


model = Net(dataset.num_features, args.hidden_channels, 2, args.num_layers)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)


def train():
    model.train()

    total_loss = 0
    for data in train_loader:
        optimizer.zero_grad()
        out = model(data.x, data.edge_index, data.batch, data.batch_size)
        loss = F.cross_entropy(out, data.y)
        loss.backward()
        optimizer.step()
        total_loss += float(loss) * data.num_graphs
    return total_loss / len(train_loader.dataset)


@torch.no_grad()
def test(loader):
    model.eval()

    total_correct = 0
    for data in loader:
        out = model(data.x, data.edge_index, data.batch, data.batch_size)
        pred = out.argmax(dim=-1)
        total_correct += int((pred == data.y).sum())
    return total_correct / len(loader.dataset)


train_epochs(args.epochs, train, lambda: dict(
    Train=test(train_loader), Test=test(test_loader)))
