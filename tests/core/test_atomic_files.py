"""Files the package writes survive a failed overwrite: the previous file
stays intact and loadable, and no temporary file is left behind."""
import errno
import os

import pytest
import torch

import poptorch
from poptorch_core import _files


def _saved_model(path):
    ipu = poptorch.inferenceModel(torch.nn.Linear(3, 2))
    x = torch.randn(4, 3)
    expected = ipu(x)
    ipu.save(str(path))
    return ipu, x, expected


@pytest.mark.parametrize("failure", [
    OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_failed_overwrite_keeps_the_previous_checkpoint(tmp_path, monkeypatch,
                                                        failure):
    path = tmp_path / "model.poptorch"
    ipu, x, expected = _saved_model(path)
    before = path.read_bytes()

    def failing_fsync(fd):
        raise failure
    monkeypatch.setattr(_files.os, "fsync", failing_fsync)
    with pytest.raises(type(failure)):
        ipu.save(str(path))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.poptorch"]
    torch.testing.assert_close(poptorch.load(str(path))(x), expected)


def test_a_write_that_fails_part_way_leaves_no_file(tmp_path):
    path = tmp_path / "record.json"
    with pytest.raises(RuntimeError, match="disk full"):
        with _files.atomic_write(path, "w") as f:
            f.write("{")
            raise RuntimeError("disk full")
    assert not path.exists() and not os.listdir(tmp_path)


def test_dataset_cache_is_written_atomically(tmp_path, monkeypatch):
    from torch_geometric.data import Data
    from poptorch_geometric.datasets import NCITPSA

    cache = tmp_path / "data.pt"
    graphs = [Data(x=torch.ones(2, 1)), Data(x=torch.zeros(3, 1))]
    NCITPSA.save(graphs, str(cache))
    before = cache.read_bytes()
    monkeypatch.setattr(_files.os, "fsync", lambda fd: (_ for _ in ()).throw(
        OSError(errno.EDQUOT, "Disk quota exceeded")))
    with pytest.raises(OSError, match="quota"):
        NCITPSA.save(graphs[:1], str(cache))
    assert cache.read_bytes() == before and os.listdir(tmp_path) == ["data.pt"]


def _failing_fsync(fd):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_report_plot_keeps_the_previous_png(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="plot needs matplotlib")
    ipu = poptorch.inferenceModel(torch.nn.Linear(3, 2))
    ipu(torch.randn(4, 3))
    path = tmp_path / "report.png"
    ipu.simulationReport().plot(str(path))
    before = path.read_bytes()
    assert before.startswith(b"\x89PNG")
    monkeypatch.setattr(_files.os, "fsync", _failing_fsync)
    with pytest.raises(OSError, match="No space"):
        ipu.simulationReport().plot(str(path))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["report.png"]


def test_a_failed_coverage_table_keeps_the_previous_one(tmp_path,
                                                        monkeypatch):
    from poptorch_geometric import coverage

    path = tmp_path / "COVERAGE.md"
    path.write_text("previous table\n")
    monkeypatch.setattr(coverage, "run", lambda *args, **kwargs: [])
    monkeypatch.setattr(coverage, "render", lambda rows: "new table\n")
    monkeypatch.setattr(coverage, "conv_count", lambda rows: (0, 0))
    monkeypatch.setattr(_files.os, "fsync", _failing_fsync)
    with pytest.raises(OSError, match="No space"):
        coverage.main(["--out", str(path), "--no-compile"])
    assert path.read_text() == "previous table\n"
    assert os.listdir(tmp_path) == ["COVERAGE.md"]
    monkeypatch.undo()
