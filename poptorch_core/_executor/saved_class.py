"""Noticing that a saved model's class changed before ``poptorch.load``.

A saved file pickles the model, and pickle stores its class by module and
name only: loading builds an object of the class *as defined now* from the
attributes saved with the old one. If the class changed since (a new layer
in ``__init__``, another ``forward``), re-tracing fails inside the user's
forward with a bare ``AttributeError``, or succeeds and runs code the saved
weights were not trained for. So ``save`` records the class's name, a
digest of its source and ``forward``'s signature, and ``load`` compares
them with the class it finds: a failed re-trace of a changed class says
what changed and how to fix it, and a changed class that still traces
warns.

Example::

    >>> record = fingerprint(torch.nn.Linear(2, 1))
    >>> record["name"], changes(record, torch.nn.Linear(2, 1))
    ('torch.nn.modules.linear.Linear', [])
"""
import hashlib
import inspect
from typing import Any, Dict, List, Optional, Tuple

import torch

from .._logging import logger
from ..errors import Error, createPoptorchError


def _source_digest(cls: type) -> Optional[str]:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # defined interactively, or built-in
        return None
    return hashlib.sha256(source.encode()).hexdigest()


def _forward_signature(model: torch.nn.Module) -> str:
    try:
        return str(inspect.signature(type(model).forward))
    except (TypeError, ValueError):
        return "(...)"


def fingerprint(model: torch.nn.Module) -> Dict[str, Any]:
    """What ``save`` records about the model's class."""
    cls = type(model)
    return {"name": f"{cls.__module__}.{cls.__qualname__}",
            "source": _source_digest(cls),
            "forward": _forward_signature(model),
            "parameters": _parameters(model)}


def _parameters(model: torch.nn.Module) -> List[Tuple[str, Tuple[int, ...]]]:
    # Shapes only: reading a training model's parameters would sync its
    # stale host weights.
    with torch._C.DisableTorchFunctionSubclass():
        return [(name, tuple(param.shape)) for name, param in
                model.named_parameters(remove_duplicate=False)]


def changes(record: Optional[Dict[str, Any]],
            model: torch.nn.Module) -> List[str]:
    """How the loaded model's class differs from the one it was saved
    with, in words (empty: no difference seen)."""
    if not record:
        return []
    now = fingerprint(model)
    found = []
    if record["source"] and now["source"] and \
            record["source"] != now["source"]:
        found.append("its source code changed")
    if record["forward"] != now["forward"]:
        found.append(f"forward{record['forward']} is now "
                     f"forward{now['forward']}")
    return found


def _submodules(model: torch.nn.Module) -> str:
    names = [name for name, _ in model.named_children()]
    return ", ".join(names) if names else "none"


def load_failed(filename: str, record: Optional[Dict[str, Any]],
                model: torch.nn.Module, error: Exception) -> Optional[Error]:
    """The error for a saved model that could not be re-traced because its
    class changed, or None if nothing says that it did."""
    found = changes(record, model)
    if isinstance(error, AttributeError):
        # The class reads an attribute the saved object was not given.
        found.append("the saved object lacks an attribute it reads")
    if not found:
        return None
    name = record["name"] if record else \
        f"{type(model).__module__}.{type(model).__qualname__}"
    what = "; ".join(found)
    return createPoptorchError(
        f"poptorch.load({filename!r}): the saved model is a {name}, and the "
        f"class {type(model).__qualname__} defined now differs from the one "
        f"it was saved with ({what}). Re-tracing the saved model with it "
        f"failed: {type(error).__name__}: {error}. The saved model has the "
        f"submodules: {_submodules(model)}. Run with the class as it was "
        "when the model was saved, or build a model of the new class, load "
        "the saved weights that still fit (model.load_state_dict(..., "
        "strict=False)), then compile and save it again.")


def warn_if_changed(filename: str, record: Optional[Dict[str, Any]],
                    model: torch.nn.Module) -> None:
    """Warns when a saved model loaded with a changed class."""
    found = changes(record, model)
    if found:
        logger.warning(
            "poptorch.load(%r): the class of the saved %s changed since it "
            "was saved (%s): the loaded model runs the class as defined now "
            "with the saved weights. Save it again if that is intended.",
            filename, record["name"], "; ".join(found))


def warn_if_other_model(filename: str, record: Optional[Dict[str, Any]],
                        model: torch.nn.Module) -> None:
    """``loadExecutable`` of a file saved from another model: the
    simulator re-traces this wrapper's model, so the file's model is not
    what runs."""
    if not record:
        return
    now = fingerprint(model)
    if record["name"] == now["name"] and \
            record.get("parameters", now["parameters"]) == now["parameters"]:
        return
    logger.warning(
        "loadExecutable(%r): the file was saved from a %s, and this wrapper "
        "holds a %s with %s parameters: the executable is compiled for this "
        "wrapper's model and weights, not the file's. Use "
        "poptorch.load(%r) to run the saved model.", filename,
        record["name"], now["name"],
        "the same" if record.get("parameters") == now["parameters"]
        else "different", filename)
