"""Saving and loading compiled models (spec 4.3)."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

import poptorch
from ._models import MLP


def _trained(tmp_path):
    torch.manual_seed(0)
    model = MLP()
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ipu = poptorch.trainingModel(model, optimizer=optimizer)
    x, y = torch.randn(4, 4), torch.randn(4, 3)
    ipu(x, y)
    return ipu, model, (x, y)


def test_round_trip_continues_training_identically(tmp_path):
    ipu, model, batch = _trained(tmp_path)
    path = tmp_path / "model.poptorch"
    ipu.save(str(path))
    restored = poptorch.load(str(path))
    assert restored.isCompiled()
    _, loss_a = ipu(*batch)
    _, loss_b = restored(*batch)
    torch.testing.assert_close(loss_a, loss_b)
    # The momentum state came along: a second step matches too.
    _, loss_a = ipu(*batch)
    _, loss_b = restored(*batch)
    torch.testing.assert_close(loss_a, loss_b)
    for p, q in zip(model.parameters(), restored.model.parameters()):
        torch.testing.assert_close(p, q)


_CONTINUE_ELSEWHERE = textwrap.dedent("""
    import sys
    import torch
    import poptorch
    model_path, batches_path, out_path = sys.argv[1:]
    restored = poptorch.load(model_path)
    losses = [restored(*batch)[1].detach()
              for batch in torch.load(batches_path)]
    torch.save({"losses": losses,
                "params": [p.detach() for p in restored.model.parameters()]},
               out_path)
""")


def test_a_fresh_process_continues_training_identically(tmp_path):
    """Saved in this process, loaded in a new interpreter: weights, Adam's
    moments and step counts and the options (two device iterations) all
    come along, so two more calls there equal two more calls here."""
    torch.manual_seed(1)
    model = MLP()
    opts = poptorch.Options().deviceIterations(2)
    ipu = poptorch.trainingModel(
        model, opts, poptorch.optim.Adam(model.parameters(), lr=0.01))
    batches = [(torch.randn(8, 4), torch.randn(8, 3)) for _ in range(3)]
    ipu(*batches[0])
    ipu.save(str(tmp_path / "model.poptorch"))
    torch.save(batches[1:], tmp_path / "batches.pt")
    root = pathlib.Path(__file__).resolve().parents[2]  # imports tests.core
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    done = subprocess.run(
        [sys.executable, "-c", _CONTINUE_ELSEWHERE,
         str(tmp_path / "model.poptorch"), str(tmp_path / "batches.pt"),
         str(tmp_path / "out.pt")], env=env, capture_output=True, text=True,
        timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    elsewhere = torch.load(tmp_path / "out.pt")
    losses = [ipu(*batch)[1] for batch in batches[1:]]
    for here, there in zip(losses, elsewhere["losses"]):
        torch.testing.assert_close(there, here)
    assert len(elsewhere["params"]) == len(list(model.parameters()))
    for here, there in zip(model.parameters(), elsewhere["params"]):
        torch.testing.assert_close(there, here.detach())


def test_directory_target_and_export_without_model(tmp_path):
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    ipu.compileAndExport(str(tmp_path), torch.ones(1, 2), export_model=False)
    assert os.listdir(tmp_path) == ["model.poptorch"]
    with pytest.raises(AssertionError, match="export_model=False"):
        poptorch.load(str(tmp_path / "model.poptorch"))
    fresh = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    fresh.loadExecutable(str(tmp_path / "model.poptorch"))
    assert fresh.isCompiled()


def test_inference_round_trip(tmp_path):
    model = torch.nn.Linear(3, 2)
    ipu = poptorch.inferenceModel(model)
    x = torch.randn(5, 3)
    expected = ipu(x)
    ipu.save(str(tmp_path / "m.pt"))
    torch.testing.assert_close(poptorch.load(str(tmp_path / "m.pt"))(x),
                               expected)


@pytest.mark.parametrize("damage,message", [
    (lambda b: b[: len(b) // 2], "truncated"),
    (lambda b: b[:40] + bytes([b[40] ^ 0xFF]) + b[41:], "corrupted"),
    (lambda b: b"not a model at all", "not a model saved by PopTorch"),
    (lambda b: b[:12] + (99).to_bytes(4, "little") + b[16:], "file format 99"),
])
def test_damaged_files_give_clear_errors(tmp_path, damage, message):
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    ipu.compile(torch.ones(1, 2))
    path = tmp_path / "m.poptorch"
    ipu.save(str(path))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(poptorch.Error, match=message):
        poptorch.load(str(path))


def test_version_mismatch(tmp_path, monkeypatch):
    from poptorch_core._executor import serialization
    ipu = poptorch.inferenceModel(torch.nn.Linear(2, 2))
    ipu.compile(torch.ones(1, 2))
    monkeypatch.setattr(serialization, "__version__", "0.0.1")
    ipu.save(str(tmp_path / "old.poptorch"))
    monkeypatch.undo()
    with pytest.raises(poptorch.Error, match="PopTorch version mismatch: File "
                       "was created with version: 0.0.1 and this is version"):
        poptorch.load(str(tmp_path / "old.poptorch"))
