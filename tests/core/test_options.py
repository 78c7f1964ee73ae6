"""poptorch.Options: defaults, setters, validation, freezing, copies and
serialisation (spec 2); config files, JSON and environment variables are in
``test_options_config.py``."""
import copy
import pickle

import pytest
import torch

import poptorch_core as poptorch
from poptorch_core import enums
from poptorch_core.options._progress import CompilationProgressBar

_ENV_VARS = ("POPTORCH_DEFAULT_OPTIONS", "POPTORCH_CACHE_DIR",
             "POPTORCH_SIM_BACKEND", "OMPI_COMM_WORLD_SIZE",
             "OMPI_COMM_WORLD_RANK", "WORLD_SIZE", "RANK",
             "POPLAR_ENGINE_OPTIONS")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for var in _ENV_VARS:
        monkeypatch.delenv(var, raising=False)


# Defaults and OptionsDict mechanics ---------------------------------------


def test_defaults_match_spec():
    opts = poptorch.Options()
    expected = dict(replication_factor=1, input_group_size=1,
                    input_cgt=enums.CommGroupType.Consecutive,
                    broadcast_buffers=True, device_iterations=1,
                    log_dir=".", max_repeat_logs=4,
                    auto_round_num_ipus=False, anchored_tensors={},
                    output_mode=4, output_return_period=1,
                    connection_type=0, sync_pattern=0,
                    available_memory_proportion={})
    assert opts._values == expected
    assert opts.Training.gradient_accumulation == 1
    assert (opts.Training.accumulation_and_replication_reduction_type
            is enums.ReductionType.Mean)
    assert (opts.Training.meanAccumulationAndReplicationReductionStrategy
            is enums.MeanReductionStrategy.Post)
    assert (opts.Distributed.numProcesses, opts.Distributed.processId) == (1,
                                                                          0)
    assert opts._Popart.options == {
        "instrumentWithHardwareCycleCounter": False,
        "rearrangeAnchorsOnHost": False
    }
    assert opts._show_compilation_progress_bar is True
    assert opts._relax_optimizer_checks is False
    assert opts._module_namescope_enabled is True
    assert opts._source_location_excludes == [
        "install/poptorch", "site-packages/torch", "site-packages/poptorch"
    ]
    assert type(opts._execution_strategy) is poptorch.PipelinedExecution
    assert opts._execution_strategy._auto_stage is enums.AutoStage.SameAsIpu
    assert opts.defaultOutputMode()
    assert not opts.exists("random_seed")
    assert opts.Simulator.toDict() == {
        "simulator.execution_backend": "auto",
        "simulator.host_device": "cpu",
        "simulator.ipu_version": 2,
        "simulator.memory_check": "warn",
        "simulator.host_memory_pool": True,
        "simulator.distributed_timeout": 60.0
    }


def test_instances_do_not_share_mutable_defaults():
    a, b = poptorch.Options(), poptorch.Options()
    a.anchorTensor("x", "y")
    a.setAvailableMemoryProportion({"IPU0": 0.5})
    assert b.anchored_tensors == {} and b.available_memory_proportion == {}


def test_attribute_access_and_errors():
    opts = poptorch.Options()
    opts.replication_factor = 4
    assert opts.replication_factor == 4 and opts("replication_factor") == 4
    with pytest.raises(AttributeError, match=r"Invalid attribute foo\."):
        _ = opts.foo
    with pytest.raises(AssertionError, match="Invalid option foo, valid"):
        opts.set(foo=1)
    with pytest.raises(AssertionError,
                       match="Unexpected type <class 'str'> for option "
                       "device_iterations. Expected <class 'int'>"):
        opts.device_iterations = "2"
    with pytest.raises(AssertionError, match="Unexpected type <class 'bool'>"):
        opts.deviceIterations(True)
    with pytest.raises(AttributeError,
                       match="Invalid private attribute _new_thing"):
        opts._new_thing = 1
    with pytest.raises(AttributeError, match="Training is read-only"):
        opts.Training = None


def test_create_or_set_exists_delete():
    opts = poptorch.Options()
    opts.createOrSet(model_name="a")
    assert opts.exists("model_name") and opts.model_name == "a"
    opts.createOrSet(model_name="b")
    assert opts.model_name == "b"
    with pytest.raises(AssertionError, match="Unexpected type"):
        opts.createOrSet(model_name=3)
    opts.deleteIfExists("model_name")
    opts.deleteIfExists("model_name")
    assert not opts.exists("model_name")


def test_update_refuses_overlapping_keys():
    opts = poptorch.Options()
    assert opts.Training.update({"a": 1})["gradient_accumulation"] == 1
    with pytest.raises(AssertionError, match="some keys in common"):
        opts.Training.update({"gradient_accumulation": 3})


def test_repr():
    opts = poptorch.Options().replicationFactor(4)
    text = repr(opts)
    assert text.startswith("Options(")
    assert "replication_factor=4" in text and "log_dir='.'" in text
    for name in ("Distributed=", "Jit=", "Precision=", "Simulator=",
                 "TensorLocations=", "Training=", "_Popart="):
        assert name in text
    assert "execution_backend='auto'" in text
    assert repr(opts.Training).startswith(
        "_TrainingOptions(gradient_accumulation=1")


# Freezing, copies, pickling -------------------------------------------


def _frozen_mutations(opts):
    return [
        lambda: opts.deviceIterations(2),
        lambda: setattr(opts, "replication_factor", 2),
        lambda: opts.randomSeed(1),
        lambda: opts.anchorTensor("a", "b"),
        lambda: opts.showCompilationProgressBar(False),
        lambda: opts.setExecutionStrategy(poptorch.ShardedExecution()),
        lambda: opts.deleteIfExists("random_seed"),
        lambda: opts.Training.gradientAccumulation(2),
        lambda: opts.Distributed.disable(),
        lambda: opts.TensorLocations.numIOTiles(32),
        lambda: opts.Precision.setPartialsType(torch.half),
        lambda: opts._Popart.set("x", 1),
        lambda: opts.enableStableNorm(True),
        lambda: opts.Simulator.backend("compile"),
    ]


def test_frozen_options_refuse_every_change():
    opts = poptorch.Options()
    opts._freeze()
    assert opts._is_frozen and opts.Training._is_frozen
    assert opts._Popart._is_frozen and opts.Simulator._is_frozen
    for mutate in _frozen_mutations(opts):
        with pytest.raises(AttributeError, match="Can't modify frozen"):
            mutate()
    assert opts.device_iterations == 1 and not opts.exists("random_seed")
    opts._unfreeze()
    for mutate in _frozen_mutations(opts):
        mutate()
    assert opts.device_iterations == 2 and opts.replication_factor == 2
    assert opts.Simulator.execution_backend == "compile"
    assert not opts.exists("random_seed")  # created, then deleted


def test_clone_is_unfrozen_and_independent():
    opts = poptorch.Options().deviceIterations(3)
    opts.setExecutionStrategy(poptorch.PipelinedExecution("a", "b"))
    opts.anchorTensor("x", "y")
    opts._freeze()
    for clone in (opts.clone(), copy.deepcopy(opts)):
        assert not clone._is_frozen and not clone.Training._is_frozen
        assert not clone._Popart._is_frozen
        # Training and Precision share the Options' _Popart, in the copy too.
        assert clone.Training._popart_options is clone._Popart
        assert clone.Precision._popart_options is clone._Popart
        clone.deviceIterations(7)
        clone.Training.gradientAccumulation(5)
        clone._Popart.set("k", 1)
        clone.anchored_tensors["z"] = []
        clone._execution_strategy.stage("a").ipu(3)
        clone.Simulator.backend("compile")
    assert opts.device_iterations == 3
    assert opts.Training.gradient_accumulation == 1
    assert "k" not in opts._Popart.options
    assert list(opts.anchored_tensors) == ["x"]
    assert opts._execution_strategy.stage("a")._ipu is None
    assert opts.Simulator.execution_backend == "auto"
    assert opts._is_frozen


def test_pickle_round_trip_keeps_values():
    opts = poptorch.Options().deviceIterations(3)
    opts.Training.gradientAccumulation(2)
    opts.Simulator.ipuVersion(21)
    opts._progress_bar(0, 2)  # a live tqdm bar must not break pickling
    restored = pickle.loads(pickle.dumps(opts))
    opts._progress_bar(2, 2)
    assert restored.device_iterations == 3
    assert restored.Training.gradient_accumulation == 2
    assert restored.Simulator.ipu_version == 21
    assert restored.Training._popart_options is restored._Popart


# Top-level setters ----------------------------------------------------------


def test_device_iterations_and_replication():
    opts = poptorch.Options().deviceIterations(device_iterations=5)
    opts.replicationFactor(4)
    assert (opts.device_iterations, opts.replication_factor) == (5, 4)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="must be a positive integer"):
            opts.deviceIterations(bad)
        with pytest.raises(ValueError, match="must be a positive integer"):
            opts.replicationFactor(bad)
    with pytest.raises(AssertionError, match="Unexpected type"):
        opts.replicationFactor(2.0)


def test_input_replica_grouping():
    opts = poptorch.Options().replicationFactor(4)
    opts.inputReplicaGrouping(2, enums.CommGroupType.Orthogonal)
    assert opts.input_group_size == 2
    assert opts.input_cgt is enums.CommGroupType.Orthogonal
    opts.inputReplicaGrouping(4, enums.CommGroupType.NoGrouping)
    assert opts.input_group_size == 1
    assert opts.input_cgt is enums.CommGroupType.Consecutive
    with pytest.raises(ValueError, match="input_group_type cannot be All"):
        opts.inputReplicaGrouping(2, enums.CommGroupType.All)
    with pytest.raises(ValueError, match="cannot be larger than replication"):
        opts.inputReplicaGrouping(8, enums.CommGroupType.Consecutive)
    with pytest.raises(ValueError, match="must be a factor of replication"):
        opts.inputReplicaGrouping(3, enums.CommGroupType.Consecutive)
    with pytest.raises(AssertionError, match="input_group_type must be"):
        opts.inputReplicaGrouping(2, 1)


def test_simple_typed_setters():
    opts = poptorch.Options()
    opts.broadcastBuffers(False).logDir("/tmp/x").autoRoundNumIPUs()
    assert opts.broadcast_buffers is False and opts.log_dir == "/tmp/x"
    assert opts.auto_round_num_ipus is True
    opts.maxRepeatLogs(10)
    assert opts.max_repeat_logs == 10
    opts.maxRepeatLogs(None)
    assert opts.max_repeat_logs == 2**64 - 1
    opts.modelName("m").useIpuId(3).useIpuModel(True)
    assert (opts.model_name, opts.ipu_id, opts.use_model) == ("m", 3, True)
    for bad, message in (
            (lambda: opts.broadcastBuffers(1),
             "Unexpected type <class 'int'> for option broadcast_buffers"),
            (lambda: opts.logDir(3),
             r"log_dir must be of type str or PathLike \(got int\)"),
            (lambda: opts.maxRepeatLogs("x"),
             "Unexpected type <class 'str'> for option max_repeat_logs"),
            (lambda: opts.modelName(1),
             r"name must be of type str \(got int\)"),
            (lambda: opts.useIpuId("0"),
             r"ipu_id must be of type int \(got str\)"),
            (lambda: opts.useIpuModel(1),
             r"use_model must be of type bool \(got int\)"),
            (lambda: opts.autoRoundNumIPUs("yes"),
             "Unexpected type <class 'str'> for option auto_round_num_ipus")):
        with pytest.raises(AssertionError, match=message):
            bad()


def test_connection_and_sync_pattern():
    opts = poptorch.Options().connectionType(enums.ConnectionType.OnDemand)
    assert opts.connection_type == 1 and type(opts.connection_type) is int
    opts.syncPattern(enums.SyncPattern.ReplicaAndLadder)
    assert opts.sync_pattern == 2 and type(opts.sync_pattern) is int
    with pytest.raises(AssertionError, match="connection_type must be"):
        opts.connectionType(1)
    with pytest.raises(AssertionError, match="sync_pattern must be"):
        opts.syncPattern("Full")


def test_offline_ipu_target():
    opts = poptorch.Options().useOfflineIpuTarget()
    assert opts.connection_type == enums.ConnectionType.Never
    assert opts.ipu_version == 2
    opts.useOfflineIpuTarget(21)
    assert opts.ipu_version == 21
    with pytest.raises(ValueError, match="valid IPU versions are 1, 2, 21"):
        poptorch.Options().useOfflineIpuTarget(3)


def test_output_mode():
    opts = poptorch.Options().outputMode(enums.OutputMode.All)
    assert opts.output_mode == 2 and type(opts.output_mode) is int
    assert not opts.defaultOutputMode()
    opts.outputMode(enums.OutputMode.EveryN, 5)
    assert (opts.output_mode, opts.output_return_period) == (1, 5)
    opts.outputMode(enums.OutputMode.Sum, 3)  # the period is ignored
    assert (opts.output_mode, opts.output_return_period) == (3, 1)
    for period in (None, 0, -2, 2.0):
        with pytest.raises(AssertionError,
                           match="EveryN anchor must have output_return_"
                           "period set to valid positive integer"):
            opts.outputMode(enums.OutputMode.EveryN, period)
    with pytest.raises(AssertionError, match="must be a poptorch.OutputMode"):
        opts.outputMode(2)
    # The deprecated alias is the same enum.
    opts.outputMode(poptorch.AnchorMode.Final)
    assert opts.output_mode == 0


def test_anchor_tensor():
    opts = poptorch.Options()
    assert opts.anchorTensor("grad", "Gradient___x") is opts
    opts.anchorTensor("every", "y", enums.OutputMode.EveryN, 2)
    opts.anchorTensor("all", "z", enums.OutputMode.All, 7)
    assert opts.anchored_tensors == {
        "grad": ["Gradient___x", True, 4, 1],
        "every": ["y", False, 1, 2],
        "all": ["z", False, 2, 1],
    }
    with pytest.raises(AssertionError, match="EveryN anchor"):
        opts.anchorTensor("a", "b", enums.OutputMode.EveryN, 0)
    with pytest.raises(AssertionError, match="short_name must be"):
        opts.anchorTensor(1, "b")
    with pytest.raises(AssertionError, match="output_mode must be"):
        opts.anchorTensor("a", "b", 2)


def test_random_seed_seeds_torch():
    opts = poptorch.Options().randomSeed(42)
    assert opts.exists("random_seed") and opts.random_seed == 42
    got = torch.rand(4)
    torch.manual_seed(42)
    assert torch.equal(got, torch.rand(4))
    with pytest.raises(AssertionError, match="random_seed must be"):
        opts.randomSeed(1.5)


def test_available_memory_proportion():
    opts = poptorch.Options().setAvailableMemoryProportion({
        "IPU0": 0.5,
        "IPU3": 1
    })
    assert opts.available_memory_proportion == {0: 0.5, 3: 1.0}
    with pytest.raises(AssertionError, match="Invalid key: GPU0"):
        opts.setAvailableMemoryProportion({"GPU0": 0.5})
    with pytest.raises(AssertionError, match="Invalid key: IPUx"):
        opts.setAvailableMemoryProportion({"IPUx": 0.5})
    with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
        opts.setAvailableMemoryProportion({"IPU0": 1.5})
    with pytest.raises(AssertionError, match="proportion of IPU0 must be"):
        opts.setAvailableMemoryProportion({"IPU0": "half"})


def test_set_execution_strategy():
    opts = poptorch.Options()
    for strategy in (poptorch.ShardedExecution(),
                     poptorch.PipelinedExecution(
                         enums.AutoStage.AutoIncrement),
                     poptorch.SerialPhasedExecution("a"),
                     poptorch.ParallelPhasedExecution("a")):
        assert opts.setExecutionStrategy(strategy)._execution_strategy is \
            strategy
    with pytest.raises(AssertionError, match="strategy must be a poptorch"):
        opts.setExecutionStrategy("pipelined")


def test_backend_option_setters():
    opts = poptorch.Options()
    opts.enableStableNorm(True).enableSyntheticData(True).logCycleCount(True)
    opts.updatableNamedBuffers(["bn.running_mean"])
    popart = opts._Popart.options
    assert popart["enableStableNorm"] is True
    assert popart["syntheticDataMode"] == 2
    assert popart["instrumentWithHardwareCycleCounter"] is True
    assert popart["updatableNamedBuffers"] == ["bn.running_mean"]
    opts.enableSyntheticData(False)
    assert popart["syntheticDataMode"] == 0
    for bad, message in (
            (lambda: opts.enableStableNorm(1),
             r"enabled must be of type bool \(got int\)"),
            (lambda: opts.enableSyntheticData("on"),
             r"enabled must be of type bool \(got str\)"),
            (lambda: opts.logCycleCount(None),
             r"log_cycle_count must be of type bool \(got NoneType\)"),
            (lambda: opts.updatableNamedBuffers("bn"),
             "updatableNamedBuffers expects a list of buffer names"),
            (lambda: opts.updatableNamedBuffers([1]),
             "updatableNamedBuffers expects a list of buffer names")):
        with pytest.raises(AssertionError, match=message):
            bad()


def test_executable_caching(tmp_path):
    opts = poptorch.Options().enableExecutableCaching(tmp_path)
    assert opts._Popart.options["cachePath"] == str(tmp_path)
    assert opts._Popart.options["enableEngineCaching"] is True
    opts.enableExecutableCaching(None)
    assert opts._Popart.options["enableEngineCaching"] is False
    with pytest.raises(AssertionError, match="path must be"):
        opts.enableExecutableCaching(3)


def test_enable_profiling(monkeypatch, caplog):
    opts = poptorch.Options()
    opts._Popart.setEngineOptions({"opt.keep": "1"})
    opts.enableProfiling("prof")
    assert opts._Popart.options["engineOptions"] == {
        "opt.keep": "1",
        "debug.allowOutOfMemory": "true",
        "autoReport.directory": "prof",
        "autoReport.all": "true"
    }
    assert poptorch.Options().enableProfiling()._Popart.options[
        "engineOptions"]["autoReport.directory"] == "."
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"autoReport.all":"true"}')
    with caplog.at_level("WARNING", logger="poptorch::python"):
        poptorch.Options().enableProfiling()
    assert "override enableProfiling" in caplog.text


def test_private_state_setters():
    opts = poptorch.Options()
    opts.showCompilationProgressBar(False).relaxOptimizerAttributesChecks()
    opts.disableModuleNamescope()
    assert opts._show_compilation_progress_bar is False
    assert opts._relax_optimizer_checks is True
    assert opts._module_namescope_enabled is False
    opts.sourceLocationExcludes(["a"]).appendToLocationExcludes("b", "c")
    assert opts._source_location_excludes == ["a", "b", "c"]
    with pytest.raises(AssertionError,
                       match=r"show must be of type bool \(got str\)"):
        opts.showCompilationProgressBar("no")
    with pytest.raises(AssertionError,
                       match=r"relax must be of type bool \(got int\)"):
        opts.relaxOptimizerAttributesChecks(0)
    with pytest.raises(AssertionError, match="expects a list of strings"):
        opts.sourceLocationExcludes("a")
    with pytest.raises(AssertionError, match="expects strings"):
        opts.appendToLocationExcludes(1)


# toDict --------------------------------------------------------------------


def test_to_dict_requires_output_mode():
    with pytest.raises(AssertionError,
                       match="An output mode must be picked before "
                       "serialisation"):
        poptorch.Options().toDict()


def test_to_dict_merges_everything():
    opts = poptorch.Options().outputMode(enums.OutputMode.All)
    opts.deviceIterations(2).Training.gradientAccumulation(3)
    opts.Distributed.configureProcessId(1, 2)
    opts.TensorLocations.numIOTiles(64)
    opts.Simulator.backend("compile")
    opts.enableStableNorm(True)
    opts.setExecutionStrategy(poptorch.ShardedExecution())
    out = opts.toDict()
    assert out["execution_mode"] == 1
    assert out["enableStableNorm"] is True
    assert out["device_iterations"] == 2 and out["output_mode"] == 2
    assert out["gradient_accumulation"] == 3
    assert (out["distributed_process_id"],
            out["num_distributed_processes"]) == (1, 2)
    assert out["numIOTiles"] == 64
    assert out["simulator.execution_backend"] == "compile"
    assert out["compilation_progress_bar_fn"] is opts._progress_bar
    # Every source contributed, and nothing else.
    expected_keys = ({"execution_mode"} | set(opts._Popart.options)
                     | set(opts._values) | set(opts.Training._values)
                     | set(opts.Distributed._values)
                     | set(opts.TensorLocations._values)
                     | set(opts.Simulator.toDict())
                     | {"compilation_progress_bar_fn"})
    assert set(out) == expected_keys
    opts.showCompilationProgressBar(False)
    assert "compilation_progress_bar_fn" not in opts.toDict()


def test_to_dict_phased_strategy_options():
    opts = poptorch.Options().outputMode(enums.OutputMode.Final)
    opts.setExecutionStrategy(
        poptorch.SerialPhasedExecution("a").useSeparateBackwardPhase(
            True).setTensorsLiveness(enums.Liveness.OffChipAfterEachPhase))
    out = opts.toDict()
    assert (out["execution_mode"], out["separate_backward_phase"],
            out["tensors_liveness"],
            out["serial_phases_execution"]) == (2, True, 3, True)


def test_progress_bar_records_compilation_time():
    bar = CompilationProgressBar()
    assert bar.compilation_time is None
    bar(0, 10)
    bar(5, 10)
    copied = copy.deepcopy(bar)
    assert copied._bar is None
    bar(10, 10)
    assert bar.compilation_time.total_seconds() >= 0
    assert bar._bar is None


def test_module_exports():
    assert set(poptorch.options.__all__) >= {
        "Options", "ConfigFileError", "TensorLocationSettings"
    }
    assert poptorch.Options is poptorch.options.Options
    assert poptorch.TensorLocationSettings is \
        poptorch.options.TensorLocationSettings
