"""Put a PyG model's loss into the model, the way a PopTorch training model
needs it.

A PopTorch ``trainingModel`` computes the loss inside ``forward`` and runs
the backward and the optimizer step itself. :func:`with_loss` wraps an
ordinary PyG model so that ``trainingModel`` replaces a training step's
``zero_grad`` / forward / loss / ``backward`` / ``step`` lines::

    train_model = poptorch.trainingModel(
        pyg_ipu.with_loss(model, F.cross_entropy, mask="train_mask"),
        optimizer=optimizer)
    out, loss = train_model(data)

The wrapper takes a PyG ``Data`` or ``Batch``, passes the attributes that
the model's ``forward`` names (``x``, ``edge_index``, ``batch``, ...; a
``batch_size`` argument gets the number of graph slots), and returns
``(out, loss)``. The loss is a masked mean written the IPU way: a float
mask multiplies the per-entry loss (boolean indexing would give a
data-dependent shape) and ``poptorch.identity_loss`` marks the final value,
so training minimises exactly the loss it returns. Padding graphs and nodes
of fixed-size batches (``graphs_mask`` / ``nodes_mask``) are left out
without being asked.

Example::

    >>> import torch.nn.functional as F
    >>> from torch_geometric.data import Data
    >>> from torch_geometric.nn import GCNConv
    >>> class GCN(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.conv = GCNConv(3, 2, add_self_loops=False)
    ...     def forward(self, x, edge_index):
    ...         return self.conv(x, edge_index)
    >>> data = Data(x=torch.randn(4, 3), y=torch.tensor([0, 1, 1, 0]),
    ...             edge_index=torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]]),
    ...             train_mask=torch.tensor([True, True, False, False]))
    >>> model = GCN()
    >>> train_model = poptorch.trainingModel(
    ...     with_loss(model, F.cross_entropy, mask="train_mask"),
    ...     optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    >>> out, loss = train_model(data)
    >>> out.shape
    torch.Size([4, 2])
"""
import copy
import inspect
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
from torch_geometric.data.data import BaseData

import poptorch_core as poptorch

from .metrics import padding_mask

__all__ = ["ModelWithLoss", "with_loss"]

#: ``forward`` arguments that receive the number of graph slots.
_SIZE_ARGUMENTS = ("batch_size", "num_graphs")


def _per_entry(loss_fn: Callable) -> Callable:
    """``loss_fn`` without reduction: a copy of a torch loss module with
    ``reduction="none"``, or a function called with that keyword."""
    if isinstance(loss_fn, torch.nn.Module) and hasattr(loss_fn,
                                                         "reduction"):
        module = copy.copy(loss_fn)
        module.reduction = "none"
        return module
    return lambda out, target: loss_fn(out, target, reduction="none")


class ModelWithLoss(torch.nn.Module):
    """``model`` with its loss: ``forward(data)`` returns ``(out, loss)``.

    Args:
        model: the PyG model; its ``forward`` arguments are read from the
            data by name (see :func:`with_loss`).
        loss_fn: a torch loss taking ``reduction="none"`` (for example
            ``F.cross_entropy``, ``F.mse_loss``) or a loss module.
        target: the attribute holding the targets.
        mask: the attribute of a boolean or 0/1 mask of the entries that
            count (for example ``"train_mask"``), or None.
        inputs: the attributes passed to ``model`` positionally, instead
            of matching its ``forward`` arguments by name.
    """

    def __init__(self, model: torch.nn.Module, loss_fn: Callable,
                 target: str = "y", mask: Optional[str] = None,
                 inputs: Optional[Sequence[str]] = None) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.target = target
        self.mask = mask
        self.inputs = None if inputs is None else tuple(inputs)
        self._per_entry = _per_entry(loss_fn)

    def forward(self, data: BaseData) -> Tuple[torch.Tensor, torch.Tensor]:
        """Runs the model on ``data``'s attributes; returns ``(out,
        loss)``."""
        args, kwargs = self.model_arguments(data)
        out = self.model(*args, **kwargs)
        if not isinstance(out, torch.Tensor):
            raise TypeError(
                "ModelWithLoss expects the model to return one tensor of "
                f"predictions, got {type(out).__name__}; compute the loss "
                "in the model and wrap it in poptorch.identity_loss instead.")
        return out, self.loss(out, data)

    def model_arguments(self, data: BaseData
                        ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        """The positional and keyword arguments ``model`` gets for
        ``data``."""
        if self.inputs is not None:
            return tuple(_attribute(data, name) for name in self.inputs), {}
        kwargs = {}
        for name, param in inspect.signature(
                self.model.forward).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if name == "data" or _annotated_as_data(param):
                kwargs[name] = data
            elif name in data and data[name] is not None:
                kwargs[name] = data[name]
            elif name in _SIZE_ARGUMENTS:
                kwargs[name] = data.num_graphs
            elif param.default is param.empty:
                raise ValueError(
                    f"The model's forward needs {name!r}, which the data "
                    f"does not hold (it has {sorted(data.keys())}). Pass "
                    "inputs=(...) to with_loss, naming the attributes to "
                    "give the model in order.")
        return (), kwargs

    def loss(self, out: torch.Tensor, data: BaseData) -> torch.Tensor:
        """The mean of ``loss_fn`` over the entries that count, marked with
        ``poptorch.identity_loss``."""
        target = _attribute(data, self.target)
        padding = padding_mask(data, out.shape[0])
        if padding is not None and target.dim() > 0 and \
                target.shape[0] == padding.shape[0]:
            # Padding targets hold the pad value, which need not be a valid
            # target (a class index of 1e6 is an error): 0 is one, and its
            # loss is masked out below.
            target = torch.where(_rows(padding, target), target,
                                 target.new_zeros(()))
        per_entry = self._per_entry(out, target)
        weight = torch.ones(per_entry.shape[0], device=per_entry.device)
        if self.mask is not None:
            weight = weight * _attribute(data, self.mask).to(weight.dtype)
        if padding is not None:
            weight = weight * padding.to(weight.dtype)
        weight = _rows(weight, per_entry).expand_as(per_entry)
        total = weight.sum()
        # Selected rather than multiplied: an entry that does not count
        # adds exactly 0 even where its loss is not finite.
        weighted = torch.where(weight != 0, per_entry * weight,
                               per_entry.new_zeros(()))
        # A mini-batch of padding only has no entry that counts: loss 0.
        loss = weighted.sum() / torch.where(
            total > 0, total, torch.ones_like(total))
        return poptorch.identity_loss(loss, reduction="none")


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` (one value per row) viewed to broadcast over ``like``'s
    rows."""
    return mask.view(-1, *[1] * (like.dim() - 1))


def _annotated_as_data(param: inspect.Parameter) -> bool:
    annotation = param.annotation
    return isinstance(annotation, type) and issubclass(annotation, BaseData)


def _attribute(data: BaseData, name: str) -> Any:
    value = getattr(data, name, None)
    if value is None:
        raise ValueError(f"The data has no attribute {name!r} (it has "
                         f"{sorted(data.keys())}).")
    return value


def with_loss(model: torch.nn.Module, loss_fn: Callable, target: str = "y",
              mask: Optional[str] = None,
              inputs: Optional[Sequence[str]] = None) -> ModelWithLoss:
    """Wraps ``model`` for ``poptorch.trainingModel``: the wrapper takes a
    PyG ``Data``/``Batch`` and returns ``(out, loss)``.

    The model's ``forward`` arguments are filled by name from the data
    (``x``, ``edge_index``, ``edge_attr``, ``batch``, ...); an argument
    named ``data`` (or annotated as PyG data) gets the whole object;
    ``batch_size`` / ``num_graphs`` get ``data.num_graphs``, a Python int
    (fixed for fixed-size batches); arguments the data lacks keep their
    defaults. ``inputs`` names the attributes explicitly instead.

    The loss is ``loss_fn`` per entry, averaged over the entries that count:
    those of ``mask`` (if given) that are real (``graphs_mask`` or
    ``nodes_mask`` of a fixed-size batch, chosen by the output's length).
    Padding entries get target 0 (any finite pad value works, even one
    that is not a valid class index) and add exactly 0. A mini-batch with
    no such entry (padding only) has loss 0, and a training model leaves
    it out of the step: under ``Mean`` reduction the step's gradient is
    the mean over the real mini-batches only (see ``docs/poptorch.rst``).

    Example: see the module's docstring.
    """
    return ModelWithLoss(model, loss_fn, target=target, mask=mask,
                         inputs=inputs)
