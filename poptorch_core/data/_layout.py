"""The fixed tensor layout of the elements an asynchronous worker transfers.

The worker allocates its shared-memory ring from the first element: one
tensor per leaf with the leaf's dtype and shape. Later elements must have the
same structure, dtypes and trailing dimensions; their leading dimension may be
shorter than the slot (a final partial batch), never longer.

Example::

    >>> layout = ElementLayout((torch.zeros(4, 2), torch.zeros(4)))
    >>> slot = layout.allocate()            # shared-memory tensors
    >>> tensors = layout.flatten((torch.ones(3, 2), torch.ones(3)),
    ...                          "dataset index 7")
    >>> lengths = layout.write(slot, tensors)
    >>> element = layout.copy_out(slot, lengths)
    >>> element[0].shape, element[0].data_ptr() != slot[0].data_ptr()
    (torch.Size([3, 2]), True)
"""
from typing import Any, Hashable, List, Optional, Sequence

import torch

from .._args_parser import getCustomParser
from ._structure import flatten, object_fields, rebuild

__all__ = ["ElementLayout", "LayoutError"]


class LayoutError(ValueError):
    """An element does not fit the layout allocated from the first one."""


def _signature(struct: Any, path: str) -> Hashable:
    """A hashable description of ``struct`` without its tensor values.

    Non-tensor leaves are rejected: the consumer rebuilds every element from
    the first one, so a leaf that is not a tensor would silently repeat the
    first element's value.
    """
    if isinstance(struct, torch.Tensor):
        return "tensor"
    if getCustomParser(struct) is not None:
        # The parser owns the rebuild; its tensor count is checked separately.
        return ("custom", type(struct).__module__, type(struct).__qualname__)
    if isinstance(struct, (tuple, list)):
        return (type(struct), tuple(
            _signature(item, f"{path}[{i}]") for i, item in enumerate(struct)))
    if isinstance(struct, dict):
        return (type(struct), tuple(
            (key, _signature(value, f"{path}[{key!r}]"))
            for key, value in struct.items()))
    fields = object_fields(struct)
    if fields is not None:
        return ("object", type(struct).__module__, type(struct).__qualname__,
                tuple((key, _signature(value, f"{path}.{key}"))
                      for key, value in fields.items()
                      if flatten(value)))
    raise LayoutError(
        f"holds a value of type {type(struct).__name__} at {path or 'the top level'}: "
        "an AsynchronousDataAccessor only transfers tensors (a tensor, a tuple "
        "or list of tensors, a dict of tensors or a type registered with "
        "poptorch.registerCustomArgParser). Convert the value to a tensor.")


class ElementLayout:
    """Shapes and dtypes of one element's tensors and how to rebuild it.

    Args:
        first: the first element; it fixes the structure, dtypes and shapes.
        rows: if given, the leading dimension of every slot tensor (used when
            re-batching); otherwise the first element's shapes are used.
    """

    def __init__(self, first: Any, rows: Optional[int] = None):
        try:
            self._signature = _signature(first, "")
        except LayoutError as error:
            raise LayoutError(f"The first element {error}") from None
        tensors = flatten(first)
        if not tensors:
            raise LayoutError("The first element holds no tensors: there is "
                              "nothing to transfer.")
        for tensor in tensors:
            if tensor.layout != torch.strided:
                raise LayoutError(
                    f"Unsupported tensor layout {tensor.layout}: only dense "
                    "tensors can be placed in shared memory.")
            if rows is not None and tensor.dim() == 0:
                raise LayoutError(
                    "Re-batching needs every tensor to have a batch "
                    "dimension, but the first element holds a 0-dim tensor.")
        self._shapes = [
            (rows, *t.shape[1:]) if rows is not None else tuple(t.shape)
            for t in tensors
        ]
        self._dtypes = [t.dtype for t in tensors]
        self._rebatching = rows is not None
        self.template = first

    def allocate(self) -> List[torch.Tensor]:
        """One ring slot: a shared-memory CPU tensor per leaf."""
        return [
            torch.empty(shape, dtype=dtype).share_memory_()
            for shape, dtype in zip(self._shapes, self._dtypes)
        ]

    def flatten(self, element: Any, where: str) -> List[torch.Tensor]:
        """The tensors of ``element`` once they are known to fit a slot.

        ``where`` names the element in errors, e.g. ``"dataset index 7"``.
        When re-batching, every tensor must share one leading dimension of
        any length; otherwise the leading dimension may not exceed the
        slot's.
        """
        try:
            signature = _signature(element, "")
        except LayoutError as error:
            raise LayoutError(f"The element at {where} {error}") from None
        if signature != self._signature:
            raise LayoutError(
                f"The element at {where} does not have the structure of the "
                "first element (different container types, keys or "
                "lengths): the AsynchronousDataAccessor needs every element "
                "to have the same structure.")
        tensors = flatten(element)
        if len(tensors) != len(self._shapes):
            raise LayoutError(
                f"The element at {where} has {len(tensors)} tensors but the "
                f"first element had {len(self._shapes)}.")
        for position, (tensor, shape, dtype) in enumerate(
                zip(tensors, self._shapes, self._dtypes)):
            fits = (tensor.dtype == dtype and tensor.dim() == len(shape)
                    and tuple(tensor.shape[1:]) == tuple(shape[1:])
                    and (self._rebatching or tensor.dim() == 0
                         or tensor.shape[0] <= shape[0]))
            if not fits:
                raise LayoutError(
                    f"Tensor {position} of the element at {where} has shape "
                    f"{tuple(tensor.shape)} and dtype {tensor.dtype}, but the "
                    f"buffers were allocated for shape {shape} and dtype "
                    f"{dtype} from the first element. The "
                    "AsynchronousDataAccessor needs fixed shapes (only the "
                    "leading dimension may be shorter): pad the elements to a "
                    "fixed size.")
        if self._rebatching and len({t.shape[0] for t in tensors}) != 1:
            raise LayoutError(
                f"Re-batching needs every tensor of an element to have the "
                f"same batch dimension, but the element at {where} has "
                f"leading dimensions {[t.shape[0] for t in tensors]}.")
        return tensors

    def write(self, slot: Sequence[torch.Tensor],
              tensors: Sequence[torch.Tensor]) -> List[int]:
        """Copies ``tensors`` (from :meth:`flatten`, or a re-batch of them
        no longer than the slot) into ``slot``; returns their lengths."""
        lengths = [t.shape[0] if t.dim() else 0 for t in tensors]
        with torch.no_grad():
            for target, source, length in zip(slot, tensors, lengths):
                if source.dim() == 0:
                    target.copy_(source)
                else:
                    target[:length].copy_(source)
        return lengths

    def copy_out(self, slot: Sequence[torch.Tensor],
                 lengths: Sequence[int]) -> Any:
        """An element like the first one with its own copy of ``slot``'s
        data (the slot may be overwritten afterwards)."""
        copies = (t.clone() if t.dim() == 0 else t[:n].clone()
                  for t, n in zip(slot, lengths))
        return rebuild(self.template, copies)
