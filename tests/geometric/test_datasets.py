"""The embedded datasets: NCI molecules with TPSA labels from the rdkit
wheel, and seeded synthetic molecules."""
import os
import os.path as osp

import pytest
import rdkit
import torch
from torch_geometric.utils import from_smiles, is_undirected

from poptorch_geometric.datasets import (NCITPSA, SyntheticMolecules,
                                         default_root)

RAW = osp.join(osp.dirname(rdkit.__file__), "Data", "NCI",
               "first_5k.tpsa.csv")


def _rows():
    with open(RAW) as f:
        return [line.strip().rsplit(",", 1) for line in f
                if line.strip() and not line.startswith("#")]


def test_nci_contents(nci, nci_root):
    rows = _rows()
    assert len(rows) == 4999
    assert len(nci) == 4991  # 8 SMILES RDKit cannot parse are dropped
    first = nci[0]
    expected = from_smiles(rows[0][0])
    assert torch.equal(first.x, expected.x)
    assert torch.equal(first.edge_index, expected.edge_index)
    assert torch.equal(first.edge_attr, expected.edge_attr)
    assert first.smiles == rows[0][0]
    assert first.y.dtype == torch.float32 and first.y.shape == (1, 1)
    assert first.y.item() == pytest.approx(float(rows[0][1]))
    assert first.x.dtype == torch.long and first.x.shape[1] == 9
    # The raw file is a copy of the wheel's.
    with open(osp.join(nci_root, "NCITPSA", "raw",
                       "first_5k.tpsa.csv"), "rb") as copy, \
            open(RAW, "rb") as original:
        assert copy.read() == original.read()


def test_nci_is_cached(nci_root, monkeypatch):
    def fail(self):
        raise AssertionError("processed again")

    monkeypatch.setattr(NCITPSA, "process", fail)
    assert len(NCITPSA(root=str(nci_root))) == 4991


def test_nci_logs_dropped_smiles(tmp_path, poptorch_log, monkeypatch):
    # Process a small copy: the first 20 rows and one unparsable SMILES.
    rows = _rows()[:20] + [("C1CC", "1.0")]
    raw = tmp_path / "NCITPSA" / "raw"
    raw.mkdir(parents=True)
    (raw / "first_5k.tpsa.csv").write_text(
        "# header\n" + "".join(f"{s},{y}\n" for s, y in rows))
    ds = NCITPSA(root=str(tmp_path))
    assert len(ds) == 20
    assert "dropped 1 SMILES" in poptorch_log.text


def test_default_root(monkeypatch):
    monkeypatch.delenv("POPTORCH_SIM_DATA_ROOT", raising=False)
    assert default_root() == "datasets"
    monkeypatch.setenv("POPTORCH_SIM_DATA_ROOT", "/some/where")
    assert default_root() == "/some/where"


def test_synthetic_molecules_are_seeded():
    a, b = SyntheticMolecules(50, seed=3), SyntheticMolecules(50, seed=3)
    c = SyntheticMolecules(50, seed=4)
    assert len(a) == 50
    for i in (0, 17, 49):
        assert torch.equal(a[i].x, b[i].x)
        assert torch.equal(a[i].edge_index, b[i].edge_index)
    assert any(a[i].num_nodes != c[i].num_nodes for i in range(50))


def test_synthetic_molecules_layout():
    ds = SyntheticMolecules(300, seed=0)
    sizes = []
    for g in ds:
        assert g.x.dtype == torch.long and g.x.shape == (g.num_nodes, 9)
        assert g.edge_attr.dtype == torch.long
        assert g.edge_attr.shape == (g.num_edges, 3)
        assert g.y.dtype == torch.float32 and g.y.shape == (1, 1)
        assert is_undirected(g.edge_index, num_nodes=g.num_nodes)
        assert g.num_nodes >= 1
        sizes.append(g.num_nodes)
    mean = sum(sizes) / len(sizes)
    assert 12 < mean < 21  # molecule-like: NCI's mean is 16.4


def test_synthetic_molecules_validation():
    with pytest.raises(ValueError, match=r"num_graphs \(-1\) must be >= 0"):
        SyntheticMolecules(-1)
    with pytest.raises(ValueError, match=r"Need 1 <= mean_num_nodes \(200\) "
                       r"<= max_num_nodes \(100\)"):
        SyntheticMolecules(5, mean_num_nodes=200, max_num_nodes=100)


def test_import_does_no_data_work(tmp_path):
    """Importing the package neither processes data nor imports RDKit."""
    import subprocess
    import sys
    repo = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    code = ("import sys, poptorch_geometric, poptorch_geometric.datasets; "
            "assert 'rdkit' not in sys.modules")
    env = dict(os.environ, PYTHONPATH=repo)
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                   check=True)
    assert list(tmp_path.iterdir()) == []
