"""Shared fixtures: deterministic seeds and offline copies of the shared data."""
import logging
import os
import pathlib
import shutil

import pytest
import torch

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# Under pytest-xdist every worker would start one intra-op thread per core:
# on a small machine OpenMP threads then wait on each other and tests run
# ten times slower. One thread per worker keeps the cores busy.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
# The Async tests are about the worker process, which a DataLoader would
# leave out where no CPU is free for it
# (poptorch_core.data._load_placement); the
# placement tests set the variable themselves.
os.environ.setdefault("POPTORCH_ASYNC_PLACEMENT", "worker")
# The suite runs the interpret backend unless a test picks one: with the
# default, auto, every model called twice would compile in a background
# thread (seconds of CPU each), and many tests compare interpret's exact
# results. tests/core/test_auto_backend.py tests auto itself.
os.environ.setdefault("POPTORCH_SIM_BACKEND", "interpret")
SHARED_DATA = pathlib.Path(
    os.environ.get("POPTORCH_SIM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _seed_everything():
    torch.manual_seed(0)
    yield


@pytest.fixture
def cora_root(tmp_path):
    """A Planetoid root holding a copy of the Cora raw files (no download):
    the repository's ``datasets/Cora/raw``, else the shared data folder."""
    raw = REPO_ROOT / "datasets" / "Cora" / "raw"
    if not raw.is_dir():
        raw = SHARED_DATA / "Cora" / "raw"
    if not raw.is_dir():
        pytest.skip(f"Cora raw files not found at {raw} (set POPTORCH_SIM_SHARED_DATA)")
    dest = tmp_path / "Cora" / "raw"
    shutil.copytree(raw, dest)
    return tmp_path


@pytest.fixture(scope="session")
def nci_data_root(tmp_path_factory) -> str:
    """A data root with the NCITPSA cache, processed once per session."""
    from poptorch_geometric.datasets import NCITPSA
    root = tmp_path_factory.mktemp("nci")
    NCITPSA(root=str(root))
    return str(root)


@pytest.fixture
def log_records():
    """What ``poptorch.logger`` logs during the test (it does not propagate
    to the root logger, so ``caplog`` does not see it)."""
    import poptorch
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    poptorch.logger.addHandler(handler)
    yield records
    poptorch.logger.removeHandler(handler)
