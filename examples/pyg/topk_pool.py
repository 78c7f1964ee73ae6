"""Graph classification with TopKPooling on the simulated IPU: PyG's
examples/proteins_topk_pool.py (GraphConv, TopKPooling with ratio 0.8 and
global max + mean pooling readouts after every layer, summed), converted, on
the NCI molecules that ship with RDKit (is a molecule's polar surface area
above the median?).

TopKPooling keeps a data-dependent number of nodes per graph; while the
model is traced it keeps a fixed number of node slots instead, the unused
ones in graph -1, which the global poolings leave out (docs/geometric.rst:
"Node selection"), so the layers stay as PyG writes them.

Run with --cpu-reference to also run the unconverted script,
examples/pyg/reference/topk_pool.py, and compare.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import poptorch
import poptorch_geometric as pyg_ipu
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
# Fixed-size batches: batch_size real graphs plus one padding graph each,
# with the same sizes for every loader, so that one model serves them all.
sizes = pyg_ipu.FixedSizeOptions.from_dataset(dataset, args.batch_size + 1)
train_loader = pyg_ipu.FixedSizeDataLoader(
    train_dataset, args.batch_size + 1, shuffle=True, drop_last=False,
    fixed_size_options=sizes)
test_loader = pyg_ipu.FixedSizeDataLoader(
    test_dataset, args.batch_size + 1, drop_last=False,
    fixed_size_options=sizes)
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
            readout = readout + torch.cat([gmp(x, batch, data.num_graphs), gap(x, batch, data.num_graphs)], dim=1)

        x = F.relu(self.lin1(readout))
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = F.relu(self.lin2(x))
        x = F.log_softmax(self.lin3(x), dim=-1)
        return x


model = Net(dataset.num_features, args.hidden_channels, 2)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
train_model = poptorch.trainingModel(pyg_ipu.with_loss(model, F.nll_loss), optimizer=optimizer)
test_model = poptorch.inferenceModel(model.eval())


def train():
    model.train()

    loss_all = 0
    for data in train_loader:
        output, loss = train_model(data)
        loss_all += pyg_ipu.num_real_graphs(data) * loss.item()
    return loss_all / len(train_loader.dataset)


@torch.no_grad()
def test(loader):
    model.eval()

    correct = 0
    for data in loader:
        pred = test_model(data).max(dim=1)[1]
        correct += pyg_ipu.count_real(pred.eq(data.y), data)
    return correct / len(loader.dataset)


train_epochs(args.epochs, train, lambda: dict(
    Train=test(train_loader), Test=test(test_loader)))
