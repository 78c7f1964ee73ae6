"""PyG's functions that need pyg-lib or torch-sparse, in plain PyTorch.

On a stack without pyg-lib and torch-sparse (torch 2.13 has no wheels of
either), PyG's ``knn``, ``knn_graph``, ``radius``, ``radius_graph``,
``nearest``, ``knn_interpolate``, ``DynamicEdgeConv``, ``GravNetConv``,
``XConv``, ``SplineConv``, ``ClusterData`` and ``NeighborLoader`` /
``NeighborSampler`` / ``LinkNeighborLoader`` raise ``ImportError``.
:func:`use_pure_python_backends` gives PyG the project's implementations
of what they miss, so that they run as written, on the host, with PyG's
own dynamic-shape semantics:

- ``knn``, ``radius``, ``nearest``: the ops ``torch.ops.pyg.knn`` /
  ``radius`` / ``nearest`` (pyg-lib's contract: only the pairs found;
  nearest first, ties to the lower index) and PyG's ``WITH_KNN`` /
  ``WITH_RADIUS`` / ``WITH_NEAREST`` flags;
- ``spline``: ``SplineConv``'s ``spline_basis`` and ``spline_weighting``
  (SplineCNN's B-spline formulas) and ``WITH_SPLINE``;
- ``metis``: ``ClusterData`` partitions with METIS from ``pymetis``;
- ``neighbor_sampler``: PyG's ``NeighborSampler`` samples with
  :class:`~poptorch_geometric.TorchNeighborSampler`'s vectorised sampler.

Each is installed only where PyG lacks it: with pyg-lib or torch-sparse
installed, PyG keeps its own. Importing :mod:`poptorch_geometric` installs
them, unless the environment variable ``POPTORCH_GEOMETRIC_PURE_BACKENDS``
is ``0`` (``1``, the default, installs them). While PopTorch traces a
model, PyG's functions and layers take the fixed-shape versions of
:mod:`poptorch_geometric.ops` instead, as before.

Example::

    >>> import torch_geometric
    >>> change = use_pure_python_backends()     # on already: nothing to do
    >>> change.changed, "knn" in change.active
    ((), True)
    >>> off = use_pure_python_backends(False)
    >>> torch_geometric.typing.WITH_KNN, "knn" in off.changed
    (False, True)
    >>> off.undo()                               # back on
    >>> torch_geometric.nn.knn_graph(torch.tensor([[0.], [1.], [5.]]), k=1)
    tensor([[1, 0, 1],
            [0, 1, 2]])
"""
import dataclasses
import os
import threading
from typing import Callable, Dict, Tuple

import torch
import torch_geometric.loader.cluster
import torch_geometric.nn.conv.spline_conv as spline_conv
import torch_geometric.sampler.neighbor_sampler
import torch_geometric.typing as pyg_typing

from ._pure import neighbours, sampling, spline

__all__ = ["use_pure_python_backends", "PureBackendsChange", "ENV",
           "enabled_by_environment"]

#: The environment variable read at import: ``0`` leaves PyG as it is.
ENV = "POPTORCH_GEOMETRIC_PURE_BACKENDS"

Undo = Callable[[], None]

#: PyG's flags as it found its optional packages, before any change here.
_NATIVE = {flag: getattr(pyg_typing, flag) for flag in (
    "WITH_PYG_LIB", "WITH_TORCH_SPARSE", "WITH_METIS", "WITH_KNN",
    "WITH_RADIUS", "WITH_NEAREST", "WITH_SPLINE")}
_LOCK = threading.RLock()
#: backend name -> how to remove it, for the installed ones.
_ACTIVE: Dict[str, Undo] = {}


def _set(target: object, name: str, value: object) -> Undo:
    original = getattr(target, name)
    setattr(target, name, value)
    return lambda: setattr(target, name, original)


def _install_op(name: str) -> Undo:
    undo_flag = _set(pyg_typing, f"WITH_{name.upper()}", True)
    if hasattr(torch.ops.pyg, name):   # pyg-lib's own, without PyG's flag
        return undo_flag
    library = torch.library.Library("pyg", "FRAGMENT")
    library.define(neighbours.SCHEMAS[name])
    # CompositeImplicitAutograd: a trace runs the Python kernel, which
    # refuses, instead of recording an opaque op of data-dependent shape.
    library.impl(name, neighbours.KERNELS[name], "CompositeImplicitAutograd")

    def undo() -> None:
        undo_flag()
        library._destroy()
    return undo


def _install_spline() -> Undo:
    undos = [_set(spline_conv, "spline_basis", spline.spline_basis),
             _set(spline_conv, "spline_weighting", spline.spline_weighting),
             _set(pyg_typing, "WITH_SPLINE", True)]

    def undo() -> None:
        for step in undos:
            step()
    return undo


def _missing(*flags: str) -> bool:
    return not any(_NATIVE[flag] for flag in flags)


#: name -> (PyG lacks it, install it and return its undo).
_BACKENDS: Dict[str, Tuple[Callable[[], bool], Callable[[], Undo]]] = {
    "knn": (lambda: _missing("WITH_KNN"), lambda: _install_op("knn")),
    "radius": (lambda: _missing("WITH_RADIUS"),
               lambda: _install_op("radius")),
    "nearest": (lambda: _missing("WITH_NEAREST"),
                lambda: _install_op("nearest")),
    "spline": (lambda: _missing("WITH_SPLINE"), _install_spline),
    "metis": (lambda: _missing("WITH_TORCH_SPARSE", "WITH_METIS"),
              lambda: _set(torch_geometric.loader.cluster.ClusterData,
                           "_metis", sampling.metis)),
    "neighbor_sampler": (
        lambda: _missing("WITH_TORCH_SPARSE", "WITH_PYG_LIB"),
        lambda: _set(torch_geometric.sampler.neighbor_sampler.NeighborSampler,
                     "_sample", sampling.neighbor_sample)),
}


@dataclasses.dataclass(frozen=True)
class PureBackendsChange:
    """What one :func:`use_pure_python_backends` call did: ``changed`` names
    the backends it installed (``enabled``) or removed; ``active`` those in
    use after it. :meth:`undo` reverses the call."""
    enabled: bool
    changed: Tuple[str, ...]
    active: Tuple[str, ...]

    def undo(self) -> None:
        """Removes what the call installed, or installs what it removed."""
        with _LOCK:
            for name in self.changed:
                if self.enabled:
                    _remove(name)
                else:
                    _add(name)


def _add(name: str) -> bool:
    if name in _ACTIVE or not _BACKENDS[name][0]():
        return False
    _ACTIVE[name] = _BACKENDS[name][1]()
    return True


def _remove(name: str) -> bool:
    undo = _ACTIVE.pop(name, None)
    if undo is not None:
        undo()
    return undo is not None


def use_pure_python_backends(enable: bool = True) -> PureBackendsChange:
    """Gives PyG plain-PyTorch versions of what it lacks without pyg-lib
    and torch-sparse (``enable=True``), or takes them back (``False``).
    Idempotent; never replaces a backend that PyG has.

    Returns:
        a :class:`PureBackendsChange` naming what changed; its ``undo()``
        reverses this call.
    """
    with _LOCK:
        step = _add if enable else _remove
        changed = tuple(name for name in _BACKENDS if step(name))
        return PureBackendsChange(bool(enable), changed, tuple(_ACTIVE))


def enabled_by_environment() -> bool:
    """Whether ``POPTORCH_GEOMETRIC_PURE_BACKENDS`` asks for the backends
    at import: unset, ``1`` (or ``true``, ``on``) yes; ``0`` (``false``,
    ``off``) no; another value is a ``ValueError``."""
    value = os.environ.get(ENV, "1").strip().lower()
    if value in ("", "1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"Environment variable {ENV}={value!r}: use 1 to give "
                     "PyG the pure-Python backends (the default) or 0 to "
                     "leave PyG as it is.")
