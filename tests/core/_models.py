"""Small models shared by the executor and tracing tests."""
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv, GINConv, global_add_pool


class MLP(torch.nn.Module):
    """x -> (out, mse loss)."""

    def __init__(self, in_features=4, hidden=8, out_features=3):
        super().__init__()
        self.fc1 = torch.nn.Linear(in_features, hidden)
        self.fc2 = torch.nn.Linear(hidden, out_features)

    def forward(self, x, y):
        out = self.fc2(torch.relu(self.fc1(x)))
        return out, F.mse_loss(out, y)


class GIN(torch.nn.Module):
    """Graph regression on fixed-size batches: (out, loss)."""

    def __init__(self, in_channels=5, hidden=16, num_graphs=4, batch_norm=False):
        super().__init__()
        norm = [torch.nn.BatchNorm1d(hidden)] if batch_norm else []
        self.conv1 = GINConv(torch.nn.Sequential(
            torch.nn.Linear(in_channels, hidden), *norm, torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden)))
        self.conv2 = GINConv(torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden)))
        self.head = torch.nn.Linear(hidden, 1)
        self.num_graphs = num_graphs

    def forward(self, x, edge_index, batch, y):
        h = self.conv1(x, edge_index).relu()
        h = self.conv2(h, edge_index)
        out = self.head(global_add_pool(h, batch, size=self.num_graphs))
        return out, F.mse_loss(out, y)


class GCN(torch.nn.Module):
    def __init__(self, in_channels=5, hidden=16, classes=3):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden, add_self_loops=False)
        self.conv2 = GCNConv(hidden, classes, add_self_loops=False)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def graph_batch(num_graphs=4, nodes_per_graph=6, edges_per_graph=10,
                in_channels=5, batches=1, generator=None):
    """``batches`` fixed-size graph batches concatenated along dim 0, laid
    out as PopTorch expects: edge indices local to each batch."""
    g = generator
    xs, eis, bs, ys = [], [], [], []
    n = num_graphs * nodes_per_graph
    for _ in range(batches):
        xs.append(torch.randn(n, in_channels, generator=g))
        offsets = torch.arange(num_graphs).repeat_interleave(edges_per_graph) \
            * nodes_per_graph
        ei = torch.randint(0, nodes_per_graph, (2, num_graphs * edges_per_graph),
                           generator=g) + offsets
        eis.append(ei)
        bs.append(torch.arange(num_graphs).repeat_interleave(nodes_per_graph))
        ys.append(torch.randn(num_graphs, 1, generator=g))
    # edge_index micro-batches are stacked along dim 0: [2 * batches, E]
    return (torch.cat(xs), torch.cat(eis), torch.cat(bs), torch.cat(ys))
