"""Blocks, stages, phases and execution strategies (spec 7.1-7.3, 7.6)."""
import copy
import io
import pickle

import pytest
import torch

import poptorch_core as poptorch
from poptorch_core import enums
from poptorch_core.annotations import block_tracking, _BeginBlockHook
from poptorch_core._executor.pipeline import ipus_to_reserve


class _TwoLayers(torch.nn.Module):
    """Module-level so that instances pickle."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(3, 3)
        self.l2 = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class _WithBlocks(_TwoLayers):

    def forward(self, x):
        poptorch.Block.useAutoId()
        with poptorch.Block(ipu_id=0):
            x = torch.relu(self.l1(x))
        with poptorch.Block(ipu_id=1):
            return self.l2(x)


class _DecoratedForward(_TwoLayers):

    @poptorch.BlockFunction("fwd", ipu_id=1)
    def forward(self, x):
        return super().forward(x)


@poptorch.BlockFunction("scaled", ipu_id=2)
def _scale(x):
    return x * 3


def _double(x):
    return x * 2


# Blocks on the CPU and while tracking ---------------------------------------


def test_blocks_are_no_ops_on_the_cpu():
    reference = _TwoLayers()
    annotated = _WithBlocks()
    annotated.load_state_dict(reference.state_dict())
    poptorch.BeginBlock(annotated.l2, "x", ipu_id=1)
    x = torch.randn(4, 3)
    assert torch.equal(annotated(x), reference(x))
    poptorch.Block.start("free", 1)  # no tracker installed: nothing happens
    with poptorch.Block("a", 0) as block:
        assert isinstance(block, poptorch.Block)


def test_tracker_records_with_blocks_and_auto_ids():
    model = _WithBlocks()
    with block_tracking() as tracker:
        model(torch.randn(2, 3))
        model(torch.randn(2, 3))  # useAutoId restarts the numbering
    assert tracker.seen_blocks() == [("0", 0), ("1", 1)]


def test_tracker_state_transitions():
    with block_tracking() as tracker:
        assert tracker.current() is None and tracker.op_block() is None
        poptorch.Block.start("a", 2)
        assert tracker.current() == ("a", 2) == tracker.op_block()
        with poptorch.Block("b"):
            assert tracker.current() == ("b", None)
        assert tracker.current() is None
        with pytest.raises(poptorch.Error,
                           match="No active Block, all the ops must belong "
                           "to a Block"):
            tracker.op_block()
        poptorch.Block.start()  # automatic id, never ended
        assert tracker.op_block() == ("0", None)
        poptorch.Block.start("a")  # a repeat without an IPU keeps IPU 2
    assert tracker.seen_blocks() == [("a", 2), ("b", None), ("0", None)]


def test_tracker_refuses_one_block_on_two_ipus():
    with block_tracking():
        poptorch.Block.start("a", 0)
        with pytest.raises(poptorch.Error, match="Block 'a' was started on "
                           "IPU 0 and again on IPU 1"):
            poptorch.Block.start("a", 1)


def test_tracking_is_scoped_and_nests():
    with block_tracking() as outer:
        poptorch.Block.start("outer")
        with block_tracking() as inner:
            poptorch.Block.start("inner")
        poptorch.Block.start("outer2")
    poptorch.Block.start("ignored")
    assert inner.seen_blocks() == [("inner", None)]
    assert outer.seen_blocks() == [("outer", None), ("outer2", None)]


def test_block_argument_validation():
    with pytest.raises(TypeError, match="user_id must be a string"):
        poptorch.Block([0])
    with pytest.raises(ValueError, match="ipu_id must be a non-negative"):
        poptorch.Block("a", -1)
    with pytest.raises(ValueError, match="ipu_id must be a non-negative"):
        poptorch.Block.start("a", "1")
    with pytest.raises(TypeError, match="user_id must be a string"):
        poptorch.BeginBlock(torch.nn.ReLU(), user_id=object())
    with pytest.raises(TypeError, match="user_id must be a string"):
        poptorch.BlockFunction(True)
    # Numbers are accepted, as PopTorch does; the block id is their str().
    with block_tracking() as tracker:
        poptorch.Block.start(3, 1)
        assert tracker.seen_blocks() == [("3", 1)]


# BeginBlock -----------------------------------------------------------


def test_begin_block_on_a_module():
    model = _TwoLayers()
    assert poptorch.BeginBlock(model.l2, ipu_id=1) is model.l2
    hooks = list(model.l2._forward_pre_hooks.values())
    assert len(hooks) == 1
    assert repr(hooks[0]) == "BeginBlock(user_id=None, ipu_id=1)"
    assert "(l2): BeginBlock(user_id=None, ipu_id=1) Linear(" in \
        poptorch.module_repr(model)
    with pytest.raises(poptorch.Error,
                       match="module has already been assigned to a block."):
        poptorch.BeginBlock(model.l2, "again")
    with block_tracking() as tracker:
        model(torch.randn(2, 3))
        assert tracker.current() == ("0", 1)  # BeginBlock never ends


def test_begin_block_on_a_function():
    fn = poptorch.BeginBlock(_double, "fn", ipu_id=3)
    assert isinstance(fn, poptorch.LegacyBeginBlockFn)
    assert (fn._user_id, fn._ipu_id) == ("fn", 3)
    x = torch.randn(3)
    with block_tracking() as tracker:
        assert torch.equal(fn(x), x * 2)
    assert tracker.seen_blocks() == [("fn", 3)]
    restored = pickle.loads(pickle.dumps(fn))
    assert torch.equal(restored(x), x * 2)
    assert (restored._user_id, restored._ipu_id) == ("fn", 3)


def test_begin_block_rejects_other_objects():
    with pytest.raises(poptorch.Error,
                       match="module is not an instance of torch.nn.Module "
                       "or function."):
        poptorch.BeginBlock(42)


def _round_trips(model):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return [
        copy.copy(model),
        copy.deepcopy(model),
        pickle.loads(pickle.dumps(model)),
        torch.load(buffer, weights_only=False),
    ]


def test_begin_block_hooks_survive_copies_and_saving():
    model = _TwoLayers()
    poptorch.BeginBlock(model.l1, "first", ipu_id=0)
    poptorch.BeginBlock(model.l2, "second", ipu_id=1)
    x = torch.randn(2, 3)
    for copied in _round_trips(model):
        hooks = list(copied.l2._forward_pre_hooks.values())
        assert [type(h) for h in hooks] == [_BeginBlockHook]
        assert repr(hooks[0]) == "BeginBlock(user_id=second, ipu_id=1)"
        with block_tracking() as tracker:
            assert torch.equal(copied(x), model(x))
        assert tracker.seen_blocks() == [("first", 0), ("second", 1)]


def test_remove_blocks():
    model = _TwoLayers()
    poptorch.BeginBlock(model.l1, ipu_id=0)
    poptorch.BeginBlock(model.l2, ipu_id=1)
    calls = []
    model.l2.register_forward_pre_hook(lambda m, i: calls.append(1))
    model.l2.register_forward_pre_hook(lambda m, a, k: calls.append(2),
                                       with_kwargs=True)
    poptorch.removeBlocks(model)
    for layer in (model.l1, model.l2):
        assert not any(
            isinstance(h, _BeginBlockHook)
            for h in layer._forward_pre_hooks.values())
    with block_tracking() as tracker:
        model(torch.randn(2, 3))
    assert tracker.seen_blocks() == [] and calls == [1, 2]
    poptorch.BeginBlock(model.l1, ipu_id=0)  # can be assigned again
    with pytest.raises(TypeError, match="expects a torch.nn.Module"):
        poptorch.removeBlocks("model")


def test_block_function():
    x = torch.randn(2, 3)
    with block_tracking() as tracker:
        assert torch.equal(_scale(x), x * 3)
        assert tracker.current() is None  # the with-scope ended
    assert tracker.seen_blocks() == [("scaled", 2)]
    assert _scale.__name__ == "_scale"
    assert pickle.loads(pickle.dumps(_scale)) is _scale

    model = _DecoratedForward()
    reference = _TwoLayers()
    reference.load_state_dict(model.state_dict())
    with block_tracking() as tracker:
        assert torch.equal(model(x), reference(x))
    assert tracker.seen_blocks() == [("fwd", 1)]
    restored = pickle.loads(pickle.dumps(model))
    assert torch.equal(restored(x), reference(x))


# Stages and phases ----------------------------------------------------------


def test_stage():
    stage = poptorch.Stage("a", "b")
    assert stage.blocks == ["a", "b"]
    assert stage.ipu(2) is stage and stage._ipu == 2
    assert repr(stage) == "Stage('a', 'b').ipu(2)"
    with pytest.raises(AssertionError, match="Block ids are expected to be "
                       "strings"):
        poptorch.Stage("a", 1)
    with pytest.raises(ValueError, match="ipu must be a non-negative"):
        stage.ipu(-1)


def test_phase():
    a, b = poptorch.Stage("a"), poptorch.Stage("b")
    phase = poptorch.Phase(a, b)
    assert phase.stages == [a, b] and phase.stage(1) is b
    assert phase.ipus(2, 3) is phase and (a._ipu, b._ipu) == (2, 3)
    single = poptorch.Phase("x", "y")
    assert len(single.stages) == 1 and single.stage(0).blocks == ["x", "y"]
    with pytest.raises(AssertionError, match="not a mix"):
        poptorch.Phase(a, "x")
    with pytest.raises(AssertionError, match="exactly one IPU per stage"):
        phase.ipus(0)


# Strategies: resolution rules -----------------------------------------


def test_default_strategy_is_same_as_ipu():
    strategy = poptorch.Options()._execution_strategy
    seen = [("0", 0), ("1", 1), ("2", 1)]
    assert strategy._resolve(seen) == {"0": (0, 0), "1": (1, 1), "2": (1, 1)}
    with pytest.raises(AssertionError,
                       match="poptorch.AutoStage.SameAsIpu was selected but "
                       "no IPU was specified for block b"):
        strategy._resolve([("a", 0), ("b", None)])
    assert repr(strategy) == "PipelinedExecution(AutoStage.SameAsIpu)"


def test_auto_increment_numbers_stages_from_one():
    strategy = poptorch.PipelinedExecution(enums.AutoStage.AutoIncrement)
    # Ipus 0, 1, 0 would give decreasing stages with SameAsIpu.
    seen = [("a", 0), ("b", 1), ("a", None), ("c", 0), ("d", None)]
    assert strategy._resolve(seen) == {
        "a": (1, 0),
        "b": (2, 1),
        "c": (3, 0),
        "d": (4, 4)
    }


def test_explicit_pipeline_stages():
    strategy = poptorch.PipelinedExecution("a", ["b", "c"],
                                           poptorch.Stage("d").ipu(5),
                                           poptorch.Stage("e"))
    strategy.stage("e").ipu(7)  # stages stay editable through the strategy
    seen = [("a", 3), ("b", None), ("c", 1), ("d", 0), ("e", None)]
    assert strategy._resolve(seen) == {
        "a": (0, 3),  # the block's IPU
        "b": (1, 1),  # no IPU anywhere: the stage id
        "c": (1, 1),
        "d": (2, 5),  # the stage's IPU overrides the block's
        "e": (3, 7)
    }
    assert strategy.backendOptions() == {"execution_mode": 0}


def test_explicit_strategy_errors():
    with pytest.raises(AssertionError,
                       match="b associated with more than one stage"):
        poptorch.PipelinedExecution(["a", "b"], poptorch.Stage("b"))
    with pytest.raises(AssertionError, match="must be the only argument"):
        poptorch.PipelinedExecution("a", enums.AutoStage.AutoIncrement)
    with pytest.raises(TypeError, match="Invalid stage 3"):
        poptorch.PipelinedExecution("a", 3)
    strategy = poptorch.PipelinedExecution("0", "2")
    with pytest.raises(AssertionError,
                       match=r"Unknown Block '1' list of expected Blocks: "
                       r"\['0', '2'\]"):
        strategy._resolve([("0", 0), ("1", 1)])
    with pytest.raises(AssertionError,
                       match=r"Blocks \['2'\] of the execution strategy were "
                       "not used"):
        strategy._resolve([("0", 0)])
    with pytest.raises(poptorch.Error, match="started on IPU 0 and again"):
        strategy._resolve([("0", 0), ("2", 1), ("0", 1)])
    with pytest.raises(AssertionError, match="Unknown block x"):
        strategy.stage("x")


def test_sharded_execution():
    strategy = poptorch.ShardedExecution(poptorch.Stage("a"), "b")
    assert strategy.backendOptions() == {"execution_mode": 1}
    assert strategy._resolve([("a", None), ("b", None)]) == {
        "a": (0, 0),
        "b": (1, 1)
    }
    assert repr(strategy) == "ShardedExecution(Stage('a'), Stage('b'))"
    assert isinstance(strategy, poptorch.PipelinedExecution)


def test_phased_execution_construction():
    with pytest.raises(AssertionError,
                       match="There is currently no AutoStage for "
                       "PhasedExecution, please explicitly specify the "
                       "phases"):
        poptorch.SerialPhasedExecution()
    stage = poptorch.Stage("s")
    strategy = poptorch.SerialPhasedExecution(
        poptorch.Phase("a"), [poptorch.Stage("b"),
                              poptorch.Stage("c")], ["d", "e"], stage, "f")
    assert [len(strategy.phase(i).stages) for i in range(5)] == [1, 2, 1, 1, 1]
    assert strategy.phase(2).stage(0).blocks == ["d", "e"]
    assert strategy.stage("s") is stage
    with pytest.raises(AssertionError, match="non-negative integers"):
        strategy.phase(-1)
    with pytest.raises(AssertionError, match="Unknown block zz"):
        strategy.stage("zz")
    with pytest.raises(TypeError, match="Invalid phase 4"):
        poptorch.SerialPhasedExecution(4)
    with pytest.raises(AssertionError, match="more than one stage"):
        poptorch.SerialPhasedExecution("a", ["b", "a"])


def test_phased_resolution_and_options():
    strategy = poptorch.SerialPhasedExecution(
        poptorch.Phase(poptorch.Stage("a"), poptorch.Stage("b")).ipus(0, 1),
        poptorch.Phase("c"))
    seen = [("a", None), ("b", None), ("c", 1)]
    assert strategy._resolve(seen) == {"a": (0, 0), "b": (1, 1), "c": (0, 1)}
    assert [strategy._phaseOf(b) for b in "abc"] == [0, 0, 1]
    assert strategy.useSeparateBackwardPhase() is strategy
    assert strategy.setTensorsLiveness(
        enums.Liveness.OffChipAfterEachPhase) is strategy
    assert strategy.backendOptions() == {
        "execution_mode": 2,
        "separate_backward_phase": True,
        "tensors_liveness": 3,
        "serial_phases_execution": True
    }
    with pytest.raises(AssertionError, match="liveness must be"):
        strategy.setTensorsLiveness(1)
    with pytest.raises(AssertionError, match="use must be a bool"):
        strategy.useSeparateBackwardPhase(1)


def test_parallel_phased_execution():
    strategy = poptorch.ParallelPhasedExecution(
        poptorch.Phase("a").ipus(0), poptorch.Phase("b").ipus(1))
    assert not hasattr(strategy, "setTensorsLiveness")
    assert strategy.sendTensorsOffChipAfterFwd() is strategy
    assert strategy.backendOptions() == {
        "execution_mode": 2,
        "separate_backward_phase": False,
        "tensors_liveness": 1,
        "serial_phases_execution": False
    }
    assert strategy._resolve([("a", None), ("b", None)]) == {
        "a": (0, 0),
        "b": (0, 1)
    }
    strategy.sendTensorsOffChipAfterFwd(False)
    assert strategy.backendOptions()["tensors_liveness"] == 0
    with pytest.raises(AssertionError, match="off_chip must be a bool"):
        strategy.sendTensorsOffChipAfterFwd("yes")
    wrong = poptorch.ParallelPhasedExecution(poptorch.Phase("a").ipus(1))
    with pytest.raises(poptorch.Error,
                       match="When phases are executed in parallel: even "
                       "phases must run on even IPUs and odd phases on odd "
                       "IPUs"):
        wrong._resolve([("a", None)])
    strategy._tensors_liveness = enums.Liveness.OffChipAfterEachPhase
    with pytest.raises(poptorch.Error,
                       match="This is only supported for serial phase "
                       "execution"):
        strategy._resolve([("a", None), ("b", None)])


def test_traced_model_resolves_through_its_strategy():
    model = _WithBlocks()
    with block_tracking() as tracker:
        model(torch.randn(2, 3))
    seen = tracker.seen_blocks()
    assert poptorch.PipelinedExecution()._resolve(seen) == {
        "0": (0, 0),
        "1": (1, 1)
    }
    assert poptorch.PipelinedExecution("1", "0")._resolve(seen) == {
        "0": (1, 0),
        "1": (0, 1)
    }


# IPU count (spec 7.6) -------------------------------------------------


def test_ipus_to_reserve():
    opts = poptorch.Options().replicationFactor(2)
    assert ipus_to_reserve(2, opts) == 4
    assert ipus_to_reserve(1, poptorch.Options()) == 1
    with pytest.raises(poptorch.Error,
                       match=r"The model specifies the use of 6 IPUs, however "
                       r"PopTorch must reserve a minimum of 8 .*"
                       r"autoRoundNumIPUs\(True\)\."):
        ipus_to_reserve(3, opts)
    opts.autoRoundNumIPUs(True)
    assert ipus_to_reserve(3, opts) == 8
    with pytest.raises(poptorch.Error,
                       match=r"Too many IPUs requested \(128\)"):
        ipus_to_reserve(64, opts)
    # Offline targets never acquire a device: no check.
    offline = poptorch.Options().replicationFactor(3).useOfflineIpuTarget()
    assert ipus_to_reserve(1, offline) == 3
    with pytest.raises(ValueError, match="at least 1"):
        ipus_to_reserve(0, opts)
