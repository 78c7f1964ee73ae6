"""Interfaces for masking padding out of layer inputs.

No mask is computed here: the masks of a fixed-size batch are its
``graphs_mask``, ``nodes_mask`` and ``edges_mask`` attributes (see
:class:`~poptorch_geometric.collate.FixedSizeCollater`). A :class:`Masker`
applies such a mask to layer inputs; a :class:`LayerMasker` wraps a layer so
its inputs are masked first. Implementations must be traceable.

Example::

    >>> import torch
    >>> double = PreLayerMasker(NoMasker()).node_masker(lambda x: 2 * x)
    >>> double(torch.ones(2)).tolist()
    [2.0, 2.0]
"""
import abc
from typing import Callable, Optional, Tuple, Union

from torch import Tensor

__all__ = ["Entries", "Mask", "Layer", "DecoratedLayer", "Masker",
           "NoMasker", "LayerMasker", "PreLayerMasker"]

Entries = Union[Tensor, Tuple[Tensor, ...]]
Mask = Optional[Tensor]
Layer = Callable
DecoratedLayer = Callable


class Masker(abc.ABC):
    """Masks node-, edge- or graph-level entries."""

    @abc.abstractmethod
    def node_masker(self, entries: Entries, mask: Mask = None) -> Entries:
        """``entries`` with padding nodes masked by ``mask``."""

    @abc.abstractmethod
    def edge_masker(self, entries: Entries, mask: Mask = None) -> Entries:
        """``entries`` with padding edges masked by ``mask``."""

    @abc.abstractmethod
    def graph_masker(self, entries: Entries, mask: Mask = None) -> Entries:
        """``entries`` with padding graphs masked by ``mask``."""


class NoMasker(Masker):
    """Masks nothing: every method returns its input object itself."""

    def node_masker(self, entries: Entries, mask: Mask = None) -> Entries:
        """Returns ``entries`` itself."""
        return entries

    def edge_masker(self, entries: Entries, mask: Mask = None) -> Entries:
        """Returns ``entries`` itself."""
        return entries

    def graph_masker(self, entries: Entries, mask: Mask = None) -> Entries:
        """Returns ``entries`` itself."""
        return entries


class LayerMasker(abc.ABC):
    """Wraps layers so that their inputs go through a :class:`Masker`.

    The default bodies return ``masked_layer(*args, mask=None)``, which calls
    ``layer(*masker.<kind>_masker(args, mask=mask))``.
    """

    def __init__(self, masker: Masker) -> None:
        self.masker = masker

    def _wrap(self, layer: Layer,
              mask_fn: Callable[..., Entries]) -> DecoratedLayer:
        def masked_layer(*args, mask: Mask = None):
            return layer(*mask_fn(args, mask=mask))

        return masked_layer

    @abc.abstractmethod
    def node_masker(self, layer: Layer) -> DecoratedLayer:
        """``layer`` wrapped as ``wrapped(*args, mask=None)``, which passes
        ``args`` through the masker's ``node_masker`` first."""
        return self._wrap(layer, self.masker.node_masker)

    @abc.abstractmethod
    def edge_masker(self, layer: Layer) -> DecoratedLayer:
        """``layer`` wrapped as ``wrapped(*args, mask=None)``, which passes
        ``args`` through the masker's ``edge_masker`` first."""
        return self._wrap(layer, self.masker.edge_masker)

    @abc.abstractmethod
    def graph_masker(self, layer: Layer) -> DecoratedLayer:
        """``layer`` wrapped as ``wrapped(*args, mask=None)``, which passes
        ``args`` through the masker's ``graph_masker`` first."""
        return self._wrap(layer, self.masker.graph_masker)


class PreLayerMasker(LayerMasker):
    """Masks a layer's inputs before calling it."""

    def node_masker(self, layer: Layer) -> DecoratedLayer:
        """``layer`` with its inputs masked as node entries before each
        call."""
        return super().node_masker(layer)

    def edge_masker(self, layer: Layer) -> DecoratedLayer:
        """``layer`` with its inputs masked as edge entries before each
        call."""
        return super().edge_masker(layer)

    def graph_masker(self, layer: Layer) -> DecoratedLayer:
        """``layer`` with its inputs masked as graph entries before each
        call."""
        return super().graph_masker(layer)
