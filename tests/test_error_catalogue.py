"""The bad-input catalogue: every public entry point answers a mistake with
the exception type the spec names (or poptorch.Error) and a message that
names the problem and the fix in the user's words, never an internal
TypeError, KeyError or IndexError. One parametrised test per entry point.
"""
import os
import tempfile

import pytest
import torch
from torch_geometric.data import Data

import poptorch
import poptorch_geometric as pyg_ipu
from poptorch_geometric.datasets import SyntheticMolecules


class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 1)

    def forward(self, x):
        out = self.fc(x)
        return out, out.sum()


class NoLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 1)

    def forward(self, x):
        return self.fc(x)


class NoParams(torch.nn.Module):
    def forward(self, x):
        return x, x.sum()


DS = torch.utils.data.TensorDataset(torch.randn(10, 2))
MOLS = SyntheticMolecules(20)
FSO = pyg_ipu.FixedSizeOptions(num_nodes=20, num_edges=20, num_graphs=4)


def _compiled():
    model = poptorch.inferenceModel(torch.nn.Linear(2, 1))
    model(torch.randn(4, 2))
    return model


def _graph(num_nodes, edges, **extra):
    return Data(x=torch.ones(num_nodes, 2),
                edge_index=torch.tensor(edges).t(), **extra)


def _corrupted_file():
    path = os.path.join(tempfile.mkdtemp(), "model.poptorch")
    with open(path, "wb") as f:
        f.write(b"POPTORCH-SIM garbage")
    poptorch.load(path)


def _wrap_twice():
    model = Lin()
    poptorch.trainingModel(model)
    poptorch.trainingModel(model)


def _accumulating_inference():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    poptorch.inferenceModel(Lin(), opts)


def _check(call, error, words):
    with pytest.raises(error, match=words):
        call()


OPTIONS = [
    (lambda: poptorch.Options().deviceIterations(0), ValueError,
     "device_iterations must be a positive integer"),
    (lambda: poptorch.Options().deviceIterations("2"), AssertionError,
     "Unexpected type <class 'str'> for option device_iterations"),
    (lambda: poptorch.Options().replicationFactor(-1), ValueError,
     "replication_factor must be a positive integer"),
    (lambda: poptorch.Options().Training.gradientAccumulation(0), ValueError,
     "gradient_accumulation must be a positive integer"),
    (lambda: poptorch.Options().outputMode("All"), AssertionError,
     "output_mode must be a poptorch.OutputMode"),
    (lambda: poptorch.Options().outputMode(poptorch.OutputMode.EveryN, 0),
     AssertionError, "output_return_period set to valid positive integer"),
    (lambda: poptorch.Options().anchorTensor(1, "x"), AssertionError,
     "short_name must be of type str"),
    (lambda: poptorch.Options().Simulator.backend("jit"), ValueError,
     "valid values are 'interpret', 'compile', 'auto'"),
    (lambda: poptorch.Options().Simulator.hostDevice("tpu"), ValueError,
     "valid values are 'cpu', 'cuda'"),
    (lambda: poptorch.Options().Simulator.ipuVersion(3), ValueError,
     "valid IPU versions are 1, 2, 21"),
    (lambda: poptorch.Options().Simulator.memoryCheck("maybe"), ValueError,
     "valid values are 'error', 'warn', 'off'"),
    (lambda: poptorch.Options().randomSeed("1"), AssertionError,
     "random_seed must be of type int"),
    (lambda: poptorch.Options().randomSeed(2**70), ValueError,
     r"does not fit 64 bits: use a seed from -2\*\*63 to 2\*\*64 - 1"),
    (lambda: poptorch.Options().replicationFactor(4).inputReplicaGrouping(
        3, poptorch.CommGroupType.Consecutive), ValueError,
     r"must be a factor of replication_factor \(got 3 for replicationFactor "
     r"4\): use one of \[1, 2, 4\]"),
    (lambda: poptorch.Options().from_json("{bad"), ValueError,
     "not valid JSON .*write an object such as"),
    (lambda: poptorch.Options().loadFromFile("/nonexistent/opts.cfg"),
     FileNotFoundError, "/nonexistent/opts.cfg"),
    (lambda: poptorch.Options().setExecutionStrategy("x"), AssertionError,
     "strategy must be a poptorch.PipelinedExecution"),
    (lambda: poptorch.Options().Precision.setPartialsType(torch.int32),
     ValueError, "setPartialsType should be either"),
    (lambda: setattr(poptorch.Options(), "foo", 3), AssertionError,
     "Invalid option foo, valid options are"),
    (lambda: poptorch.Options().connectionType("Never"), AssertionError,
     "connection_type must be of type ConnectionType"),
    (lambda: poptorch.Options().Distributed.configureProcessId(2, 2),
     ValueError, r"process_id must be in \[0, 2\) for 2 processes"),
    (lambda: poptorch.Options().Simulator.distributedTimeout(-1), ValueError,
     "positive number of seconds"),
]

WRAPPERS = [
    (lambda: poptorch.trainingModel("model"), poptorch.Error,
     "wraps a torch.nn.Module, got str"),
    (lambda: poptorch.trainingModel(Lin(), options="x"), poptorch.Error,
     "Expected poptorch.Options"),
    (_accumulating_inference, poptorch.Error,
     "gradientAccumulation to 1 .*inferenceModel"),
    (lambda: poptorch.trainingModel(NoParams()), poptorch.Error,
     "needs a model with parameters .*poptorch.inferenceModel"),
    (_wrap_twice, RuntimeError, "Call model.destroy"),
    (lambda: poptorch.inferenceModel(torch.nn.Linear(2, 1)).save("/tmp/x"),
     poptorch.Error, "Model has not been compiled"),
    (lambda: poptorch.inferenceModel(
        torch.nn.Linear(2, 1)).copyWeightsToHost(), poptorch.Error,
     "Model has not been compiled"),
    (lambda: _compiled().attachToDevice(), poptorch.Error,
     "already attached"),
    (lambda: _compiled().getAnchoredTensor("nope"), AssertionError,
     "No tensor with name nope"),
    (lambda: _compiled().setOptimizer(
        torch.optim.SGD(Lin().parameters(), lr=0.1)), AssertionError,
     "Optimizer should be None for inference"),
    (lambda: poptorch.load("/nonexistent/model.poptorch"), poptorch.Error,
     "cannot be read"),
    (_corrupted_file, poptorch.Error, "Invalid file .*truncated"),
    (lambda: poptorch.traceModel("model", torch.ones(2)), poptorch.Error,
     "traces a torch.nn.Module, got str"),
    (lambda: poptorch.Ir(replication=4).replica_grouping(stride=0),
     ValueError, "stride must be at least 1"),
]

CALLS = [
    (lambda: poptorch.trainingModel(NoLoss())(torch.randn(4, 2)),
     poptorch.Error, "Couldn't find a loss in graph!.*identity_loss"),
    (lambda: poptorch.inferenceModel(torch.nn.Linear(2, 1))(
        torch.randn(4, 2), torch.randn(4, 2)), AssertionError,
     "Too many arguments provided"),
    (lambda: poptorch.inferenceModel(torch.nn.Linear(2, 1))(
        input=torch.randn(4, 2), z=1), AssertionError,
     "z is not a valid parameter"),
    (lambda: _compiled()(torch.randn(4, 3)), poptorch.Error,
     "Shape mismatch for input"),
    (lambda: _compiled()(torch.randn(5, 2)), poptorch.Error,
     "Only the first dimension changed: .*FixedSizeDataLoader"),
    (lambda: _compiled()(torch.randn(4, 2).half()), poptorch.Error,
     "Data type mismatch for input"),
    (lambda: poptorch.inferenceModel(
        torch.nn.Linear(2, 1), poptorch.Options().deviceIterations(3))(
            torch.randn(4, 2)), AssertionError,
     r"must be a multiple of Options.deviceIterations\(3\)"),
    (lambda: poptorch.inferenceModel(
        torch.nn.Linear(2, 1), poptorch.Options().deviceIterations(4)
        .outputMode(poptorch.OutputMode.EveryN, 3))(torch.randn(8, 2)),
     poptorch.Error, "period that divides 4"),
    (lambda: poptorch.set_available_memory(torch.ones(2), 2.0), ValueError,
     r"available_memory_proportion must be in \(0, 1\]"),
    (lambda: poptorch.identity_loss(torch.ones(2), reduction="foo"),
     AssertionError, "Unsupported reduction type"),
    (lambda: poptorch.BeginBlock("layer", ipu_id=1), poptorch.Error,
     "not an instance of torch.nn.Module"),
]

DATA = [
    (lambda: poptorch.DataLoader("x", DS), AssertionError,
     "options must be a poptorch.Options, got str"),
    (lambda: poptorch.DataLoader(poptorch.Options(), DS, mode="async"),
     ValueError, "'async' is not a valid DataLoaderMode"),
    (lambda: list(poptorch.DataLoader(poptorch.Options().deviceIterations(4),
                                      DS, batch_size=3)), poptorch.Error,
     "yields no batch: .*drop_last=False"),
    (lambda: poptorch.DataLoader(poptorch.Options(), DS,
                                 rebatched_worker_size=2), ValueError,
     "only used with mode=poptorch.DataLoaderMode.AsyncRebatched"),
    (lambda: poptorch.AsynchronousDataAccessor(DS, buffer_size=0), ValueError,
     "buffer_size must be a positive integer"),
    (lambda: poptorch.AsynchronousDataAccessor(DS, timeout=0), ValueError,
     "timeout must be a positive number of seconds"),
]

OPTIMIZERS = [
    (lambda: poptorch.optim.SGD(Lin().parameters(), lr="0.1"), TypeError,
     r"lr must be a number, got '0.1' \(str\)"),
    (lambda: poptorch.optim.SGD(Lin().parameters(), lr=-1.0), ValueError,
     "Invalid learning rate"),
    (lambda: poptorch.optim.Adam(Lin().parameters(), betas=(2.0, 0.9)),
     ValueError, "Invalid beta parameter"),
    (lambda: poptorch.optim.SGD(Lin().parameters(), lr=0.1,
                                accum_type=torch.int32), AssertionError,
     "torch.float32 or torch.float16"),
    (lambda: poptorch.optim.SGD(Lin().parameters(), lr=0.1,
                                loss_scaling="x"), TypeError,
     "loss_scaling must be a number"),
]

FIXED_SIZES = [
    (lambda: pyg_ipu.FixedSizeOptions(num_nodes=0), ValueError,
     "num_nodes must be a positive int"),
    (lambda: pyg_ipu.FixedSizeOptions(num_nodes=10, num_graphs=1),
     ValueError, "must be at least 2: .*one padding graph"),
    (lambda: pyg_ipu.FixedSizeOptions(num_nodes="10"), ValueError,
     "num_nodes must be a positive int"),
    (lambda: pyg_ipu.FixedSizeOptions(num_nodes=10, num_graphs="3"),
     TypeError, r"num_graphs must be an int, got '3' \(str\)"),
    (lambda: pyg_ipu.FixedSizeOptions(num_nodes=10, num_graphs=3.0),
     TypeError, r"num_graphs must be an int, got 3.0 \(float\)"),
    (lambda: pyg_ipu.FixedSizeOptions(num_nodes=10, node_pad_value="x"),
     TypeError, "node_pad_value must be a number"),
    (lambda: pyg_ipu.FixedSizeOptions(num_nodes=10,
                                      edge_pad_value=float("nan")),
     ValueError, "edge_pad_value must be a finite number, got nan"),
    (lambda: pyg_ipu.FixedSizeOptions.for_packing(MOLS, 1), ValueError,
     "must be at least 2"),
    (lambda: pyg_ipu.FixedSizeOptions.for_batch_size(MOLS, 0), ValueError,
     "must be a positive integer"),
    (lambda: pyg_ipu.FixedSizeOptions.for_packing(MOLS, 8, lookahead=-1),
     ValueError, "lookahead .* must be a non-negative integer"),
    (lambda: pyg_ipu.FixedSizeOptions.from_dataset([], 4), ValueError,
     "The dataset is empty"),
]

COLLATION = [
    (lambda: pyg_ipu.FixedSizeCollater(
        pyg_ipu.FixedSizeOptions(num_nodes=10**6)), ValueError,
     "needs .* GiB for edge_index alone.*Set num_edges"),
    (lambda: pyg_ipu.FixedSizeCollater(FSO)("graphs"), TypeError,
     "Expected list, got str"),
    (lambda: pyg_ipu.FixedSizeCollater(FSO)([]), ValueError,
     "got an empty list"),
    (lambda: pyg_ipu.FixedSizeCollater(FSO)([_graph(30, [[0, 1]])]),
     RuntimeError, "don't allocate enough space for the number of nodes"),
    (lambda: pyg_ipu.FixedSizeCollater(FSO)([_graph(2, [[0, 3]])]),
     ValueError, "Graph 0 of the batch has an edge_index entry 3"),
    (lambda: pyg_ipu.FixedSizeCollater(FSO)(
        [_graph(2, [[0, 1]]), _graph(2, [[0, 1]], y=torch.ones(1))]),
     ValueError, "Graph 1 of the batch has 'y', which graph 0 has not"),
]

LOADERS = [
    (lambda: pyg_ipu.FixedSizeDataLoader(MOLS, batch_size=5,
                                         fixed_size_options=FSO),
     AssertionError, r"batch_size \(5\) must equal .*num_graphs \(4\)"),
    (lambda: pyg_ipu.FixedSizeDataLoader([], batch_size=4), ValueError,
     "The dataset is empty"),
    (lambda: pyg_ipu.FixedSizeDataLoader(MOLS, batch_size=4,
                                         fixed_size_strategy="pack"),
     NotImplementedError, "Unsupported fixed_size_strategy pack"),
    (lambda: pyg_ipu.FixedSizeDataLoader(
        MOLS, batch_size=4,
        fixed_size_strategy=pyg_ipu.FixedSizeStrategy.StreamPack,
        batch_sampler=[[0, 1]]), ValueError,
     "batch_sampler cannot be combined with FixedSizeStrategy.StreamPack"),
    (lambda: pyg_ipu.StreamPackingSampler(MOLS, 0), ValueError,
     r"max_num_graphs \(0\) must be at least 1"),
    (lambda: pyg_ipu.StreamPackingSampler(MOLS, 3, max_num_nodes=2),
     ValueError, r"max_num_nodes \(2\) must be at least max_num_graphs"),
    (lambda: list(pyg_ipu.StreamPackingSampler(MOLS, 3, max_num_nodes=4,
                                               max_num_edges=100)),
     RuntimeError, "does not fit an empty batch.*allow_skip_data=True"),
    (lambda: pyg_ipu.StreamPackingSampler([], 3), ValueError,
     "The dataset is empty"),
]


def _ids(cases):
    return [words.split()[0][:24] + f"#{i}" for i, (_, _, words)
            in enumerate(cases)]


@pytest.mark.parametrize("call, error, words", OPTIONS, ids=_ids(OPTIONS))
def test_options(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", WRAPPERS, ids=_ids(WRAPPERS))
def test_wrappers_and_files(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", CALLS, ids=_ids(CALLS))
def test_model_calls_and_ops(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", DATA, ids=_ids(DATA))
def test_data_loading(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", OPTIMIZERS,
                         ids=_ids(OPTIMIZERS))
def test_optimizers(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", FIXED_SIZES,
                         ids=_ids(FIXED_SIZES))
def test_fixed_size_options(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", COLLATION, ids=_ids(COLLATION))
def test_collation(call, error, words):
    _check(call, error, words)


@pytest.mark.parametrize("call, error, words", LOADERS, ids=_ids(LOADERS))
def test_geometric_loaders(call, error, words):
    _check(call, error, words)


def test_the_catalogue_is_large():
    cases = (OPTIONS + WRAPPERS + CALLS + DATA + OPTIMIZERS + FIXED_SIZES +
             COLLATION + LOADERS)
    assert len(cases) >= 60


def test_checks_survive_python_dash_o():
    """``python -O`` strips assert statements; the checks still raise."""
    import subprocess
    import sys
    code = (
        "import torch, poptorch\n"
        "try:\n"
        "    poptorch.Options().deviceIterations('2')\n"
        "except AssertionError as e:\n"
        "    print('raised:', e)\n"
        "loader = poptorch.DataLoader(poptorch.Options(),\n"
        "    torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2)\n"
        "model = poptorch.inferenceModel(torch.nn.Linear(2, 1),\n"
        "    poptorch.Options().deviceIterations(3))\n"
        "try:\n"
        "    model(torch.ones(4, 2))\n"
        "except AssertionError as e:\n"
        "    print('raised:', str(e)[:40])\n")
    result = subprocess.run([sys.executable, "-O", "-c", code],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("raised:") == 2, result.stdout
    assert "Unexpected type <class 'str'>" in result.stdout
    assert "Invalid batch dimension" in result.stdout
