"""Integer inputs reaching ops that need floating point, named for the user.

An int64 tensor passed to a model whose first layer is a ``Linear`` fails
inside torch with ``mat1 and mat2 must have the same dtype``, many frames
below the user's call and without saying which input it is. While the
model is traced, such a failure of an op that mixes integer and
floating-point tensors raises :class:`IntegerOperandError`, which records
the graph placeholders the integer operand comes from; the capture turns
them into the forward's argument names (:func:`name_inputs`).

Example::

    >>> class Model(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = torch.nn.Linear(4, 2)
    ...     def forward(self, features):
    ...         return self.fc(features)
    >>> model = poptorch.inferenceModel(Model())
    >>> model(torch.ones(3, 4, dtype=torch.int64))
    Traceback (most recent call last):
    ...
    poptorch_core.errors.Error: The input 'features' is an integer tensor ...
"""
import contextlib
import re
from typing import Any, Dict, Iterator, Optional, Sequence

import torch

from .._impl import cpp_error
from ..errors import Error
from . import host_values, rules

# What torch says when an op's operands have dtypes it cannot combine.
_DTYPE_COMPLAINT = re.compile(r"dtype|type")


class IntegerOperandError(Error):
    """An op failed on an integer operand where it needs floating point.

    Attributes:
        placeholders: positions, among the graph's placeholders, of the
            values the integer operand was computed from.
    """

    def __init__(self, op: str, detail: str, dtype: torch.dtype,
                 location: str, placeholders: Sequence[int]):
        super().__init__(
            f"{op} got an integer tensor ({dtype}) where it needs floating "
            f"point ({detail}). Cast it with .float().{location}")
        self.op, self.detail, self.dtype = op, detail, dtype
        self.where = location
        self.placeholders = list(placeholders)


def _is_integral(tensor: torch.Tensor) -> bool:
    return not (tensor.is_floating_point() or tensor.is_complex())


def check(op: str, args: Sequence[Any], kwargs: Dict[str, Any],
          error: RuntimeError, location: str) -> None:
    """Raises :class:`IntegerOperandError` if ``error`` comes from ``op``
    mixing integer and floating-point IPU tensors."""
    tracer = host_values.active_tracer()
    tensors = host_values.tensor_leaves(args, kwargs)
    integral = [t for t in tensors if _is_integral(t)]
    if tracer is None or not integral or \
            not any(t.is_floating_point() for t in tensors) or \
            not _DTYPE_COMPLAINT.search(str(error)):
        return
    order = {node: i for i, node in enumerate(
        n for n in tracer.graph.nodes if n.op == "placeholder")}
    nodes = [n for n in (host_values.graph_node(t, tracer) for t in integral)
             if n is not None]
    placeholders = sorted(order[n] for n in rules.ancestors(nodes)
                          if n in order)
    raise IntegerOperandError(op, str(error).strip().splitlines()[0],
                              integral[0].dtype, location, placeholders)


@contextlib.contextmanager
def named(num_state: int, input_names: Optional[Sequence[str]]
          ) -> Iterator[None]:
    """Turns an :class:`IntegerOperandError` of the body into the error
    :func:`name_inputs` makes."""
    try:
        yield
    except IntegerOperandError as error:
        raise name_inputs(error, num_state, input_names) from None


def name_inputs(error: IntegerOperandError, num_state: int,
                input_names: Optional[Sequence[str]]) -> Error:
    """``error`` in the user's terms: the forward's arguments the integer
    operand comes from (placeholders after the ``num_state`` parameters and
    buffers) and the cast that fixes it."""
    inputs = [p - num_state for p in error.placeholders if p >= num_state]
    if not inputs:
        return error
    names = [input_names[i] if input_names is not None and
             i < len(input_names) else f"input {i}" for i in inputs]
    first = names[0].split(",")[0]
    subject = (f"The input {names[0]!r} is" if len(names) == 1 else
               f"The inputs {', '.join(map(repr, names))} are")
    return cpp_error(
        f"{subject} an integer tensor ({error.dtype} on the IPU) and "
        f"{error.op} needs floating point (torch: {error.detail}). Cast it "
        f"before the call, e.g. model({first}.float()), or in forward: "
        f"{first} = {first}.float().{error.where}")
