"""Text layout of tensors printed by ``ipu_print_tensor``.

The layout follows Poplar's ``PrintTensorFmt`` (itself modelled on numpy):

- nested brackets, one row per line, continuation lines indented so that
  rows line up; a 1-D row wraps before ``max_line_width`` characters;
- every element right-aligned to the widest one;
- above ``summarise_threshold`` elements, each dimension longer than
  ``2 * edge_items`` shows its first and last ``edge_items`` entries with
  ``...`` between them;
- floats: ``fixed`` = ``digits`` decimals, ``scientific`` = mantissa with
  ``digits`` decimals, ``none`` = ``digits`` significant digits, ``auto`` =
  fixed unless the magnitudes need scientific notation (largest >= 1e8,
  smallest non-zero < 1e-4, or a ratio above 1e3, as numpy decides);
  integers print as integers and booleans as ``true``/``false``.

Example::

    >>> print(format_tensor(torch.tensor([[1.0, 2.5], [3.0, 4.0]]), digits=2))
    ((1.00, 2.50),
     (3.00, 4.00))
"""
import math
from typing import List, Union

import torch

__all__ = ["format_tensor", "FLOAT_FORMATS"]

#: Accepted ``float_format`` values.
FLOAT_FORMATS = ("auto", "fixed", "scientific", "none")
_ELLIPSIS = "..."

_Nested = Union[str, List["_Nested"]]


def _use_scientific(values: torch.Tensor) -> bool:
    finite = values[torch.isfinite(values)].abs().double()
    nonzero = finite[finite != 0]
    if nonzero.numel() == 0:
        return False
    largest, smallest = nonzero.max().item(), nonzero.min().item()
    return largest >= 1e8 or smallest < 1e-4 or largest / smallest > 1e3


def _element_formatter(values: torch.Tensor, digits: int, float_format: str):
    if values.dtype == torch.bool:
        return lambda v: "true" if v else "false"
    if not values.is_floating_point():
        return lambda v: str(int(v))
    style = float_format
    if style == "auto":
        style = "scientific" if _use_scientific(values) else "fixed"
    spec = {"fixed": f".{digits}f", "scientific": f".{digits}e",
            "none": f".{digits}g"}[style]

    def fmt(v: float) -> str:
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return format(v, spec)

    return fmt


def _shown_indices(size: int, edge_items: int, summarise: bool) -> List[int]:
    """Indices kept along one dimension; -1 marks the ``...`` slot."""
    if not summarise or size <= 2 * edge_items:
        return list(range(size))
    return (list(range(edge_items)) + [-1] +
            list(range(size - edge_items, size)))


def _nest(values: torch.Tensor, fmt, edge_items: int,
          summarise: bool) -> _Nested:
    if values.dim() == 0:
        return fmt(values.item())
    return [
        _ELLIPSIS if i < 0 else _nest(values[i], fmt, edge_items, summarise)
        for i in _shown_indices(values.shape[0], edge_items, summarise)
    ]


def _leaves(nested: _Nested) -> List[str]:
    if isinstance(nested, str):
        return [nested]
    return [leaf for item in nested for leaf in _leaves(item)]


class _Layout:

    def __init__(self, width: int, separator: str, open_bracket: str,
                 close_bracket: str, max_line_width: int):
        self.width = width
        self.separator = separator
        self.open = open_bracket
        self.close = close_bracket
        self.max_line_width = max_line_width

    def render(self, nested: _Nested, depth: int) -> str:
        indent = " " * (len(self.open) * (depth + 1))
        if all(isinstance(item, str) for item in nested):  # innermost row
            return self._row(nested, indent)
        joiner = self.separator.rstrip() + "\n" + indent
        rows = [item if isinstance(item, str) else self.render(item, depth + 1)
                for item in nested]
        return self.open + joiner.join(rows) + self.close

    def _row(self, items: List[str], indent: str) -> str:
        cells = [item if item == _ELLIPSIS else item.rjust(self.width)
                 for item in items]
        lines, line = [], self.open
        for k, cell in enumerate(cells):
            piece = cell + (self.close if k == len(cells) - 1 else
                            self.separator)
            if line.strip() and len(line) + len(piece.rstrip()) > \
                    self.max_line_width:
                lines.append(line.rstrip())
                line = indent
            line += piece
        if not cells:
            line += self.close
        lines.append(line)
        return "\n".join(lines)


def format_tensor(tensor: torch.Tensor, summarise_threshold: int = 1000,
                  edge_items: int = 3, max_line_width: int = 80,
                  digits: int = 4, float_format: str = "auto",
                  separator: str = ", ", open_bracket: str = "(",
                  close_bracket: str = ")") -> str:
    """``tensor`` as text laid out as described in the module docstring."""
    values = tensor.detach().cpu()
    summarise = values.numel() > summarise_threshold
    fmt = _element_formatter(values, digits, float_format)
    nested = _nest(values, fmt, edge_items, summarise)
    if isinstance(nested, str):
        return nested
    width = max((len(leaf) for leaf in _leaves(nested) if leaf != _ELLIPSIS),
                default=0)
    layout = _Layout(width, separator, open_bracket, close_bracket,
                     max_line_width)
    return layout.render(nested, 0)
