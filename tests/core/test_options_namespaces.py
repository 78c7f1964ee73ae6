"""The sub-namespaces of poptorch.Options: Training, Precision,
TensorLocations, Distributed, Jit, _Popart and Simulator (spec 2.4-2.8)."""
import pytest
import torch

import poptorch_core as poptorch
from poptorch_core import enums


@pytest.fixture(autouse=True)
def _no_launcher_environment(monkeypatch):
    for var in ("POPTORCH_DEFAULT_OPTIONS", "POPTORCH_SIM_BACKEND",
                "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "WORLD_SIZE",
                "RANK"):
        monkeypatch.delenv(var, raising=False)


def test_training_options():
    training = poptorch.Options().Training
    training.gradientAccumulation(4).accumulationAndReplicationReductionType(
        enums.ReductionType.Sum)
    training.setMeanAccumulationAndReplicationReductionStrategy(
        enums.MeanReductionStrategy.Running)
    assert training.gradient_accumulation == 4
    assert (training.accumulation_and_replication_reduction_type is
            enums.ReductionType.Sum)
    assert (training.meanAccumulationAndReplicationReductionStrategy is
            enums.MeanReductionStrategy.Running)
    msg = ("accumulationAndReplicationReductionType must be set to "
           "poptorch.ReductionType.Mean or poptorch.ReductionType.Sum")
    for bad in (enums.ReductionType.NoReduction, 1, "Mean"):
        with pytest.raises(ValueError, match=msg):
            training.accumulationAndReplicationReductionType(bad)
    with pytest.raises(ValueError, match="must be a positive integer"):
        training.gradientAccumulation(0)
    with pytest.raises(AssertionError, match="Unexpected type"):
        training.gradientAccumulation(2.0)
    with pytest.raises(AssertionError, match="mean_reduction_strategy must be "
                       "of type MeanReductionStrategy"):
        training.setMeanAccumulationAndReplicationReductionStrategy(1)


def test_training_backend_options():
    opts = poptorch.Options()
    opts.Training.setAutomaticLossScaling(True).setConvolutionDithering(True)
    opts.Precision.setPartialsType(torch.half)
    assert opts._Popart.options["automaticLossScalingSettings.enabled"]
    # Dithering and the partials type both live in convolutionOptions.
    assert opts._Popart.options["convolutionOptions"] == {
        "enableConvDithering": True,
        "partialsType": "half"
    }
    with pytest.raises(AssertionError,
                       match=r"enabled must be of type bool \(got int\)"):
        opts.Training.setAutomaticLossScaling(1)
    with pytest.raises(AssertionError,
                       match=r"enabled must be of type bool \(got str\)"):
        opts.Training.setConvolutionDithering("yes")


def test_precision_options(caplog):
    opts = poptorch.Options()
    precision = opts.Precision
    precision.enableFloatingPointExceptions(True).enableStochasticRounding(
        True).setPartialsType(torch.float32)
    assert opts._Popart.options["enableFloatingPointChecks"] is True
    assert opts._Popart.options["enableStochasticRounding"] is True
    assert opts._Popart.options["partialsTypeMatMuls"] == "float"
    with pytest.raises(ValueError,
                       match="parameter to setPartialsType should be "
                       "eithertorch.float or torch.half"):
        precision.setPartialsType(torch.int32)
    with pytest.raises(AssertionError,
                       match=r"enabled must be of type bool \(got int\)"):
        precision.enableFloatingPointExceptions(1)
    with pytest.raises(AssertionError,
                       match=r"enabled must be of type bool \(got NoneType\)"):
        precision.enableStochasticRounding(None)
    with caplog.at_level("WARNING", logger="poptorch::python"):
        precision.halfFloatCasting(enums.HalfFloatCastingBehavior
                                   .HalfUpcastToFloat)
        precision.runningStatisticsAlwaysFloat(True)
    assert caplog.text.count("deprecated") == 2
    with pytest.raises(ValueError, match="needs to be set to a bool"):
        precision.runningStatisticsAlwaysFloat(1)
    assert precision.toDict() == {}


def test_tensor_locations():
    opts = poptorch.Options()
    opts.TensorLocations.numIOTiles(32).numIOTiles(192)
    assert opts.TensorLocations.toDict()["numIOTiles"] == 192
    for bad in (30, 33, 194):
        with pytest.raises(AssertionError,
                           match="numIOTiles must be an even number between "
                           "32 and 192."):
            opts.TensorLocations.numIOTiles(bad)
    with pytest.raises(AssertionError, match="num_tiles must be"):
        opts.TensorLocations.numIOTiles(64.0)
    settings = poptorch.TensorLocationSettings().minElementsForOffChip(
        128).minElementsForReplicatedTensorSharding(8).useOnChipStorage(
            False).useReplicatedTensorSharding(True).useIOTilesToLoad(
                True).useIOTilesToStore(False)
    expected = {
        "minElementsForOffChip": 128,
        "minElementsForReplicatedTensorSharding": 8,
        "onChip": 0,
        "useReplicatedTensorSharding": 1,
        "useIOTilesToLoad": 1,
        "useIOTilesToStore": 0
    }
    assert settings.toDict() == expected
    locations = opts.TensorLocations
    locations.setActivationLocation(settings).setWeightLocation(settings)
    locations.setOptimizerLocation(settings).setAccumulatorLocation(settings)
    for key in ("location_activation", "location_weight",
                "location_optimizer", "location_accumulator"):
        assert locations.toDict()[key] == expected
    settings.useOnChipStorage(None)
    assert "onChip" not in settings.toDict()
    with pytest.raises(AssertionError, match="TensorLocationSettings"):
        locations.setWeightLocation({"onChip": 1})
    for bad, message in (
            (lambda: settings.minElementsForOffChip(-1),
             "min_elements must be >= 0"),
            (lambda: settings.minElementsForOffChip(1.0),
             r"min_elements must be of type int \(got float\)"),
            (lambda: settings.minElementsForReplicatedTensorSharding("8"),
             r"min_elements must be of type int \(got str\)"),
            (lambda: settings.useOnChipStorage(1),
             r"use must be of type bool \(got int\)"),
            (lambda: settings.useReplicatedTensorSharding(1),
             r"use must be of type bool \(got int\)"),
            (lambda: settings.useIOTilesToLoad(None),
             r"use must be of type bool \(got NoneType\)"),
            (lambda: settings.useIOTilesToStore("no"),
             r"use must be of type bool \(got str\)")):
        with pytest.raises(AssertionError, match=message):
            bad()


def test_distributed_options(monkeypatch):
    dist = poptorch.Options().Distributed
    assert dist.configureProcessId(2, 4) is dist
    assert (dist.processId, dist.numProcesses) == (2, 4)
    dist.disable()
    assert (dist.processId, dist.numProcesses) == (0, 1)
    monkeypatch.setenv("MY_SIZE", "8")
    monkeypatch.setenv("MY_RANK", "5")
    dist.setEnvVarNames("MY_SIZE", "MY_RANK")
    assert (dist.processId, dist.numProcesses) == (5, 8)
    dist.setEnvVarNames("UNSET_SIZE", "UNSET_RANK")
    assert (dist.processId, dist.numProcesses) == (0, 1)
    with pytest.raises(ValueError, match=r"process_id must be in \[0, 2\)"):
        dist.configureProcessId(2, 2)
    with pytest.raises(ValueError, match="num_processes must be at least 1"):
        dist.configureProcessId(0, 0)
    with pytest.raises(AssertionError, match="process_id must be"):
        dist.configureProcessId("0", 2)
    monkeypatch.setenv("MY_RANK", "one")
    with pytest.raises(ValueError, match="MY_RANK='one' must be an integer"):
        dist.setEnvVarNames("MY_SIZE", "MY_RANK")


def test_distributed_reads_launcher_environment(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "2")  # MPI's variables win
    monkeypatch.setenv("RANK", "1")
    dist = poptorch.Options().Distributed
    assert (dist.processId, dist.numProcesses) == (3, 4)
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK")
    dist = poptorch.Options().Distributed  # torchrun's variables
    assert (dist.processId, dist.numProcesses) == (1, 2)


def test_jit_options(caplog):
    jit = poptorch.Options().Jit
    with caplog.at_level("WARNING", logger="poptorch::python"):
        assert jit.traceModel(False) is jit
    assert "deprecated" in caplog.text
    with pytest.raises(ValueError,
                       match=r"options.Jit.traceModel\(True\) is no longer "
                       "supported"):
        jit.traceModel(True)


def test_popart_options(caplog):
    popart = poptorch.Options()._Popart
    assert popart.set("anything", {"a": 1}) is popart
    popart.setPatterns({"PadSum": True}, 1)
    assert popart.options["patterns"] == {"PadSum": True}
    assert popart.options["patternsLevel"] == 1
    with caplog.at_level("WARNING", logger="poptorch::python"):
        popart.set("logDir", "/tmp")
    assert "logDir" not in popart.options and "logDir()" in caplog.text
    with pytest.raises(TypeError, match="must be strings"):
        popart.set(1, 2)
    # A value the backend cannot take is refused where it is set.
    with pytest.raises(poptorch.Error, match="Unknown value type object"):
        popart.set("x", object())
    with pytest.raises(AssertionError, match="must be a dictionary"):
        popart.setEngineOptions([])
    with pytest.raises(AssertionError, match="level must be an integer"):
        popart.setPatterns({}, "2")
    with pytest.raises(AssertionError, match="patterns must be a dictionary"):
        popart.setPatterns([], 2)


def test_simulator_options(monkeypatch):
    opts = poptorch.Options()
    sim = opts.Simulator
    assert sim.backend("compile").hostDevice("cpu").ipuVersion(21) is sim
    assert (sim.execution_backend, sim.host_device,
            sim.ipu_version) == ("compile", "cpu", 21)
    with pytest.raises(
            ValueError,
            match="valid values are 'interpret', 'compile', 'auto'"):
        sim.backend("xla")
    with pytest.raises(ValueError, match="valid values are 'cpu', 'cuda'"):
        sim.hostDevice("tpu")
    with pytest.raises(ValueError, match="valid IPU versions are 1, 2, 21"):
        sim.ipuVersion(3)
    with pytest.raises(AssertionError, match="Unexpected type"):
        sim.ipuVersion("2")
    # Attribute assignment is validated like the setters.
    with pytest.raises(ValueError, match="valid values"):
        sim.execution_backend = "xla"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"torch.cuda.is_available\(\) is "
                       r"False.*hostDevice\('cpu'\)"):
        sim.hostDevice("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert sim.hostDevice("cuda").host_device == "cuda"
    with pytest.raises(AttributeError, match="Simulator is read-only"):
        opts.Simulator = sim


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU and a CUDA build of torch")
def test_simulator_host_device_cuda_on_a_gpu():
    sim = poptorch.Options().Simulator.hostDevice("cuda")
    assert sim.host_device == "cuda"
    assert poptorch.Options().Simulator.hostDevice("cpu").host_device == "cpu"
