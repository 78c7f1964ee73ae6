"""Weight and buffer synchronisation between host and device (spec 4.4,
4.6)."""
import copy
import pickle

import pytest
import torch

import poptorch
from ._models import MLP


def _train(model, calls=1, **opt_kw):
    ipu = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(calls):
        ipu(torch.randn(4, 4), torch.randn(4, 3))
    return ipu


def test_host_weights_sync_lazily_and_once():
    model = MLP()
    before = model.fc1.weight.detach().clone()
    ipu = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    calls = []
    original = ipu.copyWeightsToHost

    def counting():
        calls.append(1)
        original()
    ipu.copyWeightsToHost = counting
    for _ in range(3):
        ipu(torch.randn(4, 4), torch.randn(4, 3))
    assert not calls  # no copy during training
    assert not torch.equal(model.fc1.weight, before)  # access syncs
    assert len(calls) == 1
    list(model.parameters())
    model.state_dict()
    str(model.fc1.weight)
    assert len(calls) == 1  # nothing more until the next call
    ipu(torch.randn(4, 4), torch.randn(4, 3))
    model.fc1.weight.data
    assert len(calls) == 2


@pytest.mark.parametrize("access", [
    lambda m: [p.clone() for p in m.parameters()],
    lambda m: [v.clone() for v in m.state_dict().values()],
    lambda m: [m.fc1.weight.clone(), m.fc1.bias.clone()],
    lambda m: [m.fc1.weight.data.clone()],
])
def test_every_access_path_sees_trained_weights(access):
    torch.manual_seed(0)
    model = MLP()
    reference = copy.deepcopy(model)
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    ipu = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    ipu(x, y)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    opt.zero_grad()
    reference(x, y)[1].backward()
    opt.step()
    for got, want in zip(access(model), access(reference)):
        torch.testing.assert_close(got, want)


def test_cpu_call_of_trained_model_uses_trained_weights():
    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    ipu = _train(model)
    _, loss_before = ipu(x, y)  # loss with the weights before this step
    cpu_out, cpu_loss = model(x, y)
    # The host now holds the weights after two steps: the CPU loss differs
    # from the loss the device computed before its second step.
    assert not torch.allclose(cpu_loss, loss_before)


def test_device_does_not_see_later_host_edits_until_copied():
    model = torch.nn.Linear(3, 3)
    ipu = poptorch.inferenceModel(model)
    x = torch.randn(2, 3)
    first = ipu(x)
    with torch.no_grad():
        model.weight.add_(1.0)
    torch.testing.assert_close(ipu(x), first)  # old weights on device
    ipu.copyWeightsToDevice()
    torch.testing.assert_close(ipu(x), model(x).detach())


def test_inference_model_follows_training_model():
    torch.manual_seed(0)
    model = MLP()
    training = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    inference = poptorch.inferenceModel(model)
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    out_before, _ = inference(x, y)
    for _ in range(2):
        training(x, y)
    out_after, _ = inference(x, y)
    with torch.no_grad():
        expected, _ = model(x, y)
    assert not torch.allclose(out_before, out_after)
    torch.testing.assert_close(out_after, expected)


def test_load_state_dict_reaches_device():
    model = torch.nn.Linear(3, 2)
    ipu = poptorch.inferenceModel(model)
    x = torch.randn(2, 3)
    ipu(x)
    other = torch.nn.Linear(3, 2)
    ipu.load_state_dict(other.state_dict())
    torch.testing.assert_close(ipu(x), other(x).detach())


def test_in_place_input_changes_are_written_back():
    class Model(torch.nn.Module):
        def forward(self, x, pair, d):
            x += 1
            pair[0].mul_(2)
            d["z"].zero_()
            d["w"][0:2] = 5
            return x * 1

    x = torch.zeros(4, dtype=torch.int64)
    pair = (torch.ones(4), torch.ones(4))
    d = {"z": torch.ones(4), "w": torch.zeros(4)}
    poptorch.inferenceModel(Model())(x, pair, d)
    torch.testing.assert_close(x, torch.ones(4, dtype=torch.int64))
    torch.testing.assert_close(pair[0], torch.full((4,), 2.0))
    torch.testing.assert_close(d["z"], torch.zeros(4))
    torch.testing.assert_close(d["w"], torch.tensor([5., 5., 0., 0.]))


def test_registered_buffers_persist_and_plain_attributes_are_constants():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(1))

        def forward(self, x):
            self.count += 1
            return x + self.count

    model = Counter()
    ipu = poptorch.inferenceModel(model)
    x = torch.zeros(1)
    outs = [ipu(x).item() for _ in range(3)]
    assert outs == [1.0, 2.0, 3.0]
    assert model.count.item() == 0  # inference never syncs implicitly
    ipu.copyWeightsToHost()
    assert model.count.item() == 3


def test_named_buffers_copy():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buffer_1", torch.zeros(1))
            self.register_buffer("buffer_2", torch.zeros(1))

        def forward(self, x):
            return x + self.buffer_1 + self.buffer_2

    model = Model()
    opts = poptorch.Options().updatableNamedBuffers(["buffer_1"])
    ipu = poptorch.inferenceModel(model, opts)
    ipu(torch.zeros(1))
    model.buffer_1.fill_(1)
    model.buffer_2.fill_(10)
    ipu.copyNamedBuffersToDevice()
    assert ipu(torch.zeros(1)).item() == 1.0
    plain = poptorch.inferenceModel(Model())
    plain(torch.zeros(1))
    with pytest.raises(poptorch.Error, match="No named buffers marked as "
                       "updatable via updatableNamedBuffers option"):
        plain.copyNamedBuffersToDevice()


def test_wrapped_model_copies_and_pickles_unwrapped():
    model = MLP()
    _train(model)
    assert type(model).__name__ == "PoptorchMLP"
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert type(clone) is MLP
        assert all(type(p) is torch.nn.Parameter for p in clone.parameters())
        for p, q in zip(clone.parameters(), model.parameters()):
            torch.testing.assert_close(p, q)


def test_destroy_unwraps_and_allows_rewrapping():
    model = MLP()
    ipu = _train(model)
    with pytest.raises(RuntimeError, match="Model has already been wrapped"):
        poptorch.trainingModel(model)
    model.destroy()
    assert type(model) is MLP
    assert not ipu.isCompiled()
    _train(model)


def test_frozen_parameters_are_not_updated():
    torch.manual_seed(0)
    model = MLP()
    model.fc1.weight.requires_grad_(False)
    before = model.fc1.weight.detach().clone()
    _train(model, calls=2)
    torch.testing.assert_close(model.fc1.weight, before)


def test_detach_and_no_grad_cut_gradients():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(2, 2)
            self.b = torch.nn.Linear(2, 2)
            self.c = torch.nn.Linear(2, 2)

        def forward(self, x):
            with torch.no_grad():
                h = self.a(x)
            h = self.b(h).detach() + self.c(h)
            return poptorch.identity_loss(h.sum(), reduction="none")

    model = Model()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ipu = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    ipu(torch.randn(3, 2))
    after = model.state_dict()
    for key in ("a.weight", "b.weight"):
        torch.testing.assert_close(after[key], before[key])
    assert not torch.allclose(after["c.weight"], before["c.weight"])


def test_returned_outputs_are_pre_update():
    torch.manual_seed(0)
    model = MLP()
    reference = copy.deepcopy(model)
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    ipu = poptorch.trainingModel(model)
    _, loss = ipu(x, y)
    torch.testing.assert_close(loss, reference(x, y)[1].detach())


def test_lr_scheduler_after_a_training_call_does_not_warn(recwarn):
    model = MLP()
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1,
                                               gamma=0.5)
    ipu = poptorch.trainingModel(model, optimizer=optimizer)
    ipu(torch.randn(4, 4), torch.randn(4, 3))
    schedule.step()
    ipu.setOptimizer(optimizer)
    assert not [w for w in recwarn if "lr_scheduler.step()" in str(w.message)]
    assert optimizer.param_groups[0]["lr"] == 0.05
