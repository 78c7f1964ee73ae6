"""The NCI molecules with TPSA labels that ship inside the ``rdkit`` wheel.

Example::

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as root:
    ...     ds = NCITPSA(root=root)      # the first call processes (seconds)
    >>> len(ds)
    4991
    >>> ds[0]
    Data(x=[9, 9], edge_index=[2, 18], edge_attr=[18, 3], smiles=..., y=[1, 1])
"""
import os
import os.path as osp
import shutil
from typing import Callable, List, Optional, Sequence

import torch
from torch_geometric.data import Data, InMemoryDataset

from poptorch_core.files import atomic_write
from poptorch_core import logger

__all__ = ["NCITPSA", "default_root"]

_RAW_NAME = "first_5k.tpsa.csv"


def default_root() -> str:
    """The data root: ``$POPTORCH_SIM_DATA_ROOT`` or ``"datasets"``."""
    return os.environ.get("POPTORCH_SIM_DATA_ROOT", "datasets")


def _rdkit_csv() -> str:
    import rdkit  # only when processing: keeps imports fast
    path = osp.join(osp.dirname(rdkit.__file__), "Data", "NCI", _RAW_NAME)
    if not osp.isfile(path):
        raise FileNotFoundError(
            f"{path} is missing: the installed rdkit wheel does not ship the "
            "NCI TPSA data set; reinstall rdkit (pip install rdkit).")
    return path


class NCITPSA(InMemoryDataset):
    """The 4,999 NCI molecules of ``rdkit/Data/NCI/first_5k.tpsa.csv`` as
    graphs (``torch_geometric.utils.from_smiles``) labelled with their
    topological polar surface area (TPSA, in square angstroms).

    SMILES that RDKit cannot parse (8 of them) are dropped and their count
    logged. The CSV is copied from the installed rdkit wheel, never
    downloaded; graphs are processed once and cached under
    ``<root>/NCITPSA/processed``.

    Each graph has ``x`` [n, 9] long atom features, ``edge_index`` [2, e]
    (both directions), ``edge_attr`` [e, 3] long bond features, ``smiles``
    and ``y`` [1, 1] float32 (the TPSA).

    Args:
        root: the data root (default :func:`default_root`).
        transform: applied to each graph on access.
        pre_transform: applied to each graph before caching.
        force_reload: process again even if a cache exists.
    """

    def __init__(self, root: Optional[str] = None,
                 transform: Optional[Callable] = None,
                 pre_transform: Optional[Callable] = None,
                 force_reload: bool = False) -> None:
        root = osp.join(default_root() if root is None else root, "NCITPSA")
        super().__init__(root, transform, pre_transform,
                         force_reload=force_reload)
        self.load(self.processed_paths[0])

    @property
    def raw_file_names(self) -> List[str]:
        """The CSV file taken from the rdkit wheel."""
        return [_RAW_NAME]

    @property
    def processed_file_names(self) -> List[str]:
        """The cache of processed graphs."""
        return ["data.pt"]

    def download(self) -> None:
        """Copies the CSV from the installed rdkit wheel into ``raw_dir``.

        Raises:
            FileNotFoundError: the rdkit wheel does not ship the CSV.
        """
        # "Download" is PyG's hook for missing raw files: copy, never fetch.
        with open(_rdkit_csv(), "rb") as src, \
                atomic_write(osp.join(self.raw_dir, _RAW_NAME)) as dst:
            shutil.copyfileobj(src, dst)

    @classmethod
    def save(cls, data_list: Sequence[Data], path: str) -> None:
        """PyG's ``InMemoryDataset.save``, written atomically: an
        interrupted first run leaves no truncated cache behind."""
        data, slices = cls.collate(data_list)
        with atomic_write(path) as f:
            torch.save((data.to_dict(), slices, data.__class__), f)

    def process(self) -> None:
        """Turns every SMILES that RDKit parses into a graph labelled with
        its TPSA and saves them to the cache."""
        from rdkit import Chem, RDLogger
        from torch_geometric.utils import from_smiles

        RDLogger.DisableLog("rdApp.*")
        data_list: List[Data] = []
        dropped = 0
        with open(self.raw_paths[0]) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                smiles, tpsa = line.rsplit(",", 1)
                # from_smiles turns unparsable SMILES into empty graphs.
                if Chem.MolFromSmiles(smiles) is None:
                    dropped += 1
                    continue
                data = from_smiles(smiles)
                data.y = torch.tensor([[float(tpsa)]], dtype=torch.float32)
                if self.pre_transform is not None:
                    data = self.pre_transform(data)
                data_list.append(data)
        if dropped:
            logger.warning("NCITPSA: dropped %d SMILES that RDKit cannot "
                           "parse; kept %d molecules.", dropped,
                           len(data_list))
        self.save(data_list, self.processed_paths[0])
