"""Loaders keep every graph: the last incomplete batch is padded, a split
smaller than one batch gives one padded batch, and what drop_last drops is
logged. Graphs carry their index as label, so which graphs a loader yields
is read back from the real (masked) entries."""
import logging

import pytest
import torch
from torch_geometric.data import Batch
from torch_geometric.nn import global_add_pool

import poptorch
from poptorch_geometric import (FixedSizeDataLoader, FixedSizeOptions,
                                FixedSizeStrategy)
from poptorch_geometric import pyg_dataloader

from ._graphs import graph

PAD_TO_MAX, STREAM_PACK = FixedSizeStrategy.PadToMax, \
    FixedSizeStrategy.StreamPack


def labelled_graphs(n):
    return [graph(2 + i % 5, 3 + i % 4, seed=i, edge_dim=None,
                  y=torch.tensor([float(i)])) for i in range(n)]


def seen_labels(batches):
    labels = []
    for batch in batches:
        labels += batch.y[batch.graphs_mask].long().tolist()
    return sorted(labels)


def shapes(batch):
    return {k: tuple(v.shape) for k, v in batch.items()
            if isinstance(v, torch.Tensor)}


def loader(dataset, strategy, di=1, **kwargs):
    options = FixedSizeOptions.from_dataset(dataset, 8)
    return FixedSizeDataLoader(
        dataset, batch_size=8, fixed_size_options=options,
        fixed_size_strategy=strategy,
        options=poptorch.Options().deviceIterations(di), **kwargs)


@pytest.mark.parametrize("strategy", [PAD_TO_MAX, STREAM_PACK])
@pytest.mark.parametrize("di", [1, 4])
def test_a_19_graph_split_gives_one_padded_batch(strategy, di):
    dataset = labelled_graphs(19)
    test_loader = FixedSizeDataLoader(
        dataset, batch_size=32 if strategy is PAD_TO_MAX else 8,
        fixed_size_strategy=strategy,
        options=poptorch.Options().deviceIterations(di))
    if strategy is PAD_TO_MAX or di > 1:  # fewer graphs than one step
        batches = list(test_loader)
        assert len(batches) == len(test_loader) == 1
    batches = list(test_loader)
    assert seen_labels(batches) == list(range(19))
    opts = test_loader.fixed_size_options
    assert batches[0].graphs_mask.shape == (di * opts.num_graphs,)
    assert batches[0].x.shape[0] == di * opts.num_nodes


@pytest.mark.parametrize("strategy", [PAD_TO_MAX, STREAM_PACK])
def test_drop_last_false_pads_the_last_combined_batch(strategy):
    dataset = labelled_graphs(45)
    batches = list(loader(dataset, strategy, di=3, drop_last=False))
    assert seen_labels(batches) == list(range(45))
    assert len({tuple(sorted(shapes(b).items())) for b in batches}) == 1
    last = batches[-1]
    # The last step ends with padding-only mini-batches: nothing real in
    # the last mini-batch's slots.
    per_step = last.graphs_mask.shape[0] // 3
    assert not last.graphs_mask[-per_step:].any()
    assert not last.nodes_mask[-(last.nodes_mask.shape[0] // 3):].any()


@pytest.mark.parametrize("strategy", [PAD_TO_MAX, STREAM_PACK])
def test_drop_last_logs_the_graphs_each_epoch_drops(strategy, poptorch_log):
    poptorch_log.set_level(logging.INFO, logger="poptorch::python")
    dataset = labelled_graphs(45)
    train_loader = loader(dataset, strategy, di=3)
    for _ in range(2):  # epochs
        poptorch_log.clear()
        dropped = 45 - len(seen_labels(list(train_loader)))
        assert dropped > 0
        messages = [r.getMessage() for r in poptorch_log.records
                    if "drops" in r.getMessage()]
        assert len(messages) == 1
        assert f"drops {dropped} graph(s)" in messages[0]


def test_the_torch_side_loader_keeps_every_graph():
    dataset = labelled_graphs(19)
    batches = list(pyg_dataloader.FixedSizeDataLoader(dataset, batch_size=8))
    assert len(batches) == 3  # 7 + 7 + 5 real graphs
    assert seen_labels(batches) == list(range(19))
    assert len({tuple(sorted(shapes(b).items())) for b in batches}) == 1


def test_padded_steps_run_and_padding_is_inert():
    """A padded last step runs through one compiled model; the real
    graphs' outputs equal PyG on the unpadded graphs."""

    class SumPool(torch.nn.Module):
        def forward(self, x, batch, graphs_mask):
            pooled = global_add_pool(x, batch, size=graphs_mask.shape[0])
            return pooled.sum(-1), graphs_mask

    dataset = labelled_graphs(45)
    test_loader = loader(dataset, PAD_TO_MAX, di=3, drop_last=False)
    model = poptorch.inferenceModel(
        SumPool(), poptorch.Options().deviceIterations(3))
    values = []
    for batch in test_loader:
        # Mini-batch-local ``batch`` vectors, as each device iteration sees.
        out, mask = model(batch.x, batch.batch, batch.graphs_mask)
        values.append(out[mask])
    expected = global_add_pool(
        Batch.from_data_list(dataset).x,
        Batch.from_data_list(dataset).batch).sum(-1)
    # Each call is validated against the compiled input shapes: a short
    # last step would have raised.
    torch.testing.assert_close(torch.cat(values), expected)
