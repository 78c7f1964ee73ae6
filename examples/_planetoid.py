"""Load a Planetoid data set (Cora, CiteSeer, PubMed) offline-first.

PyG's ``Planetoid`` reads ``<root>/<name>/raw/ind.<name>.*`` and downloads
those files only when they are missing. Two things can stop it on a machine
without network or SciPy, and both get a clear error or a fallback here:

* the raw files are missing and the download fails: :class:`DatasetUnavailable`
  says where to put them (the download is given a timeout, so an unreachable
  network fails instead of hanging);
* SciPy is not installed: the raw feature files are pickled
  ``scipy.sparse.csr_matrix`` objects, which PyG unpickles with SciPy. Without
  SciPy they are read by a restricted unpickler that knows only the classes
  those files hold, and PyG's own ``read_planetoid_data`` does the rest, so
  the result is the data set PyG builds.

Example::

    >>> import torch_geometric.transforms as T
    >>> dataset = load_planetoid("datasets", "Cora",
    ...     transform=T.NormalizeFeatures())     # doctest: +SKIP
    >>> dataset[0].num_nodes                     # doctest: +SKIP
    2708
"""
import contextlib
import importlib.util
import os.path as osp
import pickle
import socket
import warnings
from typing import Any, Callable, Dict, Iterator, Optional

import numpy as np
from torch_geometric.datasets import Planetoid
from torch_geometric.io import planetoid as pyg_planetoid_io

__all__ = ["DatasetUnavailable", "load_planetoid"]

#: Seconds a download may wait for the network before giving up.
DOWNLOAD_TIMEOUT_S = 30.0

_RAW_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


class DatasetUnavailable(RuntimeError):
    """The raw files are missing and could not be downloaded."""


class _CSRMatrix:
    """Just enough of ``scipy.sparse.csr_matrix`` to unpickle one and make
    it dense (what PyG's reader calls)."""

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.data = state["data"]
        self.indices = state["indices"]
        self.indptr = state["indptr"]
        self.shape = tuple(state["_shape"])

    def todense(self) -> np.ndarray:
        dense = np.zeros(self.shape, dtype=self.data.dtype)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        # CSR may hold duplicate entries; SciPy sums them when densifying.
        np.add.at(dense, (rows, self.indices), self.data)
        return dense


class _RawFileUnpickler(pickle.Unpickler):
    """Unpickles the Planetoid raw files without SciPy, refusing any class
    those files do not contain (so a tampered file cannot run code)."""

    # The globals the Planetoid raw files refer to (checked on Cora).
    _ALLOWED = frozenset({
        ("collections", "defaultdict"), ("__builtin__", "list"),
        ("builtins", "list"), ("numpy", "ndarray"), ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
    })

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("scipy.sparse") and name == "csr_matrix":
            return _CSRMatrix
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(
                f"{module}.{name} is not expected in a Planetoid raw file; "
                "the file may be corrupt (delete it to download it again).")
        with warnings.catch_warnings():
            # numpy 2 resolves the numpy 1 module path with a warning.
            warnings.simplefilter("ignore", DeprecationWarning)
            return super().find_class(module, name)


class _PickleWithoutScipy:
    """Stands in for the ``pickle`` module inside PyG's Planetoid reader."""

    @staticmethod
    def load(file: Any, encoding: str = "ASCII") -> Any:
        return _RawFileUnpickler(file, encoding=encoding).load()


@contextlib.contextmanager
def _raw_files_without_scipy() -> Iterator[None]:
    # PyG's reader calls its module-level ``pickle.load``; swap that one
    # name while processing rather than re-implementing the reader.
    saved = pyg_planetoid_io.pickle
    pyg_planetoid_io.pickle = _PickleWithoutScipy
    try:
        yield
    finally:
        pyg_planetoid_io.pickle = saved


class _PlanetoidWithoutScipy(Planetoid):
    """``Planetoid`` whose raw files are read without SciPy."""

    def process(self) -> None:
        with _raw_files_without_scipy():
            super().process()


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    # PyG's download_url opens the URL without a timeout, which can wait
    # forever behind a silent firewall.
    saved = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(saved)


def _has_scipy() -> bool:
    return importlib.util.find_spec("scipy") is not None


def load_planetoid(root: str, name: str = "Cora",
                   transform: Optional[Callable] = None) -> Planetoid:
    """``torch_geometric.datasets.Planetoid(root, name, transform=...)``,
    readable without SciPy and failing clearly when offline.

    Args:
        root: the data root; the raw files are ``<root>/<name>/raw/``.
        name: ``"Cora"``, ``"CiteSeer"`` or ``"PubMed"``.
        transform: applied to the graph on access.

    Raises:
        DatasetUnavailable: the raw files are missing and the download
            failed; the message says where to put them.
    """
    cls = Planetoid if _has_scipy() else _PlanetoidWithoutScipy
    raw_dir = osp.join(root, name, "raw")
    try:
        with _socket_timeout(DOWNLOAD_TIMEOUT_S):
            return cls(root=root, name=name, transform=transform)
    except OSError as error:  # URLError and socket timeouts are OSErrors
        files = ", ".join(f"ind.{name.lower()}.{s}" for s in _RAW_SUFFIXES)
        raise DatasetUnavailable(
            f"The {name} raw files are not in {osp.abspath(raw_dir)} and "
            f"downloading them failed ({error}). Put the Planetoid raw files "
            f"({files}) in that folder, or pass a data root that holds "
            f"{name}/raw/ (--data-root or $POPTORCH_SIM_DATA_ROOT)."
        ) from error
