"""Refusals of PopTorch Geometric in the user's terms: each bad input names
the problem and the fix (the exception type and the words are asserted),
and its traceback ends at the public call the user made, unless
``POPTORCH_FULL_TRACEBACKS=1``. One parametrised test per entry point, as in
``tests/test_error_catalogue.py``; inputs that are not mistakes (a cluster
without edges, a graph too large to pack that the loader may trim) are
checked against plain PyG and plain Python instead."""
import os
import subprocess
import sys
import traceback

import pytest
import torch
import torch_geometric
from torch_geometric.data import Data

import poptorch
import poptorch_geometric as pyg_ipu
import poptorch_core
from poptorch_geometric import (FixedSizeCollater, FixedSizeOptions,
                                FixedSizeStrategy, OverSizeStrategy,
                                StreamPackingSampler, pyg_dataloader)

PACK = FixedSizeStrategy.StreamPack


def _graph(num_nodes, width=4, num_edges=2, **extra):
    return Data(x=torch.ones(num_nodes, width),
                edge_index=torch.zeros(2, num_edges, dtype=torch.long),
                **extra)


def _widths(*widths):
    """Graphs of 3 nodes whose ``x`` has these widths (graph-level y)."""
    return [_graph(3, w, y=torch.ones(1)) for w in widths]


def _collate(graphs, sizes=(20, 20, 4), **kwargs):
    return FixedSizeCollater(FixedSizeOptions(*sizes), **kwargs)(graphs)


def _load(loader_class, dataset, sizes, **kwargs):
    return list(loader_class(dataset, batch_size=sizes[2],
                             fixed_size_options=FixedSizeOptions(*sizes),
                             **kwargs))


_WIDTHS = (r"Graphs 0 and 1 of the batch have 'x' of shapes \[3, 4\] and "
           r"\[3, 5\]: a batch joins every graph's 'x' along dim 0, so "
           "their other dims must agree. Give every graph's 'x' the same "
           "shape apart from dim 0 .* or leave 'x' out of the batch with "
           "exclude_keys.")

COLLATER = [
    # Graphs whose x widths differ: the fast, the reference and the
    # hetero paths name the attribute, the graphs and their shapes.
    (lambda: _collate(_widths(4, 5)), ValueError, _WIDTHS),
    (lambda: _collate(_widths(4, 5), fast_path=False), ValueError, _WIDTHS),
    (lambda: _collate(_widths(4, 4, 6)), ValueError,
     r"Graphs 0 and 2 .* shapes \[3, 4\] and \[3, 6\]"),
    (lambda: _collate([_graph(3, edge_attr=torch.ones(2, 2)),
                       _graph(3, edge_attr=torch.ones(2, 3))]), ValueError,
     r"have 'edge_attr' of shapes \[2, 2\] and \[2, 3\]"),
    # Trimming nodes is on: trimming edges too is the fix, not trim_nodes.
    (lambda: _collate([_graph(3, num_edges=4)] * 2, (20, 5, 3),
                      trim_nodes=True), RuntimeError,
     r"the samples hold 8 edges but the fixed size allows 5 edges. "
     r"Increase num_edges in FixedSizeOptions, or set trim_edges too "
     r"\(OverSizeStrategy.TrimNodesAndEdges\)"),
    (lambda: _collate([_graph(3, num_edges=4)] * 2, (5, 50, 3),
                      trim_edges=True), RuntimeError,
     r"allows 5 nodes. Increase num_nodes in FixedSizeOptions, or set "
     r"trim_nodes too \(OverSizeStrategy.TrimNodesAndEdges\)"),
    # Trimming cannot free a padding node: it must not be the fix.
    (lambda: _collate([_graph(1, num_edges=1, edge_attr=torch.ones(1, 2))]
                      * 3, (3, 10, 4), trim_nodes=True), RuntimeError,
     r"increase num_nodes in FixedSizeOptions by one \(trimming cannot "
     r"free one: every graph keeps at least one node\)\.$"),
    # Edge trimming names edges, not "elements".
    (lambda: _collate([_graph(3, num_edges=4)] * 3, (20, 2, 4),
                      trim_edges=True), RuntimeError,
     "Cannot trim 3 graph.s. with edges to 2 edge.s.: every graph keeps "
     "at least one edge. Increase num_edges in FixedSizeOptions"),
]

_TOO_BIG = [_graph(30 + i, num_edges=4, y=torch.ones(1)) for i in range(3)]
_NOTHING_FITS = (
    r"StreamPackingSampler skipped all 3 sample\(s\): none fits an empty "
    r"batch of at most 2 graph\(s\), 9 node\(s\) and 19 edge\(s\), so there "
    r"is no batch to train on. The smallest, sample 0, has 30 node\(s\) and "
    r"4 edge\(s\): it needs max_num_nodes >= 31 and max_num_edges >= 5. "
    "Increase the budgets")

LOADERS = [
    (lambda: _load(pyg_ipu.FixedSizeDataLoader, _widths(4, 4, 4, 5, 4, 4),
                   (20, 20, 4)), ValueError,
     r"Graphs 0 and 1 of the batch have 'x' of shapes \[3, 5\] and "
     r"\[3, 4\]"),
    (lambda: _load(pyg_dataloader.FixedSizeDataLoader, _widths(4, 5),
                   (20, 20, 3)), ValueError, "have 'x' of shapes"),
    # Every graph over budget with Skip: an error, not an empty epoch.
    (lambda: _load(pyg_ipu.FixedSizeDataLoader, _TOO_BIG, (10, 20, 3),
                   fixed_size_strategy=PACK,
                   over_size_strategy=OverSizeStrategy.Skip), RuntimeError,
     _NOTHING_FITS),
    (lambda: len(pyg_ipu.FixedSizeDataLoader(
        _TOO_BIG, batch_size=3, fixed_size_options=FixedSizeOptions(10, 20, 3),
        fixed_size_strategy=PACK, over_size_strategy=OverSizeStrategy.Skip)),
     RuntimeError, _NOTHING_FITS),
    (lambda: list(StreamPackingSampler(_TOO_BIG, 2, 9, 19,
                                       allow_skip_data=True, lookahead=2)),
     RuntimeError, _NOTHING_FITS),
    # Trimming nodes only: a graph with too many edges names edges.
    (lambda: _load(pyg_ipu.FixedSizeDataLoader,
                   [_graph(3, num_edges=30, y=torch.ones(1))], (10, 20, 3),
                   fixed_size_strategy=PACK,
                   over_size_strategy=OverSizeStrategy.TrimNodes),
     RuntimeError, r"allows 20 edges.*set trim_edges too"),
]

OPTIONS = [
    (lambda: FixedSizeOptions(num_nodes=10, num_edges=0), ValueError,
     r"num_edges must be a positive int .* got 0: every batch needs at "
     r"least one edge slot, for its padding graph. Leave num_edges out "
     r"\(None\) for the fully connected default"),
    (lambda: FixedSizeOptions(num_nodes=10, num_edges=-3), ValueError,
     "num_edges must be a positive int .* got -3: every batch needs"),
    (lambda: FixedSizeOptions(num_nodes=10, num_edges=False), ValueError,
     "num_edges must be a positive int .* got False"),
    (lambda: FixedSizeOptions(num_nodes={}), ValueError,
     "num_nodes is an empty dict: give a size for every node type"),
    (lambda: FixedSizeOptions(num_nodes=0), ValueError,
     "num_nodes must be a positive int .* got 0: every batch needs at least "
     "one node slot"),
    (lambda: FixedSizeOptions(num_nodes=10, num_graphs=0), ValueError,
     r"num_graphs \(0\) must be at least 2"),
]


class _Sum(torch.nn.Module):
    def forward(self, data):
        return data.x.sum()


def _call_with_other_attributes():
    collater = FixedSizeCollater(FixedSizeOptions(10, 10, 3))
    extra = {"z": torch.ones(1)}
    model = poptorch.inferenceModel(_Sum())
    model(collater([_graph(3, y=torch.ones(1), **extra)] * 2))
    model(collater([_graph(3, y=torch.ones(1), v=torch.ones(1, 2))] * 2))


def _call_with_a_missing_attribute():
    collater = FixedSizeCollater(FixedSizeOptions(10, 10, 3))
    model = poptorch.inferenceModel(_Sum())
    model(collater([_graph(3, y=torch.ones(1), z=torch.ones(1))] * 2))
    model(collater([_graph(3, y=torch.ones(1))] * 2))


class _GIN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch_geometric.nn.GINConv(torch.nn.Linear(4, 4))

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


MODELS = [
    # A batch with other attributes than at compile time names them.
    (_call_with_other_attributes, poptorch.Error,
     "Attribute mismatch for data .DataBatch.: the model was compiled with "
     "the tensors 'batch', 'edge_index', 'ptr', 'x', 'y', 'z'; this one "
     "lacks 'z' and has 'v' in addition. Pass batches with the attributes "
     "the model was compiled with"),
    (_call_with_a_missing_attribute, poptorch.Error,
     "this one lacks 'z'. Pass batches"),
    # An index past the last node in a traced model: PyG's words, with the
    # node count, instead of "Illegal call to bool(tensor)".
    (lambda: poptorch.inferenceModel(_GIN())(
        torch.ones(8, 4), torch.tensor([[0, 1, 9], [1, 2, 3]])), IndexError,
     r"Found indices in 'edge_index' past the last of the 8 node\(s\) .*"
     r"valid: 0 to 7, or -1 for an empty slot"),
]


def _ids(cases):
    return [words.split()[0][:24] + f"#{i}" for i, (_, _, words)
            in enumerate(cases)]


def _check(call, error, words):
    with pytest.raises(error, match=words):
        call()


@pytest.mark.parametrize("call, error, words", COLLATER, ids=_ids(COLLATER))
def test_fixed_size_collater(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", LOADERS, ids=_ids(LOADERS))
def test_loaders_and_sampler(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", OPTIONS, ids=_ids(OPTIONS))
def test_fixed_size_options(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", MODELS, ids=_ids(MODELS))
def test_traced_models(call, error, words):
    _check(call, error, words)


# --- Tracebacks -------------------------------------------------------------

_OWN = os.path.dirname(pyg_ipu.__file__)
#: PopTorch Geometric and the core, whose public call it may be.
_PACKAGES = (_OWN, os.path.dirname(poptorch_core.__file__))


def _frames(call, error):
    with pytest.raises(error) as info:
        call()
    return traceback.extract_tb(info.value.__traceback__), info.value


@pytest.mark.parametrize("call, error", [
    (case[0], case[1]) for case in COLLATER + LOADERS + OPTIONS])
def test_tracebacks_end_at_the_public_call(call, error):
    """The user's call, then one frame of the package: the public entry
    point that raised it; no exception is chained to it."""
    frames, _ = _frames(call, error)
    ours = [f for f in frames if f.filename.startswith(_PACKAGES)]
    assert len(ours) == 1, [f"{f.filename}:{f.name}" for f in frames]
    assert frames[-1] == ours[0]


@pytest.fixture
def full_tracebacks(monkeypatch):
    monkeypatch.setenv("POPTORCH_FULL_TRACEBACKS", "1")


@pytest.mark.parametrize("call, error, deepest", [
    (lambda: _collate(_widths(4, 5)), ValueError, "check_same_shapes"),
    (lambda: FixedSizeOptions(num_nodes=10, num_edges=0), ValueError,
     "_check_count"),
    (lambda: list(StreamPackingSampler(_TOO_BIG, 2, 9, 19,
                                       allow_skip_data=True)),
     RuntimeError, "_at_least_one"),
])
def test_full_tracebacks_keep_every_frame(full_tracebacks, call, error,
                                          deepest):
    frames, raised = _frames(call, error)
    assert frames[-1].name == deepest
    assert len([f for f in frames if f.filename.startswith(_PACKAGES)]) > 2
    if deepest == "check_same_shapes":  # and torch's error it explains
        assert isinstance(raised.__context__, RuntimeError)


def test_other_errors_keep_their_traceback():
    """A bug (an error not raised as a refusal) is never cut short."""
    class Broken(Data):
        def __cat_dim__(self, key, value, *args, **kwargs):
            raise KeyError(key)

    with pytest.raises(KeyError) as info:
        _collate([Broken(x=torch.ones(2, 1), num_nodes=2)] * 2)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "__cat_dim__"


# --- Inputs that now work -----------------------------------------------------

def test_stream_packing_trims_a_graph_too_large_for_any_batch():
    """With a Trim strategy the over-size graph gets a batch of its own and
    is trimmed to fit, where it used to stop the epoch."""
    torch.manual_seed(0)
    dataset = [_graph(3, num_edges=2, y=torch.ones(1) * i) for i in range(4)]
    dataset.insert(2, _graph(30, num_edges=4, y=torch.full((1, ), 9.)))
    loader = pyg_ipu.FixedSizeDataLoader(
        dataset, batch_size=3, fixed_size_options=FixedSizeOptions(10, 20, 3),
        fixed_size_strategy=PACK,
        over_size_strategy=OverSizeStrategy.TrimNodesAndEdges)
    labels = [batch.y[batch.graphs_mask].tolist() for batch in loader]
    assert labels == [[0., 1.], [9.], [2., 3.]]
    assert loader.fixed_size_collater.trimmed.graphs == 1


def _clusters(data, num_parts):
    clusters = pyg_ipu.ClusterData(data, num_parts=num_parts, log=False)
    partition = clusters.partition
    return clusters, [partition.node_perm[partition.partptr[i]:
                                          partition.partptr[i + 1]]
                      for i in range(num_parts)]


@pytest.mark.parametrize("poptorch_side", [False, True])
def test_cluster_loader_on_a_graph_without_edges(poptorch_side):
    """Each batch holds its cluster's nodes (their original features, by
    the partition's node order) and only padding edges."""
    data = Data(x=torch.arange(10.).view(-1, 1),
                edge_index=torch.empty(2, 0, dtype=torch.long))
    clusters, members = _clusters(data, 3)
    loader_class = pyg_ipu.FixedSizeClusterLoader if poptorch_side else \
        pyg_ipu.pyg_cluster_loader.FixedSizeClusterLoader
    batches = list(loader_class(clusters, FixedSizeOptions(6, 6)))
    assert len(batches) == 3
    for batch, nodes in zip(batches, members):
        assert batch.x[batch.nodes_mask].view(-1).tolist() == \
            data.x[nodes].view(-1).tolist()
        assert not batch.edges_mask.any()
        assert batch.edge_index.shape == (2, 6)


def test_cluster_without_edges_in_a_graph_with_edges():
    """A cluster of isolated nodes next to one with edges: PyG's own
    ClusterLoader merges the latter, and fails on the former."""
    data = Data(x=torch.arange(10.).view(-1, 1),
                edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]),
                edge_attr=torch.arange(4.).view(-1, 1))
    clusters, members = _clusters(data, 2)
    loader = pyg_ipu.pyg_cluster_loader.FixedSizeClusterLoader(
        clusters, FixedSizeOptions(12, 12))
    batches = list(loader)
    pyg = torch_geometric.loader.ClusterLoader(clusters, batch_size=1)
    isolated = [i for i, nodes in enumerate(members)
                if bool((nodes >= 5).all())]
    assert len(isolated) == 1
    for i, batch in enumerate(batches):
        real_x = batch.x[batch.nodes_mask]
        if i == isolated[0]:
            with pytest.raises(RuntimeError):
                pyg._collate([i])
            assert real_x.view(-1).tolist() == data.x[members[i]].view(
                -1).tolist()
            assert not batch.edges_mask.any()
            continue
        expected = pyg._collate([i])
        torch.testing.assert_close(real_x, expected.x)
        torch.testing.assert_close(batch.edge_attr[batch.edges_mask],
                                   expected.edge_attr)
        torch.testing.assert_close(batch.edge_index[:, batch.edges_mask],
                                   expected.edge_index)


def test_pyg_model_traced_without_importing_poptorch_geometric():
    """A script that imports poptorch and PyG only (tensor inputs): the
    model is traced with PopTorch Geometric's substitutions, as PopTorch
    imports it when installed, so GCNConv's self-loop handling keeps fixed
    shapes on a graph that has a loop, rather than failing to trace on
    PyG's boolean mask. Reference: eager PyG.
    """
    code = (
        "import sys, torch, poptorch, torch_geometric.nn as gnn\n"
        "assert 'poptorch_geometric' not in sys.modules\n"
        "torch.manual_seed(0)\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = gnn.GCNConv(4, 4)\n"
        "    def forward(self, x, edge_index):\n"
        "        return self.conv(x, edge_index)\n"
        "model, x = M(), torch.randn(5, 4)\n"
        "edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 3]])\n"
        "expected = model(x, edges)\n"
        "actual = poptorch.inferenceModel(model)(x, edges)\n"
        "torch.testing.assert_close(actual, expected)\n"
        "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                            text=True, timeout=300,
                            cwd=os.path.dirname(_OWN))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")


def test_skip_with_pad_to_max_warns_that_it_skips_nothing(poptorch_log):
    pyg_ipu.FixedSizeDataLoader(_widths(4, 4), batch_size=3,
                                fixed_size_options=FixedSizeOptions(20, 20, 3),
                                over_size_strategy=OverSizeStrategy.Skip)
    assert "OverSizeStrategy.Skip skips graphs only with " \
        "FixedSizeStrategy.StreamPack" in poptorch_log.text


def test_no_trim_is_logged_when_trimming_removed_nothing(poptorch_log):
    with pytest.raises(RuntimeError):
        _collate([_graph(1, num_edges=1, edge_attr=torch.ones(1, 2))] * 3,
                 (3, 10, 4), trim_nodes=True)
    assert "trimmed" not in poptorch_log.text


def test_the_refusals_are_many():
    assert len(COLLATER + LOADERS + OPTIONS + MODELS) >= 20
