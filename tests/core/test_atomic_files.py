"""Files the package writes survive a failed overwrite: the previous file
stays intact and loadable, and no temporary file is left behind."""
import errno
import os
import re
import stat

import pytest
import torch

import poptorch
from poptorch_core import files


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
    monkeypatch.setattr(files.os, "fsync", failing_fsync)
    with pytest.raises(type(failure)):
        ipu.save(str(path))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.poptorch"]
    torch.testing.assert_close(poptorch.load(str(path))(x), expected)


def test_a_write_that_fails_part_way_leaves_no_file(tmp_path):
    path = tmp_path / "record.json"
    with pytest.raises(RuntimeError, match="disk full"):
        with files.atomic_write(path, "w") as f:
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
    monkeypatch.setattr(files.os, "fsync", lambda fd: (_ for _ in ()).throw(
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
    monkeypatch.setattr(files.os, "fsync", _failing_fsync)
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
    monkeypatch.setattr(files.os, "fsync", _failing_fsync)
    with pytest.raises(OSError, match="No space"):
        coverage.main(["--out", str(path), "--no-compile"])
    assert path.read_text() == "previous table\n"
    assert os.listdir(tmp_path) == ["COVERAGE.md"]
    monkeypatch.undo()


def _model_and_output(seed):
    """A model, an input and the model's output computed eagerly."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with torch.no_grad():
        return model, x, model(x)


def _save(model, x, path):
    ipu = poptorch.inferenceModel(model)
    ipu(x)
    ipu.save(str(path))


@pytest.mark.parametrize("target_exists", [True, False])
def test_saving_through_a_symlink_writes_its_target(tmp_path, target_exists):
    """The link stays a link and its target gets the new file, as
    ``open(link, "wb")`` would; a dangling link's target is created."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "model.poptorch"
    link = tmp_path / "latest.poptorch"
    link.symlink_to(target)
    if target_exists:
        first, x, _ = _model_and_output(0)
        _save(first, x, target)
    second, x, expected = _model_and_output(1)
    _save(second, x, link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.is_file() and not target.is_symlink()
    torch.testing.assert_close(poptorch.load(str(target))(x), expected)
    assert sorted(os.listdir(tmp_path / "real")) == ["model.poptorch"]


def _fifo(path):
    os.mkfifo(path)
    return "a FIFO"


def _directory(path):
    path.mkdir()
    return "a directory"


@pytest.mark.parametrize("make", [_fifo, _directory])
def test_a_target_that_is_not_a_regular_file_is_refused(tmp_path, make):
    """Replacing a FIFO, a device or a directory with a regular file would
    break whatever uses it: the write is refused, naming the path and what
    is there, and the node is left as it was."""
    path = tmp_path / "target"
    kind = make(path)
    before = os.stat(path)
    with pytest.raises(poptorch.Error, match=re.escape(
            f"Cannot write {path}: it is {kind}, not a regular file")):
        with files.atomic_write(path, "w") as f:
            f.write("text")
    after = os.stat(path)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert os.listdir(tmp_path) == ["target"]


def test_save_to_a_fifo_is_refused(tmp_path):
    model, x, _ = _model_and_output(0)
    ipu = poptorch.inferenceModel(model)
    ipu(x)
    path = tmp_path / "pipe"
    os.mkfifo(path)
    with pytest.raises(poptorch.Error, match=re.escape(
            f"Cannot write {path}: it is a FIFO, not a regular file")):
        ipu.save(str(path))
    assert stat.S_ISFIFO(os.stat(path).st_mode)


def test_an_existing_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "model.poptorch"
    first, x, _ = _model_and_output(0)
    _save(first, x, path)
    os.chmod(path, 0o640)
    second, x, expected = _model_and_output(1)
    _save(second, x, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    torch.testing.assert_close(poptorch.load(str(path))(x), expected)


def test_a_new_file_gets_the_mode_open_gives(tmp_path):
    """``open()`` creates files with mode 0o666 less the umask."""
    previous = os.umask(0o027)
    try:
        with files.atomic_write(tmp_path / "new.txt", "w") as f:
            f.write("text")
        with open(tmp_path / "reference.txt", "w") as f:
            f.write("text")
    finally:
        os.umask(previous)
    modes = [stat.S_IMODE(os.stat(tmp_path / name).st_mode)
             for name in ("new.txt", "reference.txt")]
    assert modes == [0o640, 0o640]


def _assert_names_only(error, path):
    message = str(error)
    assert str(path) in message, message
    assert ".tmp" not in message, message


def test_errors_name_the_users_path(tmp_path, monkeypatch):
    """Whatever fails (the disk, the rename, the directory), the error names
    the file the user asked for, never the temporary file."""
    path = tmp_path / "model.poptorch"
    missing = tmp_path / "missing" / "model.poptorch"
    with pytest.raises(FileNotFoundError) as raised:
        with files.atomic_write(missing) as f:
            f.write(b"bytes")
    _assert_names_only(raised.value, missing)

    monkeypatch.setattr(files.os, "fsync", _failing_fsync)
    with pytest.raises(OSError, match="No space") as raised:
        with files.atomic_write(path) as f:
            f.write(b"bytes")
    _assert_names_only(raised.value, path)
    monkeypatch.undo()

    def cross_device(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link", source,
                      None, target)
    monkeypatch.setattr(files.os, "replace", cross_device)
    with pytest.raises(OSError, match="cross-device") as raised:
        with files.atomic_write(path) as f:
            f.write(b"bytes")
    _assert_names_only(raised.value, path)
    monkeypatch.undo()
    assert not os.listdir(tmp_path)
