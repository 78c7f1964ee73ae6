"""PopTorch's optimizers (``poptorch.optim``).

Drop-in replacements for ``torch.optim.SGD``, ``Adam``, ``AdamW`` and
``RMSprop``, plus ``LAMB``, with the IPU's extra arguments (loss scaling,
accumulation types, gradient clipping, variants). Native torch optimizers
are accepted too and behave like these with default extra arguments.

Example::

    >>> class Regression(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = torch.nn.Linear(4, 1)
    ...     def forward(self, x, y):
    ...         return torch.nn.functional.mse_loss(self.fc(x), y)
    >>> model = Regression()
    >>> opt = poptorch.optim.AdamW(model.parameters(), lr=1e-3,
    ...                            loss_scaling=1024.0)
    >>> training_model = poptorch.trainingModel(model, optimizer=opt)
    >>> training_model(torch.randn(8, 4), torch.randn(8, 1)).shape
    torch.Size([])
"""
from ._base import Optimizer
from ._classes import LAMB, SGD, Adam, AdamW, RMSprop
from ._variable import VariableAttributes
# Private modules the executor uses: the conversion and the device side.
from . import _attributes, _device  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "LAMB",
           "VariableAttributes"]
