"""The simulated IPU executor: ``trainingModel``, ``inferenceModel``,
``PoplarExecutor`` and ``load``."""
import copy
from typing import Optional

import torch

from .._version import __version__
from ..options import Options
from . import _host_sync
from .backends._executable import compilation_count
from ._executor import PoplarExecutor
from ._serialization import load

__all__ = ["PoplarExecutor", "trainingModel", "inferenceModel", "load"]


def _unwrap_executor(model):
    return model._user_model if isinstance(model, PoplarExecutor) else model


def trainingModel(model: torch.nn.Module, options: Optional[Options] = None,
                  optimizer: Optional[torch.optim.Optimizer] = None
                  ) -> PoplarExecutor:
    """Wraps ``model`` to train on the simulated IPU.

    Each call runs ``deviceIterations`` optimizer steps, each over
    ``gradientAccumulation x replicationFactor`` micro-batches, and returns
    the forward's outputs (computed before each step's update). The model's
    forward must return its loss (a torch loss or ``poptorch.identity_loss``).

    Example::

        >>> class Model(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = torch.nn.Linear(4, 1)
        ...     def forward(self, x, y):
        ...         out = self.fc(x)
        ...         return out, torch.nn.functional.mse_loss(out, y)
        >>> model = Model()
        >>> ipu_model = poptorch.trainingModel(
        ...     model, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
        >>> out, loss = ipu_model(torch.randn(8, 4), torch.randn(8, 1))
    """
    model = _unwrap_executor(model)
    if _host_sync.is_wrapped(model):
        raise RuntimeError(
            "Model has already been wrapped in 'poptorch.trainingModel'. Call "
            "model.destroy() on the model to unwrap before wrapping again.")
    return PoplarExecutor(copy.copy(model), options, True, __version__,
                          optimizer, user_model=model)


def inferenceModel(model: torch.nn.Module,
                   options: Optional[Options] = None) -> PoplarExecutor:
    """Wraps ``model`` to run inference on the simulated IPU.

    The model keeps its mode (call ``model.eval()`` before wrapping for
    inference behaviour of dropout and batch norm).

    Example::

        >>> ipu_model = poptorch.inferenceModel(torch.nn.Linear(4, 2).eval())
        >>> ipu_model(torch.randn(8, 4)).shape
        torch.Size([8, 2])
    """
    model = _unwrap_executor(model)
    return PoplarExecutor(copy.copy(model), options, False, __version__,
                          user_model=model)
