"""Fixtures of the geometric tests: the NCI dataset processed once per
session, and a capture of PopTorch's log (which does not propagate)."""
import pytest

from poptorch_core._logging import logger


@pytest.fixture(scope="session")
def nci_root(tmp_path_factory):
    """A data root holding the processed NCITPSA dataset."""
    from poptorch_geometric.datasets import NCITPSA
    root = tmp_path_factory.mktemp("data")
    NCITPSA(root=str(root))
    return root


@pytest.fixture(scope="session")
def nci(nci_root):
    from poptorch_geometric.datasets import NCITPSA
    return NCITPSA(root=str(nci_root))


@pytest.fixture
def poptorch_log(caplog):
    """``caplog`` receiving the records of the ``poptorch::python`` logger."""
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)
