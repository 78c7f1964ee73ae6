"""A warning for a wrapper whose mode no longer matches its model's.

``trainingModel`` and ``inferenceModel`` wrap a shallow copy of the model,
which keeps the ``training`` flag the model had when it was wrapped, as in
PopTorch: ``model.eval()`` after wrapping does not reach the wrapper. The
common PyG pattern (wrap once at the top, call ``model.eval()`` in
``test()``) then evaluates with dropout active and batch statistics, and
nothing says so. The executor checks the flags at each call and warns once
per wrapper, with the fix.

Example::

    >>> model = torch.nn.Sequential(torch.nn.Dropout(0.5))
    >>> ipu_model = poptorch.inferenceModel(model)   # still in training mode
    >>> _ = model.eval()
    >>> mode_mismatch_message(ipu_model.model, wrapped_training=True,
    ...                       wrapper="inferenceModel")[:50]
    'The model is in eval mode (model.training is False'
"""
from typing import Optional

import torch

from .._logging import logger


def _mode(training: bool) -> str:
    return "training" if training else "eval"


def mode_mismatch_message(user_model: torch.nn.Module, wrapped_training: bool,
                          wrapper: str) -> Optional[str]:
    """The warning for ``user_model`` called through a ``wrapper`` (the
    function's name) created in ``wrapped_training`` mode, or None when the
    modes agree."""
    now = bool(user_model.training)
    if now == wrapped_training:
        return None
    switch = "model.eval()" if not now else "model.train()"
    fix = (f"call {switch} before poptorch.{wrapper}(model), for example "
           f"poptorch.{wrapper}(model.{'eval' if not now else 'train'}()), "
           "or wrap the model again after changing its mode")
    return (
        f"The model is in {_mode(now)} mode (model.training is {now}) but "
        f"this poptorch.{wrapper} wrapper was created while it was in "
        f"{_mode(wrapped_training)} mode, and a wrapper keeps the mode its "
        f"model had when it was wrapped ({switch} after wrapping does not "
        f"reach it): this wrapper still runs in {_mode(wrapped_training)} "
        f"mode (dropout {'active' if wrapped_training else 'off'}, batch "
        f"norm using {'batch' if wrapped_training else 'running'} "
        f"statistics). Fix: {fix}.")


def warn_once_on_mode_mismatch(state) -> None:
    """Logs :func:`mode_mismatch_message` for ``state`` (an
    ``ExecutorState``) the first time the modes differ."""
    if state.mode_warned:
        return
    wrapper = "trainingModel" if state.training else "inferenceModel"
    message = mode_mismatch_message(state.user_model,
                                    bool(state.model.training), wrapper)
    if message is not None:
        state.mode_warned = True
        logger.warning(message)
