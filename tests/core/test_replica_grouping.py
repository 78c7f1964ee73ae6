"""Replica-grouped weights (PopTorch's replicaGrouping): each group of
replicas trains its own copy of a weight. The references train separate
copies by hand."""
import pytest
import torch

import poptorch
from poptorch import CommGroupType, VariableRetrievalMode

R, K, D, G, ROWS = 4, 2, 2, 3, 5
LR = 0.1


class Model(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.W = torch.nn.Parameter(weight)
        self.b = torch.nn.Parameter(torch.zeros(3))

    def forward(self, x):
        z = x @ self.W + self.b
        return z, poptorch.identity_loss((z ** 2).mean(), reduction="none")


def _assignment(comm_group_type, replicas=R, size=K):
    """The group of each replica, as PopTorch defines the groups."""
    if comm_group_type == CommGroupType.Consecutive:
        return [r // size for r in range(replicas)]
    if comm_group_type == CommGroupType.Orthogonal:
        return [r % (replicas // size) for r in range(replicas)]
    if comm_group_type == CommGroupType.NoGrouping:
        return list(range(replicas))
    return [0] * replicas


def _reference(weights, x, assignment, reduction):
    """Separate copies: copy g takes the gradients of its replicas' micro-
    batches (laid out [D][G][R]) and averages them over G x its size."""
    copies = [w.clone() for w in weights]
    bias = torch.zeros(3)
    micro = x.reshape(D, G, R, ROWS, x.shape[-1])
    sizes = [assignment.count(g) for g in range(len(copies))]
    for iteration in range(D):
        grads = [torch.zeros_like(c) for c in copies]
        bias_grad = torch.zeros(3)
        for step in range(G):
            for replica in range(R):
                w = copies[assignment[replica]].clone().requires_grad_()
                b = bias.clone().requires_grad_()
                z = micro[iteration, step, replica] @ w + b
                (z ** 2).mean().backward()
                grads[assignment[replica]] += w.grad
                bias_grad += b.grad
        for g, copy in enumerate(copies):
            divisor = G * sizes[g] if reduction == "mean" else 1
            copy -= LR * grads[g] / divisor
        bias -= LR * bias_grad / (G * R if reduction == "mean" else 1)
    return torch.stack(copies), bias


def _train(weight, comm_group_type, mode, reduction="mean"):
    model = Model(weight.clone())
    opts = poptorch.Options().replicationFactor(R).deviceIterations(D)
    opts.Training.gradientAccumulation(G)
    if reduction == "sum":
        opts.Training.accumulationAndReplicationReductionType(
            poptorch.ReductionType.Sum)
    ipu = poptorch.trainingModel(model, opts, torch.optim.SGD(
        model.parameters(), lr=LR))
    ipu.W.replicaGrouping(comm_group_type, K, mode)
    x = torch.randn(D * G * R * ROWS, 4)
    ipu(x)
    return model, ipu, x


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("comm_group_type", [CommGroupType.Consecutive,
                                             CommGroupType.Orthogonal])
def test_groups_train_separate_copies(comm_group_type, reduction):
    groups = R // K
    weight = torch.randn(groups, 4, 3)
    model, ipu, x = _train(weight, comm_group_type,
                           VariableRetrievalMode.OnePerGroup, reduction)
    assignment = _assignment(comm_group_type)
    expected, bias = _reference(list(weight), x, assignment, reduction)
    assert model.W.shape == (groups, 4, 3)
    torch.testing.assert_close(model.W.detach(), expected)
    torch.testing.assert_close(model.b.detach(), bias)
    # The copies really differ: the groups saw different data.
    assert not torch.allclose(model.W[0], model.W[1])


def test_all_replicas_retrieval_returns_one_value_per_replica():
    weight = torch.randn(4, 3)
    per_replica = weight.expand(R, 4, 3).clone()  # replicas of a group agree
    model, _, x = _train(per_replica, CommGroupType.Orthogonal,
                         VariableRetrievalMode.AllReplicas)
    assignment = _assignment(CommGroupType.Orthogonal)
    expected, _ = _reference([weight, weight], x, assignment, "mean")
    assert model.W.shape == (R, 4, 3)
    for replica in range(R):
        torch.testing.assert_close(model.W[replica].detach(),
                                   expected[assignment[replica]])


@pytest.mark.parametrize("comm_group_type, values", [
    (CommGroupType.NoGrouping, R), (CommGroupType.All, 1)])
def test_no_grouping_and_all(comm_group_type, values):
    weight = torch.randn(values, 4, 3) if values > 1 else torch.randn(4, 3)
    model, _, x = _train(weight, comm_group_type,
                         VariableRetrievalMode.OnePerGroup)
    assignment = _assignment(comm_group_type)
    copies = list(weight) if values > 1 else [weight]
    expected, _ = _reference(copies, x, assignment, "mean")
    torch.testing.assert_close(model.W.detach(),
                               expected if values > 1 else expected[0])


def test_inference_runs_each_replica_with_its_groups_value():
    weight = torch.randn(2, 4, 3)
    model = Model(weight.clone())
    opts = poptorch.Options().replicationFactor(R)
    ipu = poptorch.inferenceModel(model, opts)
    ipu.W.replicaGrouping(CommGroupType.Consecutive, K,
                          VariableRetrievalMode.OnePerGroup)
    x = torch.randn(R * ROWS, 4)
    out, _ = ipu(x)
    for replica, group in enumerate(_assignment(CommGroupType.Consecutive)):
        rows = slice(replica * ROWS, (replica + 1) * ROWS)
        torch.testing.assert_close(out[rows], x[rows] @ weight[group])


def test_the_report_counts_the_copies():
    weight = torch.randn(2, 4, 3)
    _, ipu, _ = _train(weight, CommGroupType.Consecutive,
                       VariableRetrievalMode.OnePerGroup)
    report = ipu.simulationReport()
    # One 4 x 3 copy per replica's IPU; two distinct values over four.
    assert report.memory[0].breakdown["parameters"] == (4 * 3 + 3) * 4
    assert report.grouped_weights["W"] == {
        "groups": 2, "group_size": 2, "bytes_per_copy": 4 * 3 * 4,
        "bytes_all_replicas": R * 4 * 3 * 4}
    # Gradients are all-reduced within groups of two, the bias over four.
    link = report.chip.ipu_link_bandwidth
    assert report.allreduce_seconds == pytest.approx(
        (2 * 1 / 2 * 48 + 2 * 3 / 4 * 12) / link)


def _wrapped(weight, replicas=R):
    model = Model(weight)
    opts = poptorch.Options().replicationFactor(replicas)
    return poptorch.trainingModel(model, opts, torch.optim.SGD(
        model.parameters(), lr=LR))


def test_bad_groupings_are_clear_errors():
    ipu = _wrapped(torch.randn(3, 4, 3))
    ipu.W.replicaGrouping(CommGroupType.Consecutive, K,
                          VariableRetrievalMode.OnePerGroup)
    with pytest.raises(poptorch.Error, match="leading dimension of 2"):
        ipu(torch.randn(R * ROWS, 4))
    ipu.destroy()
    ipu = _wrapped(torch.randn(2, 4, 3))
    ipu.W.replicaGrouping(CommGroupType.Consecutive, 3,
                          VariableRetrievalMode.OnePerGroup)
    with pytest.raises(poptorch.Error, match="positive divisor of the "
                                             "replication factor"):
        ipu(torch.randn(R * ROWS, 4))
    ipu.destroy()
    ipu = _wrapped(torch.randn(R, 4, 3))
    ipu.W.replicaGrouping(CommGroupType.Consecutive, K,
                          VariableRetrievalMode.AllReplicas)
    with pytest.raises(poptorch.Error, match="share one value of W"):
        ipu(torch.randn(R * ROWS, 4))


def test_norm_based_optimizers_are_refused():
    model = Model(torch.randn(2, 4, 3))
    opts = poptorch.Options().replicationFactor(R)
    ipu = poptorch.trainingModel(model, opts, poptorch.optim.LAMB(
        model.parameters()))
    ipu.W.replicaGrouping(CommGroupType.Consecutive, K,
                          VariableRetrievalMode.OnePerGroup)
    with pytest.raises(poptorch.Error, match="LAMB"):
        ipu(torch.randn(R * ROWS, 4))
