"""Setting ``poptorch.Options`` from a config file or from JSON.

A config file holds one setter call per line, written as it would follow
``options.``; ``#`` starts a comment::

    deviceIterations(4)            # 4 batches per call
    Training.gradientAccumulation(2)
    outputMode(poptorch.OutputMode.All)

JSON maps a dotted setter path to its argument (a list is spread over the
arguments; ``"EnumName.Member"`` strings become ``poptorch`` enums)::

    {"deviceIterations": 4, "outputMode": "OutputMode.All",
     "Simulator.backend": "compile"}
"""
import json
import os
import types
from typing import Any, List, Tuple

import torch

from .. import enums

__all__ = ["ConfigFileError"]


class ConfigFileError(Exception):
    """A config file given to ``Options.loadFromFile`` has a syntax error.

    The message names the line (its number in the file) and shows its text.
    """


def _add_context(err: BaseException, note: str) -> None:
    # Keep the exception type (callers may catch it) and add where it came
    # from; notes exist from Python 3.11.
    if hasattr(err, "add_note"):
        err.add_note(note)


def _option_values() -> types.SimpleNamespace:
    """What ``poptorch.<name>`` means in a config file: the values options
    take (enums, execution strategies and stages, tensor locations)."""
    from . import _namespaces, _strategies
    names = {}
    for module in (enums, _strategies):
        names.update((n, getattr(module, n)) for n in module.__all__)
    names["TensorLocationSettings"] = _namespaces.TensorLocationSettings
    return types.SimpleNamespace(**names)


def load_from_file(options: Any, filepath: str) -> None:
    """Runs each setter line of ``filepath`` on ``options``.

    Every line is compiled before any is run, so a file with a syntax error
    changes nothing. ``poptorch`` and ``torch`` are in scope. The line
    number in a :class:`ConfigFileError` is the line's number in the file
    (upstream counted only the non-empty lines).
    """
    name = os.path.basename(filepath)
    compiled: List[Tuple[int, str, Any]] = []
    with open(filepath, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            try:
                code = compile("options." + stripped,
                               f"{name}:{lineno}", "exec")
            except SyntaxError as err:
                raise ConfigFileError(
                    f"SyntaxError at line {lineno} of {name}: "
                    f"{err.msg}\n> {stripped}") from None
            compiled.append((lineno, stripped, code))
    scope = {"poptorch": _option_values(), "torch": torch, "options": options}
    for lineno, stripped, code in compiled:
        try:
            exec(code, scope)  # pylint: disable=exec-used
        except Exception as err:
            _add_context(err, f"while applying line {lineno} of {name}: "
                         f"{stripped}")
            raise


def _convert_value(value: Any) -> Any:
    """``"EnumName.Member"`` -> the ``poptorch`` enum member and
    ``"torch.<dtype>"`` -> the torch dtype; other values unchanged."""
    if isinstance(value, list):
        return [_convert_value(v) for v in value]
    if not isinstance(value, str) or value.count(".") != 1:
        return value
    prefix, member = value.split(".")
    if prefix == "torch" and isinstance(getattr(torch, member, None),
                                        torch.dtype):
        return getattr(torch, member)
    if prefix not in enums.__all__:
        return value
    enum_class = getattr(enums, prefix)
    if member not in enum_class.__members__:
        raise ValueError(f"Invalid value {value!r}: {prefix} has no member "
                         f"{member!r}; valid members are "
                         f"{', '.join(enum_class.__members__)}")
    return enum_class[member]


def apply_json(options: Any, text: str) -> None:
    """Calls the setters named by the keys of the JSON object ``text``."""
    try:
        values = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"Options JSON is not valid JSON ({error.msg} at line "
            f"{error.lineno} column {error.colno}): write an object such as "
            '{"deviceIterations": 4, "outputMode": "OutputMode.All"}.'
            ) from None
    if not isinstance(values, dict):
        raise ValueError("Options JSON must be an object mapping setter "
                         "names to values, e.g. {\"deviceIterations\": 4}; "
                         f"got {type(values).__name__}")
    for key, value in values.items():
        target = options
        for part in key.split("."):
            target = getattr(target, part)
        if not callable(target):
            raise ValueError(
                f"Options JSON key {key!r} names a value, not a setter: use "
                "the setter's name, e.g. \"deviceIterations\" rather than "
                "\"device_iterations\"")
        value = _convert_value(value)
        if isinstance(value, list):
            target(*value)
        else:
            target(value)
