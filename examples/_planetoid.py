"""Load a Planetoid data set (Cora, CiteSeer, PubMed), offline first.

PyG's ``Planetoid`` reads ``<root>/<name>/raw/ind.<name>.*`` (pickled
``scipy.sparse`` matrices, hence the SciPy dependency of the examples) and
downloads those files only when they are missing. When they are missing and
the download fails, :class:`DatasetUnavailable` says where to put them; the
download is given a timeout, so an unreachable network fails instead of
hanging.

Example::

    >>> import torch_geometric.transforms as T
    >>> dataset = load_planetoid("datasets", "Cora",
    ...     transform=T.NormalizeFeatures())     # doctest: +SKIP
    >>> dataset[0].num_nodes                     # doctest: +SKIP
    2708
"""
import contextlib
import os.path as osp
import socket
from typing import Callable, Iterator, Optional

from torch_geometric.datasets import Planetoid

__all__ = ["DatasetUnavailable", "load_planetoid"]

#: Seconds a download may wait for the network before giving up.
DOWNLOAD_TIMEOUT_S = 30.0

_RAW_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


class DatasetUnavailable(RuntimeError):
    """The raw files are missing and could not be downloaded."""


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


def load_planetoid(root: str, name: str = "Cora",
                   transform: Optional[Callable] = None) -> Planetoid:
    """``torch_geometric.datasets.Planetoid(root, name, transform=...)``,
    failing clearly when offline.

    Args:
        root: the data root; the raw files are ``<root>/<name>/raw/``.
        name: ``"Cora"``, ``"CiteSeer"`` or ``"PubMed"``.
        transform: applied to the graph on access.

    Raises:
        DatasetUnavailable: the raw files are missing and the download
            failed; the message says where to put them.
    """
    raw_dir = osp.join(root, name, "raw")
    try:
        with _socket_timeout(DOWNLOAD_TIMEOUT_S):
            return Planetoid(root=root, name=name, transform=transform)
    except OSError as error:  # URLError and socket timeouts are OSErrors
        files = ", ".join(f"ind.{name.lower()}.{s}" for s in _RAW_SUFFIXES)
        raise DatasetUnavailable(
            f"The {name} raw files are not in {osp.abspath(raw_dir)} and "
            f"downloading them failed ({error}). Put the Planetoid raw files "
            f"({files}) in that folder, or pass a data root that holds "
            f"{name}/raw/ (--data-root or $POPTORCH_SIM_DATA_ROOT)."
        ) from error
