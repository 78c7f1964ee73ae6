"""Small models shared by the executor and tracing tests.

A test builds one of these rather than its own copy, with the sizes and
flags it needs; a test keeps its own model only where the model itself is
what it tests (an ignored parameter, an in-place edit, a returned weight).
"""
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv, GINConv, global_add_pool

import poptorch


class LinearMSE(torch.nn.Module):
    """(x, y) -> (out, mse loss) through one ``Linear`` named ``fc``.

    >>> LinearMSE(3, 2)(torch.zeros(4, 3), torch.zeros(4, 2))[0].shape
    torch.Size([4, 2])
    """

    def __init__(self, in_features: int = 3, out_features: int = 2,
                 bias: bool = True) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x, y):
        out = self.fc(x)
        return out, F.mse_loss(out, y)


class SumLoss(torch.nn.Module):
    """x -> (out, the unreduced identity loss ``out.sum()``) through one
    ``Linear`` named ``linear``: the smallest model a training wrapper
    accepts, for tests about the wrapper rather than the arithmetic."""

    def __init__(self, in_features: int = 4, out_features: int = 4,
                 bias: bool = True) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x):
        out = self.linear(x)
        return out, poptorch.identity_loss(out.sum(), reduction="none")


class MLP(torch.nn.Module):
    """x -> (out, loss): Linear ``fc1``, [BatchNorm ``norm``], ReLU, Linear
    ``fc2``; the loss is ``loss(out, y)``, mean squared error by default.

    ``batch_norm=True`` adds running statistics (buffers a training step
    writes); the layers are created in the order fc1, norm, fc2, so a given
    seed draws the same weights with or without it.
    """

    def __init__(self, in_features: int = 4, hidden: int = 8,
                 out_features: int = 3, batch_norm: bool = False,
                 loss: Callable[..., torch.Tensor] = F.mse_loss) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(in_features, hidden)
        self.norm: Optional[torch.nn.Module] = \
            torch.nn.BatchNorm1d(hidden) if batch_norm else None
        self.fc2 = torch.nn.Linear(hidden, out_features)
        self.loss = loss

    def forward(self, x, y):
        h = self.fc1(x)
        if self.norm is not None:
            h = self.norm(h)
        out = self.fc2(torch.relu(h))
        return out, self.loss(out, y)


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
