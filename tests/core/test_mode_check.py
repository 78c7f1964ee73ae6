"""A wrapper keeps the mode its model had when it was wrapped; calling it
after model.eval() / model.train() changed the model's mode warns once."""
import torch
import torch.nn.functional as F

import poptorch


def _mode_warnings(records):
    return [r.getMessage() for r in records
            if "a wrapper keeps the mode" in r.getMessage()]


class Net(torch.nn.Module):
    """The PyG way: dropout by ``self.training`` of the top module."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return F.dropout(self.fc(x), p=0.5, training=self.training)


def test_wrap_once_then_eval_warns_once_with_the_fix(log_records):
    model = Net()
    ipu = poptorch.inferenceModel(model)  # wrapped in training mode
    x = torch.ones(4, 16)
    model.eval()
    out = ipu(x)
    ipu(x)
    warnings = _mode_warnings(log_records)
    assert len(warnings) == 1
    assert "model.training is False" in warnings[0]
    assert "poptorch.inferenceModel(model.eval())" in warnings[0]
    # PopTorch's semantics are kept: the wrapper still drops out.
    with torch.no_grad():
        assert not torch.equal(out, model(x))
        assert bool((out == 0).any())


def test_matching_modes_do_not_warn(log_records):
    model = Net()
    ipu = poptorch.inferenceModel(model.eval())
    x = torch.ones(4, 16)
    out = ipu(x)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))
    assert _mode_warnings(log_records) == []


def test_training_wrapper_called_in_eval_mode_warns(log_records):
    class WithLoss(Net):
        def forward(self, x):
            out = super().forward(x)
            return out, F.mse_loss(out, torch.zeros_like(out))

    model = WithLoss()
    ipu = poptorch.trainingModel(model)
    x = torch.ones(4, 16)
    ipu(x)
    assert _mode_warnings(log_records) == []
    model.eval()
    ipu(x)
    warnings = _mode_warnings(log_records)
    assert len(warnings) == 1
    assert "poptorch.trainingModel" in warnings[0]
