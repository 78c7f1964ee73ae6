"""A returned loss computed from the loss node by further operations: PopTorch
trains on the inner loss node, and the compile warns, naming both."""
import torch
import torch.nn.functional as F

import poptorch


def _messages(records):
    return [r.getMessage() for r in records]


def _loss_warnings(records):
    return [m for m in _messages(records)
            if "The loss that training minimises" in m]


class MaskedMean(torch.nn.Module):
    """The trap: a masked mean of a per-node loss, without identity_loss."""

    def __init__(self, wrap: bool = False):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.wrap = wrap

    def forward(self, x, y, mask):
        out = self.fc(x)
        per_node = F.cross_entropy(out, y, reduction="none")
        loss = (per_node * mask).sum() / mask.sum()  # THE-RETURNED-VALUE
        if self.wrap:
            loss = poptorch.identity_loss(loss, reduction="none")
        return out, loss


def _data():
    x = torch.randn(8, 4)
    y = torch.randint(0, 3, (8,))
    mask = (torch.arange(8) < 3).float()
    return x, y, mask


def _train_once(model, *inputs):
    ipu = poptorch.trainingModel(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0))
    out = ipu(*inputs)
    ipu.copyWeightsToHost()
    ipu.destroy()
    return out


def test_masked_mean_without_identity_loss_warns(log_records):
    model = MaskedMean()
    _train_once(model, *_data())
    warnings = _loss_warnings(log_records)
    assert len(warnings) == 1
    message = warnings[0]
    # Names the loss node, the returned value, both user lines and the fix.
    assert "F.cross_entropy(reduction='none')" in message
    assert "per_node = F.cross_entropy(out, y, reduction=\"none\")" in message
    assert "THE-RETURNED-VALUE" in message
    assert __file__ in message
    assert "poptorch.identity_loss" in message


def test_the_semantics_stay_poptorchs(log_records):
    """Backward starts from the inner loss: the update is that of the sum of
    the unmasked per-node losses, computed here with plain autograd."""
    torch.manual_seed(1)
    model = MaskedMean()
    reference = MaskedMean()
    reference.load_state_dict(model.state_dict())
    x, y, mask = _data()
    _train_once(model, x, y, mask)

    F.cross_entropy(reference.fc(x), y, reduction="none").sum().backward()
    with torch.no_grad():
        expected = reference.fc.weight - reference.fc.weight.grad
    torch.testing.assert_close(model.fc.weight.detach(), expected)


def test_identity_loss_fixes_it_without_warning(log_records):
    torch.manual_seed(1)
    model = MaskedMean(wrap=True)
    reference = MaskedMean()
    reference.load_state_dict(model.state_dict())
    x, y, mask = _data()
    _train_once(model, x, y, mask)
    assert _loss_warnings(log_records) == []

    logits = reference.fc(x)
    F.cross_entropy(logits[:3], y[:3]).backward()  # the masked mean
    with torch.no_grad():
        expected = reference.fc.weight - reference.fc.weight.grad
    torch.testing.assert_close(model.fc.weight.detach(), expected)


class ReturnsLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x, y):
        out = self.fc(x)
        loss = F.cross_entropy(out, y)
        return out, loss, loss.detach() * 2


def test_returning_the_loss_itself_does_not_warn(log_records):
    x, y, _ = _data()
    _train_once(ReturnsLoss(), x, y)
    assert _loss_warnings(log_records) == []


def test_inference_never_warns(log_records):
    ipu = poptorch.inferenceModel(MaskedMean().eval())
    ipu(*_data())
    assert _loss_warnings(log_records) == []
