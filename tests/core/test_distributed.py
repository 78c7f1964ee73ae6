"""Replication across processes (``poptorch_core.distributed``), with real
processes on gloo.

Each launch starts 2 or 4 fresh processes the way torchrun does (see
``_distributed.py``). Training over P processes of R replicas must equal
training in one process with R x P replicas, which is checked against an
independent plain-PyTorch loop (the reference of
``test_training_equivalence``) and against single-process PopTorch.

Tolerance: float32 sums of the same gradients in a different order (per
process, then across processes), so ``rtol=1e-5, atol=1e-6`` on weights and
outputs; the processes among themselves must agree bit for bit.
"""
import copy

import pytest
import torch

import poptorch
from poptorch_core.distributed._launch import Launch
from ._distributed import launch
from ._distributed_worker import (FAILED_STATUS, MLP, RowsMLP, global_batch,
                                  local_share, make_optimizer, real_rows)
from ._padding import Rows, eager_call
from .test_training_equivalence import _reference_calls

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


def _config(reduction, D=1, G=1, R=1, calls=2, optimizer="sgd", lr=0.05):
    return {"reduction": reduction, "D": D, "G": G, "R": R, "micro": 2,
            "calls": calls, "optimizer": optimizer, "lr": lr}


def _reference(config, world):
    """Plain PyTorch with R x world replicas, from rank 0's initial
    weights: per call, the outputs and losses of every micro-batch."""
    torch.manual_seed(100)
    model = MLP()
    torch_optimizer = {"sgd": lambda p: torch.optim.SGD(
        p, lr=config["lr"], momentum=0.5),
        "adam": lambda p: torch.optim.Adam(p, lr=config["lr"])}
    optimizer = torch_optimizer[config["optimizer"]](model.parameters())
    calls = []
    for call in range(config["calls"]):
        outs = _reference_calls(
            model, optimizer, global_batch(config, call, world), 1,
            config["D"], config["G"], config["R"] * world,
            config["reduction"] == "Mean")[0]
        calls.append((torch.cat([o for o, _ in outs]),
                      torch.stack([loss for _, loss in outs])))
    return calls, model.state_dict()


def _single_process(config, world):
    """PopTorch in one process with R x world replicas."""
    torch.manual_seed(100)
    model = MLP()
    opts = poptorch.Options().deviceIterations(config["D"])
    opts.replicationFactor(config["R"] * world)
    opts.Training.gradientAccumulation(config["G"])
    opts.Training.accumulationAndReplicationReductionType(
        getattr(poptorch.ReductionType, config["reduction"]))
    ipu_model = poptorch.trainingModel(
        model, opts, make_optimizer(config, model.parameters()))
    for call in range(config["calls"]):
        ipu_model(*global_batch(config, call, world))
    return copy.deepcopy(model.state_dict())


def _check_training(processes, configs, world):
    for proc in processes:
        assert proc.returncode == 0, proc.output
    for index, config in enumerate(configs):
        calls, weights = _reference(config, world)
        single = _single_process(config, world)
        runs = [proc.result[index] for proc in processes]
        for name, value in weights.items():
            for run in runs:
                # Every process ends with the same weights, bit for bit.
                assert torch.equal(run["weights"][name],
                                   runs[0]["weights"][name]), name
            torch.testing.assert_close(runs[0]["weights"][name], value,
                                       **TOLERANCE, msg=f"{config} {name}")
            torch.testing.assert_close(single[name], value, **TOLERANCE)
        for rank, run in enumerate(runs):
            # Outputs are those of the process's own replicas.
            for (out, loss), (ref_out, ref_loss) in zip(
                    zip(run["outputs"], run["losses"]), calls):
                torch.testing.assert_close(
                    out, local_share(ref_out, config, world, rank),
                    **TOLERANCE)
                torch.testing.assert_close(
                    loss, local_share(ref_loss, config, world, rank),
                    **TOLERANCE)


def test_two_processes_train_like_one_with_twice_the_replicas(tmp_path):
    configs = [_config("Mean", D=2),
               _config("Sum", R=2, calls=3, lr=0.01),
               _config("Mean", G=3, optimizer="adam", lr=0.01),
               _config("Sum", D=2, G=2, R=2, calls=1, lr=0.005)]
    processes = launch("train", 2, configs, tmp_path)
    _check_training(processes, configs, 2)


def test_four_processes_train_like_one_with_four_times_the_replicas(
        tmp_path):
    """Process 0 hosts the store here, as under PopRun."""
    configs = [_config("Mean", G=2), _config("Sum", R=2, lr=0.01)]
    processes = launch("train", 4, configs, tmp_path, agent_store=False)
    _check_training(processes, configs, 4)


def test_padding_only_micro_batches_count_for_nothing_across_processes(
        tmp_path):
    """Rank 1's replicas hold padding only in the first step (it has no
    gradient of its own), every replica in the second (no step at all):
    the update divides by the real micro-batches over both processes,
    as eager PyTorch training on the real ones only."""
    configs = [{**_config("Mean", D=2, optimizer="adam", lr=0.05),
                "R": 2, "padding": [2, 3, 4, 5, 6, 7]},
               {**_config("Mean", G=2, calls=2), "R": 2,
                "padding": [1, 2, 3, 6]}]
    world = 2
    processes = launch("train", world, configs, tmp_path)
    for proc in processes:
        assert proc.returncode == 0, proc.output
    for index, config in enumerate(configs):
        torch.manual_seed(100)
        model = RowsMLP()
        optimizer = (torch.optim.Adam(model.parameters(), lr=config["lr"])
                     if config["optimizer"] == "adam" else torch.optim.SGD(
                         model.parameters(), lr=config["lr"], momentum=0.5))
        outputs = []
        for call in range(config["calls"]):
            x, y = global_batch(config, call, world)
            outputs.append(torch.cat(eager_call(
                model, optimizer, Rows(x, y, real_rows(config, world)),
                config["D"], config["G"], config["R"] * world)))
        runs = [proc.result[index] for proc in processes]
        for name, value in model.state_dict().items():
            assert torch.equal(runs[1]["weights"][name],
                               runs[0]["weights"][name]), name
            torch.testing.assert_close(runs[0]["weights"][name], value,
                                       **TOLERANCE, msg=f"{config} {name}")
        for rank, run in enumerate(runs):
            for out, ref in zip(run["outputs"], outputs):
                torch.testing.assert_close(
                    out, local_share(ref, config, world, rank), **TOLERANCE)


def test_a_process_group_the_program_started_is_used_and_left_alone(
        tmp_path):
    configs = [_config("Sum", G=2, lr=0.01)]
    processes = launch("adopt", 2, configs, tmp_path)
    for proc in processes:
        assert proc.returncode == 0, proc.output
        assert proc.result["group_left_alone"]
    for proc in processes:
        proc.result = proc.result["runs"]
    _check_training(processes, configs, 2)


@pytest.mark.parametrize("how, victim, agent_store, expected", [
    ("kill", 2, True, "rank 2 of 3 stopped responding"),
    ("hang", 2, True, "rank 2 of 3 did not reach it within the 4 s timeout"),
    ("exit", 2, True, "rank 2 of 3 left the run"),
    ("never", 2, True, "rank 2 of 3 never joined the run"),
    # The store dies with process 0 when it hosts it (PopRun's case).
    ("kill", 0, False, "is unreachable: the process hosting it (rank 0"),
    ("never", 0, False, "could not meet the others at 127.0.0.1:"),
], ids=["killed", "hung", "ended", "never-started", "store-host-killed",
        "store-host-never-started"])
def test_survivors_name_the_lost_rank_within_the_timeout(
        tmp_path, how, victim, agent_store, expected):
    timeout = 4.0
    config = {**_config("Mean"), "steps": 1000, "victim": victim,
              "how": how, "timeout": timeout}
    survivors = [r for r in range(3) if r != victim]
    processes = launch("fail", 3, config, tmp_path, agent_store=agent_store,
                       wait_for=survivors)
    for rank in survivors:
        proc = processes[rank]
        assert proc.returncode == FAILED_STATUS, proc.output
        result = proc.result
        assert result["type"] == "UnrecoverableError"
        assert expected in result["error"], result["error"]
        # The first call (step 0) starts the process group.
        assert result["step"] == (0 if how == "never" else 3)
        # Detection: at once when a process ends, after the timeout when it
        # hangs; then three heartbeats (0.2 s each) of diagnosis. A process
        # that never comes is noticed at the first call (compilation
        # included), after up to twice the timeout: torch's TCP store client
        # tries to connect twice.
        bound = 3 * timeout + 5 if how == "never" else timeout + 3
        assert result["seconds"] < bound
        if how in ("hang", "never"):
            assert result["seconds"] > 0.9 * timeout
        else:
            assert result["seconds"] < timeout


def test_processes_that_compiled_different_things_fail_at_compile(tmp_path):
    configs = [{**_config("Mean"), "per_rank": {"1": {"R": 2}}},
               {**_config("Mean"), "per_rank": {"1": {"hidden": 9}}},
               {**_config("Mean"), "per_rank": {"0": {"micro": 4}}},
               _config("Mean")]
    processes = launch("mismatch", 2, configs, tmp_path)
    for proc in processes:
        assert proc.returncode == 0, proc.output
        replication, model, inputs, same = proc.result
        assert "replication factor: 1 on rank 0, but 2 on rank 1" in \
            replication
        assert "parameters: fc1.weight: (8, 4) torch.float32 " \
               "requires_grad=True on rank 0, but fc1.weight: (9, 4)" in model
        assert "inputs: x: ('tensor', torch.float32, torch.Size([4, 4])) " \
            "on rank 0, but x: ('tensor', torch.float32, torch.Size([2, 4]))" \
            in inputs
        assert same is None  # agreeing processes still train afterwards


def _two_process_options():
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(1, 2)
    return opts


def test_mutated_buffers_count_the_replicas_of_other_processes():
    """Buffers that forward updates (BatchNorm) would drift apart between
    processes as between replicas: the same error, before any process
    group starts."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 3),
                                torch.nn.BatchNorm1d(3))
    ipu_model = poptorch.trainingModel(
        _LossOf(model), _two_process_options(),
        torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(poptorch.Error, match="broadcastBuffers"):
        ipu_model(torch.randn(4, 4))
    assert not poptorch.distributed.is_initialized()


def test_replica_grouped_weights_are_refused_across_processes():
    model = _LossOf(torch.nn.Linear(4, 3))
    model.W = torch.nn.Parameter(torch.ones(2, 4))  # one copy per group
    opts = _two_process_options().replicationFactor(2)
    ipu_model = poptorch.trainingModel(model, opts)
    ipu_model.W.replicaGrouping(poptorch.CommGroupType.Consecutive, 1,
                                poptorch.VariableRetrievalMode.OnePerGroup)
    with pytest.raises(poptorch.Error, match="not supported in a run of "
                                             "several processes"):
        ipu_model(torch.randn(4, 4))
    assert not poptorch.distributed.is_initialized()


def test_inference_models_exchange_nothing(monkeypatch):
    """An inference model of a distributed run needs no other process (and
    no MASTER_ADDR): its outputs are its own replicas'."""
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    model = torch.nn.Linear(4, 3)
    out = poptorch.inferenceModel(model, _two_process_options())(
        x := torch.randn(4, 4))
    torch.testing.assert_close(out, model(x))
    assert not poptorch.distributed.is_initialized()


def test_training_without_a_meeting_point_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    model = MLP()
    ipu_model = poptorch.trainingModel(model, _two_process_options())
    with pytest.raises(poptorch.Error, match="needs MASTER_ADDR and "
                                             "MASTER_PORT"):
        ipu_model(torch.randn(2, 4), torch.randn(2, 3))


class _LossOf(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        out = self.model(x).sum()
        if hasattr(self, "W"):
            out = out + (x * self.W).sum()
        return poptorch.identity_loss(out, reduction="sum")


def test_launch_reads_torchrun_and_poprun_environments():
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(1, 4)
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
           "LOCAL_RANK": "3"}
    launch_ = Launch.of(opts, env)
    assert (launch_.rank, launch_.world_size, launch_.local_rank,
            launch_.master_addr, launch_.master_port, launch_.backend) == (
                1, 4, 3, "10.0.0.1", 29400, "gloo")
    assert launch_.timeout == 60.0
    poprun = {"MASTER_ADDR": "h", "MASTER_PORT": "1",
              "OMPI_COMM_WORLD_LOCAL_RANK": "2"}
    assert Launch.of(opts, poprun).local_rank == 2
    with pytest.raises(poptorch.Error, match="MASTER_ADDR and MASTER_PORT"):
        Launch.of(opts, {"MASTER_ADDR": "h"})
    with pytest.raises(poptorch.Error, match="not a port number"):
        Launch.of(opts, {"MASTER_ADDR": "h", "MASTER_PORT": "x"})


def test_distributed_timeout_option():
    opts = poptorch.Options()
    assert opts.Simulator.distributed_timeout == 60.0
    assert opts.Simulator.distributedTimeout(5).distributed_timeout == 5.0
    for bad in (0, -1, "5", True):
        with pytest.raises(ValueError, match="distributedTimeout"):
            opts.Simulator.distributedTimeout(bad)
