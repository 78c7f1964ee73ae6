"""The rest of the PopTorch surface (issue 13, item 8): torch.save/torch.load
of wrapped models, backend option validation, copyNamedBuffersToDevice,
F.one_hot's class count and hardware-only cycle counts.

Weights and outputs are compared with eager PyTorch; errors with the texts
the spec quotes.
"""
import copy
import io
import re

import pytest
import torch
import torch.nn.functional as F

import poptorch

NO_EXECUTABLE = "Model has not been compiled or has been destroyed."


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.register_buffer("buffer_1", torch.zeros(2))
        self.register_buffer("buffer_2", torch.zeros(2))

    def forward(self, x, y):
        out = self.fc(x) + self.buffer_1 + 10 * self.buffer_2
        return out, F.mse_loss(out, y)


def _data(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g)


def _eager_sgd(model, steps, lr=0.1):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in steps:
        optimizer.zero_grad()
        model(*_data(step))[1].backward()
        optimizer.step()


def _round_trip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _trained_once():
    """A model trained one step on the IPU, its eager twin (untrained) and
    the training wrapper."""
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    training = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    training(*_data(0))
    return model, reference, training


def test_torch_save_of_a_trained_user_model_is_a_plain_model():
    model, reference, _ = _trained_once()
    loaded = _round_trip(model)
    _eager_sgd(reference, [0])
    assert type(loaded) is Net
    assert all(type(p) is torch.nn.Parameter for p in loaded.parameters())
    torch.testing.assert_close(loaded.fc.weight, reference.fc.weight)
    # A plain model can be wrapped again.
    poptorch.trainingModel(loaded)


def test_torch_save_of_a_training_wrapper_continues_training():
    _, reference, training = _trained_once()
    loaded = _round_trip(training)
    assert isinstance(loaded, poptorch.PoplarExecutor)
    assert not loaded.isCompiled()
    loaded(*_data(1))
    _eager_sgd(reference, [0, 1])
    torch.testing.assert_close(loaded.model.fc.weight, reference.fc.weight)
    torch.testing.assert_close(loaded.model.fc.bias, reference.fc.bias)


def test_torch_save_of_an_inference_wrapper():
    torch.manual_seed(0)
    model = Net()
    inference = poptorch.inferenceModel(model)
    x, y = _data(0)
    inference(x, y)
    loaded = _round_trip(inference)
    out, loss = loaded(x, y)
    ref_out, ref_loss = model(x, y)
    torch.testing.assert_close(out, ref_out.detach())
    torch.testing.assert_close(loss, ref_loss.detach())


def test_copy_named_buffers_to_device():
    model = Net()
    x, y = _data(0)
    with pytest.raises(poptorch.Error, match=NO_EXECUTABLE):
        poptorch.inferenceModel(model).copyNamedBuffersToDevice()
    plain = poptorch.inferenceModel(model)
    plain(x, y)
    with pytest.raises(poptorch.Error, match="No named buffers marked as "
                       "updatable via updatableNamedBuffers option"):
        plain.copyNamedBuffersToDevice()

    opts = poptorch.Options()
    opts.updatableNamedBuffers(["buffer_1"])
    inference = poptorch.inferenceModel(model, opts)
    inference(x, y)
    model.buffer_1.fill_(1.0)
    model.buffer_2.fill_(1.0)
    inference.copyNamedBuffersToDevice()
    out, _ = inference(x, y)
    # Only buffer_1 reaches the device.
    torch.testing.assert_close(out, model.fc(x).detach() + 1.0)

    opts = poptorch.Options()
    opts.updatableNamedBuffers(["buffer_3"])
    with pytest.raises(poptorch.Error, match="no buffer named 'buffer_3'"):
        poptorch.inferenceModel(Net(), opts)(x, y)


@pytest.mark.parametrize("value", [object(), [1, object()], {"a": {2: "b"}}])
def test_backend_option_value_types_are_checked(value):
    opts = poptorch.Options()
    # PopTorch's backend refuses them at compile time; set() already does.
    with pytest.raises(poptorch.Error,
                       match=r"Unknown value type \w+ for option myOption"):
        opts._Popart.set("myOption", value)
    opts._Popart.options["myOption"] = value   # bypassing set()
    model = poptorch.inferenceModel(Net(), opts)
    with pytest.raises(poptorch.Error,
                       match=r"Unknown value type \w+ for option myOption"):
        model(*_data(0))


class OneHot(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.args = args

    def forward(self, x):
        return F.one_hot(x, *self.args)


@pytest.mark.parametrize("args, match", [
    ((), "one_hot cannot run on an IPU: without num_classes"),
    ((-1,), "one_hot cannot run on an IPU: without num_classes"),
    ((0,), "num_classes must be a positive int, got 0"),
    ((2,), r"not smaller than num_classes \(2\)"),
])
def test_one_hot_needs_a_valid_class_count(args, match):
    with pytest.raises(poptorch.Error, match=match) as info:
        poptorch.inferenceModel(OneHot(*args))(torch.tensor([0, 2, 1]))
    assert "test_fidelity_surface.py" in str(info.value)


def test_one_hot_with_a_class_count_matches_eager():
    x = torch.tensor([0, 2, 1, 4])
    out = poptorch.inferenceModel(OneHot(5))(x)
    torch.testing.assert_close(out, F.one_hot(x, 5).int())


def test_cycle_counts_need_ipu_hardware():
    x, y = _data(0)
    disabled = poptorch.inferenceModel(Net())
    disabled(x, y)
    with pytest.raises(poptorch.Error, match=re.escape(
            "Cycle count logging is disabled. Please set option "
            "logCycleCount to True to enable.")):
        disabled.cycleCount()
    opts = poptorch.Options().logCycleCount(True)
    model = poptorch.inferenceModel(Net(), opts)
    with pytest.raises(poptorch.Error, match=re.escape(
            "Please run the model at least once before obtaining cycle "
            "count.")):
        model.cycleCount()
    with pytest.raises(poptorch.Error, match=re.escape(
            "Cycle count logging is only supported on actual IPU "
            "hardware.")):
        model(x, y)
