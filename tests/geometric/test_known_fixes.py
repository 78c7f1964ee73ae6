"""IPU-rule errors inside PyG code show the library frame below the user's
line and, for known cases, the fix; applying the fix gives PyG's result."""
import os

import pytest
import torch
import torch_geometric
from torch_geometric.nn import (GATConv, GCNConv, SAGPooling, TopKPooling,
                                global_mean_pool)
from torch_geometric.utils import add_self_loops

import poptorch
from poptorch_geometric._known_fixes import KNOWN_FIXES

X = torch.randn(6, 4)
EDGE_INDEX = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
BATCH = torch.tensor([0, 0, 0, 1, 1, 1])


class Layer(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, edge_index):
        return self.layer(x, edge_index)  # USER-LINE


class Pool(torch.nn.Module):
    def __init__(self, size=None):
        super().__init__()
        self.size = size

    def forward(self, x, batch):
        return global_mean_pool(x, batch, size=self.size)  # USER-LINE


class Select(torch.nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.pool = pool

    def forward(self, x, edge_index, batch):
        return self.pool(x, edge_index, batch=batch)[0]  # USER-LINE


def _error(model, *inputs):
    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(model.eval())(*inputs)
    return str(info.value)


def _assert_points_at(message, library_file, fix_words):
    assert "# USER-LINE" in message and __file__ in message
    assert "in library code called from that line" in message
    assert library_file in message.replace(os.sep, "/")
    assert "Known fix:" in message and fix_words in message


@pytest.mark.parametrize("layer_class, file", [
    (GCNConv, "torch_geometric/nn/conv/gcn_conv.py"),
    (GATConv, "torch_geometric/nn/conv/gat_conv.py")])
def test_self_loops_inside_the_layer(layer_class, file):
    torch.manual_seed(0)
    layer = layer_class(4, 3)
    expected = layer(X, EDGE_INDEX)  # eager PyG, self-loops added inside
    try:
        out = poptorch.inferenceModel(Layer(layer).eval())(X, EDGE_INDEX)
    except poptorch.Error as error:
        _assert_points_at(str(error), file, "add_self_loops=False")
    else:  # an override made the layer traceable as written
        torch.testing.assert_close(out, expected)
        return
    # The fix: self-loops added once in the data, none in the layer.
    fixed = layer_class(4, 3, add_self_loops=False)
    fixed.load_state_dict(layer.state_dict())
    looped, _ = add_self_loops(EDGE_INDEX, num_nodes=6)
    out = poptorch.inferenceModel(Layer(fixed).eval())(X, looped)
    torch.testing.assert_close(out, expected)


def test_global_pooling_without_size():
    message = _error(Pool(), X, BATCH)
    _assert_points_at(message, "torch_geometric/nn/pool/glob.py", "size=")
    assert "torch_geometric/utils/_scatter.py" in message.replace(os.sep, "/")
    out = poptorch.inferenceModel(Pool(size=2).eval())(X, BATCH)
    torch.testing.assert_close(out, global_mean_pool(X, BATCH))


@pytest.mark.parametrize("pool_class", [TopKPooling, SAGPooling])
def test_node_selection_pooling_needs_no_fix_any_more(pool_class):
    """It had a known fix; now it pools in fixed shapes while traced, and
    its used slots hold PyG's result."""
    torch.manual_seed(0)
    model = Select(pool_class(4)).eval()
    expected = model(X, EDGE_INDEX, BATCH)
    out = poptorch.inferenceModel(model)(X, EDGE_INDEX, BATCH)
    torch.testing.assert_close(out[:expected.shape[0]], expected)
    assert not any("pool/topk_pool" in row[0] or "pool/sag_pool" in row[0]
                   for row in KNOWN_FIXES)


def test_every_row_names_an_existing_pyg_file():
    """A PyG refactor that moves a file would silently disable its row."""
    root = os.path.dirname(os.path.dirname(torch_geometric.__file__))
    for fragment, _, fix in KNOWN_FIXES:
        assert os.path.exists(os.path.join(root, fragment)), fragment
        assert fix.endswith("."), fix


def test_errors_in_the_users_own_code_show_no_library_frame():
    class Own(torch.nn.Module):
        def forward(self, x):
            return x[x > 0]

    message = _error(Own(), X)
    assert "return x[x > 0]" in message
    assert "library code" not in message and "Known fix" not in message
