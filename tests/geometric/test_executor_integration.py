"""PyG batches from the fixed-size loaders run on the simulated IPU: the
PyG argument parser lets ``Batch`` objects be model inputs, and a combined
batch of D mini-batches trains exactly like D eager steps."""
import copy

import torch
import torch.nn.functional as F
from torch_geometric.nn import GINConv, global_add_pool

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric.datasets import SyntheticMolecules
from poptorch_geometric.pyg_dataloader import \
    FixedSizeDataLoader as TorchFixedSizeDataLoader

NUM_GRAPHS = 8


class BatchModel(torch.nn.Module):
    """Takes a whole PyG batch; padding graphs are masked out of the loss."""

    def __init__(self):
        super().__init__()
        self.conv = GINConv(torch.nn.Sequential(
            torch.nn.Linear(9, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16)))
        self.head = torch.nn.Linear(16, 1)

    def forward(self, data):
        h = self.conv(data.x.float() / 10, data.edge_index).relu()
        out = self.head(global_add_pool(h, data.batch, size=NUM_GRAPHS))
        mask = data.graphs_mask.float().unsqueeze(-1)
        loss = (F.mse_loss(out, data.y / 100, reduction="none") * mask).sum() \
            / mask.sum()
        return out, poptorch.identity_loss(loss, reduction="none")


def test_combined_pyg_batches_train_like_sequential_eager_steps():
    torch.manual_seed(0)
    dataset = SyntheticMolecules(64, seed=1)
    sizes = pyg_ipu.FixedSizeOptions.from_dataset(dataset, NUM_GRAPHS)
    model = BatchModel()
    reference = copy.deepcopy(model)
    opts = poptorch.Options().deviceIterations(2)
    loader = pyg_ipu.FixedSizeDataLoader(dataset, batch_size=NUM_GRAPHS,
                                         fixed_size_options=sizes,
                                         options=opts)
    ipu_model = poptorch.trainingModel(
        model, opts, torch.optim.SGD(model.parameters(), lr=0.01))
    ref_loader = TorchFixedSizeDataLoader(dataset, batch_size=NUM_GRAPHS,
                                          fixed_size_options=sizes)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01)

    ref_batches = iter(ref_loader)
    # The traced graph run op by op matches eager to float32 rounding; a
    # compiled one (POPTORCH_SIM_BACKEND=compile) sums in fused kernels, in
    # another order, and drifts by about 1e-5 over the epoch.
    rtol = 1e-5 if opts.Simulator.execution_backend == "interpret" else 1e-4
    calls = 0
    for combined in loader:
        out, loss = ipu_model(combined)
        assert out.shape == (NUM_GRAPHS, 1)  # Final: the last mini-batch
        for _ in range(2):
            batch = next(ref_batches)
            ref_opt.zero_grad()
            ref_out, ref_loss = reference(batch)
            ref_loss.backward()
            ref_opt.step()
        torch.testing.assert_close(loss, ref_loss.detach(), rtol=rtol,
                                   atol=1e-6)
        torch.testing.assert_close(out, ref_out.detach(), rtol=rtol,
                                   atol=1e-6)
        calls += 1
    assert calls == len(loader) > 1
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=rtol, atol=1e-6)


def test_inference_returns_pyg_batches():
    """Outputs of a custom type are rebuilt with the same parser."""
    class Double(torch.nn.Module):
        def forward(self, data):
            data.x = data.x * 2
            return data

    dataset = SyntheticMolecules(16, seed=2)
    sizes = pyg_ipu.FixedSizeOptions.from_dataset(dataset, 4)
    batch = next(iter(pyg_ipu.FixedSizeDataLoader(
        dataset, batch_size=4, fixed_size_options=sizes)))
    out = poptorch.inferenceModel(Double())(batch)
    assert type(out) is type(batch)
    torch.testing.assert_close(out.x, (batch.x * 2).to(torch.int32))
    torch.testing.assert_close(out.edge_index, batch.edge_index.int())
