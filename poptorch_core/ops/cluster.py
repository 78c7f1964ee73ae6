"""Fixed-shape replacements of ``torch_cluster.nearest`` and
``torch_cluster.fps`` written in tensor ops.

Both give the same results on plain CPU calls and on the simulated IPU: the
output shapes depend only on the arguments' shapes and on Python lists,
never on tensor values, so the captured graphs can be re-run on new data.

Example::

    >>> x = torch.tensor([[-1., -1.], [-1., 1.], [1., -1.], [1., 1.]])
    >>> y = torch.tensor([[-1., 0.], [1., 0.]])
    >>> poptorch.nearest(x, y, [0, 0, 0, 0], [0, 0])
    tensor([0, 0, 1, 1])
    >>> poptorch.fps(x, ptr=[0, 4], ratio=0.5)
    tensor([0, 3])
"""
import math
from typing import List, Optional, Union

import torch

__all__ = ["nearest", "fps"]

_Batch = Optional[Union[List[int], torch.Tensor]]


def _as_points(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got "
                        f"{type(value).__name__}.")
    return value.view(-1, 1) if value.dim() == 1 else value


def _check_batch_list(name: str, batch: List[int], num_points: int) -> None:
    if len(batch) != num_points:
        raise ValueError(f"'{name}' has {len(batch)} entries but there are "
                         f"{num_points} points: give one example index per "
                         "point.")
    if any(a > b for a, b in zip(batch, batch[1:])):
        raise ValueError(f"'{name}' is not sorted")


def _batch_tensor(batch: Union[List[int], torch.Tensor], num_points: int,
                  like: torch.Tensor) -> torch.Tensor:
    if isinstance(batch, torch.Tensor):
        return batch.reshape(-1)
    if not batch:  # no batch: every point is in example 0
        return torch.zeros(num_points, dtype=torch.int32, device=like.device)
    return torch.tensor(batch, dtype=torch.int32, device=like.device)


def nearest(x: torch.Tensor, y: torch.Tensor, batch_x: _Batch = None,
            batch_y: _Batch = None) -> torch.Tensor:
    """For each row of ``x``, the index of the nearest row of ``y`` in the
    same example (as ``torch_cluster.nearest``).

    ``batch_x``/``batch_y`` give each point's example index, as sorted lists
    or tensors; None means one example. List batches are validated (sorted,
    and the same examples on both sides: ValueError otherwise); tensor
    batches are not, since their values are only known at run time.
    """
    x, y = _as_points("x", x), _as_points("y", y)
    if x.size(1) != y.size(1):
        raise ValueError(f"x and y must have the same number of features, "
                         f"got {x.size(1)} and {y.size(1)}.")
    batch_x = [] if batch_x is None else batch_x
    batch_y = [] if batch_y is None else batch_y
    for name, batch, points in (("batch_x", batch_x, x), ("batch_y", batch_y,
                                                          y)):
        if not isinstance(batch, (list, torch.Tensor)):
            raise TypeError(f"{name} must be a list, a tensor or None, got "
                            f"{type(batch).__name__}.")
        if isinstance(batch, list) and batch:
            _check_batch_list(name, batch, points.size(0))
    if isinstance(batch_x, list) and isinstance(batch_y, list) and (
            set(batch_x or [0]) != set(batch_y or [0])):
        raise ValueError("Some batch indices occur in 'batch_x' that do not "
                         "occur in 'batch_y'")
    distance = torch.cdist(x.unsqueeze(0), y.unsqueeze(0),
                           compute_mode="donot_use_mm_for_euclid_dist")[0]
    other_example = (_batch_tensor(batch_x, x.size(0), x).unsqueeze(1) !=
                     _batch_tensor(batch_y, y.size(0), y).unsqueeze(0))
    distance = distance.masked_fill(other_example, math.inf)
    return distance.argmin(dim=1)


def _check_fps_args(src: torch.Tensor, ptr: List[int], ratio: float,
                    random_start: bool) -> None:
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"src must be a torch.Tensor, got "
                        f"{type(src).__name__}.")
    if not isinstance(ptr, list) or not ptr or any(
            isinstance(p, bool) or not isinstance(p, int) for p in ptr):
        raise TypeError("ptr must be a non-empty list of ints (the first "
                        f"point of each example, then the end), got {ptr!r}.")
    if isinstance(ratio, bool) or not isinstance(ratio, (float, int)):
        raise TypeError(f"ratio must be a float, got {type(ratio).__name__}.")
    if not isinstance(random_start, bool):
        raise TypeError("random_start must be a bool, got "
                        f"{type(random_start).__name__}.")
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}.")
    num_points = src.size(0) if src.dim() > 0 else 1
    if ptr[0] != 0 or ptr[-1] != num_points or any(
            a > b for a, b in zip(ptr, ptr[1:])):
        raise ValueError(
            f"ptr must start at 0, never decrease and end at the number of "
            f"points ({num_points}), got {ptr}.")


def fps(src: torch.Tensor, ptr: List[int], ratio: float = 0.5,
        random_start: bool = False) -> torch.Tensor:
    """Farthest point sampling of ``ceil(ratio * n)`` points per example.

    Example ``i`` holds the points ``src[ptr[i]:ptr[i + 1]]``. Starting from
    its first point (a random one with ``random_start``), each step picks
    the point farthest from those already picked (the first on ties).
    Returns the global indices of the picked points, example by example, as
    ``torch_cluster.fps``.
    """
    _check_fps_args(src, ptr, ratio, random_start)
    points = src.view(-1, 1) if src.dim() == 1 else src
    sizes = [b - a for a, b in zip(ptr, ptr[1:])]
    picks = [math.ceil(n * ratio) for n in sizes]
    num_examples, longest = len(sizes), max(sizes, default=0)
    if sum(picks) == 0:
        return torch.zeros(0, dtype=torch.long, device=src.device)
    # Pad the examples to [num_examples, longest] rows; padding rows repeat
    # a real point and get distance -inf, so they are never picked.
    rows = [[ptr[b] + min(j, n - 1) if n else 0 for j in range(longest)]
            for b, n in enumerate(sizes)]
    valid = torch.tensor([[j < n for j in range(longest)] for n in sizes],
                         device=src.device)
    padded = points[torch.tensor(rows, device=src.device)]
    batch_index = torch.arange(num_examples, device=src.device)
    if random_start:
        size_tensor = torch.tensor(sizes, device=src.device)
        current = (torch.rand(num_examples, device=src.device) *
                   size_tensor).long()
    else:
        current = torch.zeros(num_examples, dtype=torch.long,
                              device=src.device)
    chosen = [current]
    distance = None
    for _ in range(1, max(picks)):
        latest = padded[batch_index, current].unsqueeze(1)
        step = (padded - latest).pow(2).sum(-1)
        distance = step if distance is None else torch.minimum(distance, step)
        current = distance.masked_fill(~valid, -math.inf).argmax(dim=1)
        chosen.append(current)
    local = torch.stack(chosen, dim=1) + torch.tensor(
        ptr[:-1], device=src.device).unsqueeze(1)
    keep = [b * len(chosen) + i for b, k in enumerate(picks) for i in range(k)]
    return local.reshape(-1)[torch.tensor(keep, device=src.device)]
