"""``trainingModel``, ``inferenceModel`` and ``load``: the ways to get a
:class:`PoplarExecutor`."""
import copy
from typing import Callable, Optional

import torch

from .._version import __version__
from ..enums import ConnectionType
from ..errors import createPoptorchError, public_call
from ..options import Options
from . import host_sync, saved_class
from .poplar_executor import PoplarExecutor
from .serialization import read_metadata

__all__ = ["trainingModel", "inferenceModel", "load"]


def _unwrap_executor(model):
    model = model.model if isinstance(model, PoplarExecutor) else model
    if not isinstance(model, torch.nn.Module):
        raise createPoptorchError(
            f"PopTorch wraps a torch.nn.Module, got {type(model).__name__} "
            f"({model!r:.60}): pass the model object itself.")
    return model


@public_call
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
    if host_sync.is_wrapped(model):
        raise RuntimeError(
            "Model has already been wrapped in 'poptorch.trainingModel'. Call "
            "model.destroy() on the model to unwrap before wrapping again.")
    return PoplarExecutor(copy.copy(model), options, True, __version__,
                          optimizer, user_model=model)


@public_call
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


@public_call
def load(filename: str,
         edit_opts_fn: Optional[Callable[[Options], None]] = None
         ) -> PoplarExecutor:
    """Loads a model saved by ``PoplarExecutor.save`` (with
    ``export_model=True``) as a ready-to-run ``trainingModel`` or
    ``inferenceModel``.

    Example::

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "model.poptorch")
        >>> ipu_model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
        >>> x = torch.randn(3, 4)
        >>> y = ipu_model(x)
        >>> ipu_model.save(path)
        >>> restored = poptorch.load(path)
        >>> torch.equal(restored(x), y)
        True
    """
    data = read_metadata(filename)
    if not (data.get("model") is not None and data.get("training") is not None):
        raise AssertionError(
            f"{filename} holds no model (it was saved with export_model=False): "
            "create the trainingModel / inferenceModel wrapper yourself and call "
            "loadExecutable() on it instead.")
    options = data["options"].clone()
    if options.connection_type == ConnectionType.Never.value:
        options.connectionType(ConnectionType.Always)
    if options.exists("ipu_version"):
        options.deleteIfExists("ipu_version")
    if edit_opts_fn is not None:
        edit_opts_fn(options)
    model = data["model"]
    if data["training"]:
        optimizer = data["optimizer"]
        if data.get("optimizer_state") is not None:
            optimizer.load_state_dict(data["optimizer_state"])
        executor = trainingModel(model, options, optimizer)
    else:
        executor = inferenceModel(model, options)
    record = data.get("model_class")
    try:
        executor.loadExecutable(filename)
    except Exception as error:  # pylint: disable=broad-except
        changed = saved_class.load_failed(filename, record, model, error)
        if changed is None:
            raise
        raise changed from None
    saved_class.warn_if_changed(filename, record, model)
    return executor
