"""Norms inside traced models take their statistics over the real rows of a
fixed-size batch. Every reference is eager PyTorch / PyG on the unpadded
``Batch.from_data_list(graphs)`` of the same graphs: forward outputs,
gradients (one SGD step with learning rate 1), running statistics and
``num_batches_tracked``, in train and eval mode, then a second batch of
other graphs through the same traced model.

The graphs are realistic: self-loops, duplicate edges, an isolated node in
every graph of more than one node, one-node graphs (with and without a
self-loop), and padding nodes whose features are not zero.
"""
import copy
from typing import Callable, List, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.nn import global_add_pool, models, norm as pyg_norm

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric import FixedSizeCollater, FixedSizeOptions

C = 5
SIZES = dict(num_nodes=26, num_edges=47, num_graphs=6)
#: Real graphs (node counts) of the two batches; 1 is a one-node graph.
NODES_A, NODES_B = (6, 1, 8), (4, 7, 1, 3, 2)


def _graph(num_nodes: int, gen: torch.Generator, loop: bool) -> Data:
    """Random edges among all nodes but the last (isolated when there are
    two or more), one of them repeated, and a self-loop on node 0."""
    linked = max(num_nodes - 1, 1)
    edges = torch.randint(0, linked, (2, 2 * linked), generator=gen)
    edges = torch.cat([edges, edges[:, :1]], dim=1)
    if loop:
        edges = torch.cat([edges, torch.zeros(2, 1, dtype=torch.long)], 1)
    return Data(x=torch.randn(num_nodes, C, generator=gen), edge_index=edges,
                y=torch.randint(0, 3, (1, ), generator=gen))


def _graphs(nodes: Tuple[int, ...], seed: int) -> List[Data]:
    gen = torch.Generator().manual_seed(seed)
    return [_graph(n, gen, loop=(i % 2 == 0)) for i, n in enumerate(nodes)]


def _collater(pad: float = 7.5, **sizes: int) -> FixedSizeCollater:
    opts = FixedSizeOptions(**{**SIZES, **sizes}, node_pad_value=pad)
    return FixedSizeCollater(opts, add_masks_to_batch=True)


def _pair(nodes: Tuple[int, ...], seed: int, collater=None):
    graphs = _graphs(nodes, seed)
    return Batch.from_data_list(graphs), (collater or _collater())(graphs)


class Net(torch.nn.Module):
    """A linear layer, the norm, and a loss weighing each output entry."""

    def __init__(self, layer: torch.nn.Module, call: Callable) -> None:
        super().__init__()
        self.pre = torch.nn.Linear(C, C)
        self.layer = layer
        self.call = call

    def forward(self, data, weight):
        out = self.call(self.layer, self.pre(data.x), data)
        return out, poptorch.identity_loss((out * weight).sum(),
                                           reduction="none")


def _whole(layer, h, data):
    return layer(h)


def _per_graph(layer, h, data):
    return layer(h, data.batch)


def _graph_rows(layer, h, data):
    return layer(global_add_pool(h, data.batch, size=data.num_graphs))


CASES = {
    "BatchNorm1d": (lambda: torch.nn.BatchNorm1d(C), _whole),
    "BatchNorm1d momentum=None": (
        lambda: torch.nn.BatchNorm1d(C, momentum=None), _whole),
    "BatchNorm1d over graphs": (lambda: torch.nn.BatchNorm1d(C), _graph_rows),
    "PyG BatchNorm": (lambda: pyg_norm.BatchNorm(C), _whole),
    "InstanceNorm": (lambda: pyg_norm.InstanceNorm(
        C, affine=True, track_running_stats=True), _whole),
    "InstanceNorm per graph": (lambda: pyg_norm.InstanceNorm(
        C, affine=True, track_running_stats=True), _per_graph),
    "LayerNorm": (lambda: pyg_norm.LayerNorm(C), _whole),
    "LayerNorm per graph": (lambda: pyg_norm.LayerNorm(C), _per_graph),
    "GraphNorm": (lambda: pyg_norm.GraphNorm(C), _whole),
    "GraphNorm per graph": (lambda: pyg_norm.GraphNorm(C), _per_graph),
    "PairNorm": (pyg_norm.PairNorm, _whole),
    "MeanSubtractionNorm": (pyg_norm.MeanSubtractionNorm, _whole),
    "GraphSizeNorm": (pyg_norm.GraphSizeNorm, _whole),
    "DiffGroupNorm": (lambda: pyg_norm.DiffGroupNorm(C, groups=2), _whole),
}


def _weight(out_rows: int, real_rows: int, seed: int) -> torch.Tensor:
    weight = torch.randn(out_rows, C, generator=torch.Generator().manual_seed(
        seed))
    weight[real_rows:] = 0
    return weight


def _eager_step(ref: Net, plain: Batch, weight: torch.Tensor):
    """Eager train-mode forward and backward, then the SGD step."""
    ref.train()
    ref.zero_grad()
    out, loss = ref(plain, weight)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in ref.named_parameters()
             if p.grad is not None}
    with torch.no_grad():
        for p in ref.parameters():
            if p.grad is not None:
                p -= p.grad
    return out.detach(), grads


def _close(actual, expected, what):
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5,
                               msg=lambda m: f"{what}: {m}")


def _check_step(training, model, ref, plain, padded, seed):
    rows_padded, rows_plain = _rows(model, padded), _rows(ref, plain)
    weight = _weight(rows_padded, rows_plain, seed)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out, _ = training(padded, weight)
    ref_out, grads = _eager_step(ref, plain, weight[:rows_plain])
    training.copyWeightsToHost()
    _close(out[:rows_plain], ref_out, "train-mode output")
    assert torch.isfinite(out).all(), "padding rows must stay finite"
    for name, param in model.named_parameters():
        _close(before[name] - param.detach(),
               grads.get(name, torch.zeros_like(param)), f"gradient of {name}")
    for (name, buf), (_, ref_buf) in zip(model.named_buffers(),
                                         ref.named_buffers()):
        _close(buf, ref_buf, f"buffer {name}")


def _rows(model: Net, data: Batch) -> int:
    return data.num_graphs if model.call is _graph_rows else data.num_nodes


@pytest.mark.parametrize("case", list(CASES))
def test_norm_equals_eager_on_the_unpadded_batch(case, options=None):
    build, call = CASES[case]
    model = Net(build(), call)
    ref = copy.deepcopy(model)
    training = poptorch.trainingModel(
        model, options, torch.optim.SGD(model.parameters(), lr=1.0))
    collater = _collater()
    for nodes, seed in ((NODES_A, 0), (NODES_B, 1)):
        plain, padded = _pair(nodes, seed, collater)
        _check_step(training, model, ref, plain, padded, seed)
    training.detachFromDevice()

    plain, padded = _pair(NODES_B, 2, collater)
    inference = poptorch.inferenceModel(copy.deepcopy(model).eval())
    weight = _weight(_rows(model, padded), _rows(ref, plain), 2)
    out, _ = inference(padded, weight)
    ref_out, _ = ref.eval()(plain, weight[:_rows(ref, plain)])
    _close(out[:_rows(ref, plain)], ref_out, "eval-mode output")


def test_norm_on_the_compile_backend():
    options = poptorch.Options()
    options.Simulator.backend("compile")
    test_norm_equals_eager_on_the_unpadded_batch("BatchNorm1d momentum=None",
                                                 options)


def test_instance_norm_running_stats_count_real_graphs_only():
    # PyG averages over every graph slot: each padding graph would pull the
    # stored mean towards zero.
    build, _ = CASES["InstanceNorm per graph"]
    model = Net(build(), lambda layer, h, d: layer(h, d.batch, d.num_graphs))
    ref = copy.deepcopy(model)
    training = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0))
    plain, padded = _pair(NODES_A, 0)
    _check_step(training, model, ref, plain, padded, 0)


class Classifier(torch.nn.Module):
    """``models.GIN`` (norms inside each GINConv's MLP, called without
    ``batch``, and after each conv) and a sum readout."""

    def __init__(self, norm: str) -> None:
        super().__init__()
        self.gin = models.GIN(C, 8, 2, 3, norm=norm,
                              norm_kwargs={"affine": True} if
                              norm == "instance_norm" else None)

    def forward(self, x, edge_index, batch, batch_size):
        return global_add_pool(self.gin(x, edge_index, batch=batch,
                                        batch_size=batch_size),
                               batch, size=batch_size)


def _gin_steps(norm: str, options=None):
    """Two training steps of GIN through ``with_loss`` on two batches of
    other graphs, against eager PyG on the unpadded batches."""
    model = Classifier(norm)
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    training = poptorch.trainingModel(
        pyg_ipu.with_loss(model, F.cross_entropy), options,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    collater = _collater()
    for nodes, seed in ((NODES_A, 0), (NODES_B, 1)):
        plain, padded = _pair(nodes, seed, collater)
        out, loss = training(padded)
        ref_opt.zero_grad()
        ref_out = ref(plain.x, plain.edge_index, plain.batch,
                      plain.num_graphs)
        ref_loss = F.cross_entropy(ref_out, plain.y)
        ref_loss.backward()
        ref_opt.step()
        _close(out[:plain.num_graphs], ref_out.detach(), f"{norm} output")
        _close(loss, ref_loss.detach(), f"{norm} loss")
    training.copyWeightsToHost()
    for (name, value), (_, expected) in zip(
            model.state_dict().items(), ref.state_dict().items()):
        _close(value, expected, f"{norm}: {name} after two steps")
    return training


@pytest.mark.parametrize("norm", ["batch_norm", "layer_norm",
                                  "instance_norm", "graph_norm"])
def test_gin_with_norm_trains_as_eager_pyg(norm):
    _gin_steps(norm)


def test_gin_with_batch_norm_on_the_compile_backend():
    options = poptorch.Options()
    options.Simulator.backend("compile")
    training = _gin_steps("batch_norm", options)
    assert training.compilations() == 1


def _buffers(model):
    return {n: b.clone() for n, b in model.named_buffers()}


def test_a_padding_only_batch_leaves_running_stats_unchanged():
    model = Net(torch.nn.BatchNorm1d(C), _whole)
    training = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0))
    collater = _collater()
    graphs = _graphs(NODES_A, 0)
    training(collater(graphs), torch.zeros(SIZES["num_nodes"], C))
    training.copyWeightsToHost()
    before = _buffers(model)
    assert int(before["layer.num_batches_tracked"]) == 1
    out, _ = training(collater.padding_batch(graphs[0]),
                      torch.zeros(SIZES["num_nodes"], C))
    training.copyWeightsToHost()
    assert torch.isfinite(out).all()
    for name, value in _buffers(model).items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)


def test_a_padding_only_micro_batch_of_a_combined_batch_counts_nothing():
    # Gradient accumulation over [real, padding only]: the running
    # statistics are those of one eager step on the real graphs.
    model = Net(torch.nn.BatchNorm1d(C), _whole)
    ref = copy.deepcopy(model).train()
    options = poptorch.Options()
    options.Training.gradientAccumulation(2)
    training = poptorch.trainingModel(
        model, options, torch.optim.SGD(model.parameters(), lr=1.0))
    collater = _collater()
    graphs = _graphs(NODES_A, 0)
    combined = pyg_ipu.CombinedBatchingCollater(collater).concat(
        [collater(graphs), collater.padding_batch(graphs[0])])
    training(combined, torch.zeros(2 * SIZES["num_nodes"], C))
    training.copyWeightsToHost()
    ref(Batch.from_data_list(graphs), torch.zeros(1))
    for (name, value), (_, expected) in zip(model.named_buffers(),
                                            ref.named_buffers()):
        _close(value, expected, name)


# --- Where the masks cannot be known -----------------------------------------

class TensorsNet(torch.nn.Module):
    """Takes the batch's tensors, not the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(C, C),
                                       torch.nn.BatchNorm1d(C))

    def forward(self, x, batch):
        out = global_add_pool(self.mlp(x), batch, size=SIZES["num_graphs"])
        return out, poptorch.identity_loss(out.sum(), reduction="none")


def _train(model, *inputs):
    return poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0))(
            *inputs)


def test_tensors_of_a_fixed_size_batch_fail_at_trace_time():
    _, padded = _pair(NODES_A, 0)
    with pytest.raises(poptorch.Error) as info:
        _train(TensorsNet(), padded.x, padded.batch)
    message = str(info.value)
    assert "BatchNorm1d `mlp.1`" in message
    assert "with_loss" in message and "the batch itself" in message


def test_tensors_from_a_worker_process_loader_fail_at_trace_time():
    graphs = _graphs(NODES_A, 0) * 2
    loader = pyg_ipu.FixedSizeDataLoader(
        graphs, batch_size=SIZES["num_graphs"], num_workers=1,
        fixed_size_options=FixedSizeOptions(**SIZES))
    batch = next(iter(loader))
    with pytest.raises(poptorch.Error, match="BatchNorm1d `mlp.1`"):
        _train(TensorsNet(), batch.x, batch.batch)


def test_a_batch_without_masks_fails_at_trace_time():
    opts = FixedSizeOptions(**SIZES)
    padded = FixedSizeCollater(opts)(_graphs(NODES_A, 0))
    model = Net(torch.nn.BatchNorm1d(C), _whole)
    with pytest.raises(poptorch.Error, match="add_pad_masks=True"):
        _train(model, padded, torch.zeros(SIZES["num_nodes"], C))


def test_plain_tensors_and_eval_mode_running_stats_are_plain_torch():
    # Tensors that no fixed-size loader made are plain data; in eval mode
    # with running statistics BatchNorm needs no mask at all.
    _, padded = _pair(NODES_A, 0)
    model = TensorsNet()
    ref = copy.deepcopy(model).train()
    x, batch = padded.x.clone(), padded.batch.clone()
    out, _ = _train(model, x, batch)
    _close(out, ref(x, batch)[0].detach(), "plain data")
    model.eval()
    out, _ = poptorch.inferenceModel(model)(padded.x, padded.batch)
    _close(out, model(padded.x, padded.batch)[0], "eval mode")


def test_eager_calls_are_unchanged():
    from poptorch_geometric import _TorchGeometricOpsSubstitutionManager
    _, padded = _pair(NODES_A, 0)
    layer = torch.nn.BatchNorm1d(C)
    expected = F.batch_norm(padded.x, None, None, layer.weight, layer.bias,
                            training=True)
    with _TorchGeometricOpsSubstitutionManager():
        _close(copy.deepcopy(layer)(padded.x), expected, "eager, substituted")
    _close(layer(padded.x), expected, "eager")


def test_as_many_node_slots_as_graph_slots_is_ambiguous():
    collater = _collater(num_nodes=SIZES["num_graphs"] * 4,
                         num_graphs=SIZES["num_graphs"] * 4)
    padded = collater(_graphs(NODES_A, 0))
    model = Net(pyg_norm.LayerNorm(C), _whole)
    with pytest.raises(poptorch.Error) as info:
        _train(model, padded, torch.zeros(padded.num_nodes, C))
    message = str(info.value)
    assert "LayerNorm `layer`" in message
    assert "node slots" in message and "graph slots" in message
    assert "num_nodes, num_edges and num_graphs differ" in message


def _side_rows(layer, h, data):
    return layer(h[:4])


def test_rows_of_no_mask_fail_unless_marked_all_real():
    plain, padded = _pair(NODES_A, 0)
    model = Net(torch.nn.BatchNorm1d(C), _side_rows)
    ref = copy.deepcopy(model).train()
    with pytest.raises(poptorch.Error, match="all_rows_real"):
        _train(copy.deepcopy(model), padded, torch.zeros(4, C))
    pyg_ipu.all_rows_real(model.layer)
    out, _ = _train(model, padded, torch.zeros(4, C))
    _close(out, ref(padded, torch.zeros(4, C))[0].detach(), "all rows real")
