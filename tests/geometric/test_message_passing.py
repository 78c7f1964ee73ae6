"""IPU-friendly message passing: PyG layers on a padded fixed-size batch,
traced for the simulated IPU, give eager PyG's outputs and gradients on
the real nodes of the unpadded batch, and padding never reaches a real
node."""
import copy

import pytest
import torch

import poptorch
from poptorch_geometric._coverage import cases_conv, cases_other
from poptorch_geometric._coverage.data import make_batches, make_families
from poptorch_geometric._coverage.probe import Probe, run_case

CASES = {case.name: case for case in
         cases_conv.CONV_CASES + cases_other.MODEL_CASES +
         cases_other.AGGR_CASES + cases_other.NORM_CASES}

#: One layer per message-passing path the fixed-shape ops touch.
LAYERS = ["GCNConv", "ChebConv", "GATConv", "ClusterGCNConv", "MFConv",
          "RGCNConv", "FiLMConv", "GPSConv", "PNAConv", "HEATConv",
          "MedianAggregation", "InstanceNorm"]


@pytest.fixture(scope="module")
def pair():
    return make_batches(seed=0)


@pytest.mark.parametrize("name", LAYERS)
def test_real_entries_and_gradients_equal_eager_pyg(name):
    row = run_case(CASES[name], make_families(seed=0), compile_check=False)
    assert row.traces and row.forward and row.gradients, row.reason


def _scramble_padding(batch):
    """The batch with every padding node's and edge's values replaced."""
    batch = copy.copy(batch)
    gen = torch.Generator().manual_seed(7)
    pad_nodes, pad_edges = ~batch.nodes_mask, ~batch.edges_mask
    for key in ("x", "pos"):
        noise = 100 * torch.randn(batch[key].shape, generator=gen)
        batch[key] = torch.where(pad_nodes.unsqueeze(-1), noise, batch[key])
    noise = 100 * torch.randn(batch.edge_attr.shape, generator=gen)
    batch.edge_attr = torch.where(pad_edges.unsqueeze(-1), noise,
                                  batch.edge_attr)
    batch.edge_weight = torch.where(pad_edges, torch.rand(
        pad_edges.shape, generator=gen) + 1, batch.edge_weight)
    return batch


@pytest.mark.parametrize("name", ["GATConv", "ChebConv", "RGCNConv",
                                  "GPSConv", "PointTransformerConv"])
def test_padding_values_never_reach_real_nodes(name, pair):
    torch.manual_seed(0)
    probe = Probe(CASES[name]).eval()
    real = int(pair.padded.nodes_mask.sum())
    with torch.no_grad():
        width = probe.call(probe.layer, probe.pre(pair.plain.x),
                           pair.plain).shape[-1]
    weight = torch.zeros(pair.padded.num_nodes, width)
    model = poptorch.inferenceModel(probe)
    out, _ = model(pair.padded, weight)
    scrambled, _ = model(_scramble_padding(pair.padded), weight)
    assert not torch.equal(out[real:], scrambled[real:])
    torch.testing.assert_close(scrambled[:real], out[:real], rtol=1e-5,
                               atol=1e-6)
