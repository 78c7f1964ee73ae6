"""``ctc_beam_search_decoder``: CTC prefix beam search on log probabilities.

On the simulated IPU the call becomes the op
``torch.ops.poptorch.ctc_beam_search_decoder``, whose kernel runs a prefix
beam search (the algorithm of popnn's CTC inference) on the host each time
the graph runs. For every batch entry it returns the ``top_paths`` most
likely label sequences: their log probabilities ``[B, P]``, lengths
``[B, P]`` (int32) and labels ``[B, P, T]`` (int32, zero after the length).
Missing paths (fewer distinct prefixes than ``top_paths``) have log
probability ``-inf`` and length 0. Plain CPU calls return zeros of those
shapes, as PopTorch's CPU kernel does.

Example::

    >>> log_probs = torch.randn(5, 2, 4).log_softmax(-1)   # [T, B, C]
    >>> probs, lens, paths = poptorch.ctc_beam_search_decoder(
    ...     log_probs, torch.tensor([5, 3]), blank=0, beam_width=8)
"""
import math
from typing import Dict, List, Tuple

import torch

from .. import _impl
from ..errors import createPoptorchError
from ._registration import define_op

__all__ = ["ctc_beam_search_decoder"]

_Prefix = Tuple[int, ...]
_NEG_INF = -math.inf


def _log_add(a: float, b: float) -> float:
    if a == _NEG_INF:
        return b
    if b == _NEG_INF:
        return a
    high, low = max(a, b), min(a, b)
    return high + math.log1p(math.exp(low - high))


def _beam_search(log_probs: List[List[float]], blank: int, beam_width: int
                 ) -> List[Tuple[float, _Prefix]]:
    """Prefix beam search over ``log_probs[t][c]``; returns (log p, labels)
    pairs, best first."""
    # Per prefix: log p of alignments ending in blank, and in a label.
    beams: Dict[_Prefix, Tuple[float, float]] = {(): (0.0, _NEG_INF)}
    for step in log_probs:
        grown: Dict[_Prefix, List[float]] = {}

        def add(prefix: _Prefix, slot: int, value: float) -> None:
            entry = grown.setdefault(prefix, [_NEG_INF, _NEG_INF])
            entry[slot] = _log_add(entry[slot], value)

        for prefix, (p_blank, p_label) in beams.items():
            p_total = _log_add(p_blank, p_label)
            for label, p in enumerate(step):
                if label == blank:
                    add(prefix, 0, p_total + p)
                elif prefix and prefix[-1] == label:
                    # A repeat extends the prefix only across a blank.
                    add(prefix + (label, ), 1, p_blank + p)
                    add(prefix, 1, p_label + p)
                else:
                    add(prefix + (label, ), 1, p_total + p)
        ranked = sorted(grown.items(),
                        key=lambda kv: (-_log_add(*kv[1]), kv[0]))
        beams = {prefix: tuple(p) for prefix, p in ranked[:beam_width]}
    return sorted(((_log_add(*p), prefix) for prefix, p in beams.items()),
                  key=lambda item: (-item[0], item[1]))


def _output_shapes(probs: torch.Tensor, top_paths: int):
    steps, batch = probs.shape[0], probs.shape[1]
    return (batch, top_paths), (batch, top_paths), (batch, top_paths, steps)


def _kernel(probs: torch.Tensor, lengths: torch.Tensor, blank: int,
            beam_width: int,
            top_paths: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    prob_shape, len_shape, path_shape = _output_shapes(probs, top_paths)
    path_probs = torch.full(prob_shape, _NEG_INF, dtype=probs.dtype)
    path_lens = torch.zeros(len_shape, dtype=torch.int32)
    paths = torch.zeros(path_shape, dtype=torch.int32)
    values = probs.detach().double().cpu()
    for b, length in enumerate(lengths.tolist()):
        found = _beam_search(values[:int(length), b].tolist(), blank,
                             beam_width)
        for rank, (log_p, labels) in enumerate(found[:top_paths]):
            path_probs[b, rank] = log_p
            path_lens[b, rank] = len(labels)
            paths[b, rank, :len(labels)] = torch.tensor(labels,
                                                        dtype=torch.int32)
    device = probs.device
    return path_probs.to(device), path_lens.to(device), paths.to(device)


def _fake(probs: torch.Tensor, lengths: torch.Tensor, blank: int,
          beam_width: int,
          top_paths: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    del lengths, blank, beam_width
    prob_shape, len_shape, path_shape = _output_shapes(probs, top_paths)
    return (probs.new_empty(prob_shape),
            probs.new_empty(len_shape, dtype=torch.int32),
            probs.new_empty(path_shape, dtype=torch.int32))


_decoder = define_op(
    "ctc_beam_search_decoder",
    "(Tensor probs, Tensor lengths, int blank, int beam_width, "
    "int top_paths) -> (Tensor, Tensor, Tensor)", _kernel, _fake)


def ctc_beam_search_decoder(
        probs: torch.Tensor, lengths: torch.Tensor, blank: int = 0,
        beam_width: int = 100,
        top_paths: int = 1) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decodes log probabilities ``probs[T, B, C]`` with valid lengths
    ``lengths[B]``.

    Returns ``(path_probs[B, P], path_lens[B, P], paths[B, P, T])`` with
    ``P = top_paths``.
    """
    for name, value in (("probs", probs), ("lengths", lengths)):
        if not isinstance(value, torch.Tensor):
            raise createPoptorchError(
                f"ctc_beam_search_decoder must take a torch.tensor {name} "
                f"argument. {type(value)} is not supported.")
    if probs.dim() != 3:
        raise ValueError("ctc_beam_search_decoder expects probs shaped "
                         f"[T, B, C], got {list(probs.shape)}.")
    for name, value in (("blank", blank), ("beam_width", beam_width),
                        ("top_paths", top_paths)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"ctc_beam_search_decoder: {name} must be a "
                             f"non-negative int, got {value!r}.")
    if beam_width < 1 or top_paths < 1 or top_paths > beam_width:
        raise ValueError("ctc_beam_search_decoder needs 1 <= top_paths <= "
                         f"beam_width, got top_paths={top_paths}, "
                         f"beam_width={beam_width}.")
    if not _impl.isRunningOnIpu():
        prob_shape, len_shape, path_shape = _output_shapes(probs, top_paths)
        return (probs.new_zeros(prob_shape),
                probs.new_zeros(len_shape, dtype=torch.int32),
                probs.new_zeros(path_shape, dtype=torch.int32))
    return _decoder(probs, lengths, blank, beam_width, top_paths)
