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
import contextlib
import difflib
import enum
import json
import os
import types
import warnings
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch

from .. import enums
from .._logging import logger

__all__ = ["ConfigFileError"]


class ConfigFileError(Exception):
    """A config file given to ``Options.loadFromFile`` has a syntax error.

    The message names the line (its number in the file) and quotes the
    command that failed, as PopTorch does::

        SyntaxError at line 4 of bad.conf: '(' was never closed
        > options.replicationFactor(2
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


def _read_text(filepath: str, name: str) -> str:
    try:
        with open(filepath, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as err:
        raise ConfigFileError(
            f"{name} is not a text file (byte {err.object[err.start]:#04x} "
            f"at offset {err.start} is not UTF-8): loadFromFile reads a "
            "text file of setter calls, one per line, such as "
            "deviceIterations(4)") from None


def _as_setter_lines(values: Dict[str, Any]) -> List[str]:
    """JSON options written as config-file lines."""
    def literal(value: Any) -> str:
        converted = _convert_value(value)
        if isinstance(converted, enum.Enum):
            return f"poptorch.{type(converted).__name__}.{converted.name}"
        if isinstance(converted, torch.dtype):
            return str(converted)
        return repr(value)

    return [f"{key}({', '.join(map(literal, value if isinstance(value, list) else [value]))})"
            for key, value in values.items()]


def _refuse_json(text: str, name: str) -> None:
    """A JSON object given to ``loadFromFile``: say how to apply it."""
    try:
        values = json.loads(text)
    except ValueError:
        return
    if not isinstance(values, dict):
        return
    try:
        lines = "\n".join(f"  {line}" for line in _as_setter_lines(values))
    except ValueError:
        lines = "  deviceIterations(4)"
    raise ConfigFileError(
        f"{name} holds JSON, but loadFromFile reads one setter call per "
        "line, written as it would follow 'options.'. Apply JSON with "
        f"options.from_json(open({name!r}).read()) (or the "
        "POPTORCH_DEFAULT_OPTIONS environment variable), or write the file "
        f"as:\n{lines}")


def load_from_file(options: Any, filepath: str) -> None:
    """Runs each setter line of ``filepath`` on ``options``.

    Every line is compiled before any is run, so a file with a syntax error
    changes nothing, and the lines are tried on a copy of the options first,
    so a line that fails changes nothing either. ``poptorch`` and ``torch``
    are in scope. The line number in a :class:`ConfigFileError` is the
    line's number in the file (upstream counted only the non-empty lines).
    """
    name = os.path.basename(filepath)
    text = _read_text(filepath, name)
    compiled: List[Tuple[int, str, Any]] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        command = "options." + stripped
        try:
            code = compile(command, f"{name}:{lineno}", "exec")
        except SyntaxError as err:
            _refuse_json(text, name)
            # PopTorch quotes the command it ran, "options." included.
            raise ConfigFileError(
                f"SyntaxError at line {lineno} of {name}: "
                f"{err.msg}\n> {command}") from None
        compiled.append((lineno, stripped, code))
    values = _option_values()

    def apply(target: Any) -> None:
        scope = {"poptorch": values, "torch": torch, "options": target}
        for lineno, stripped, code in compiled:
            try:
                exec(code, scope)  # pylint: disable=exec-used
            except Exception as err:
                _add_context(err, f"while applying line {lineno} of {name}: "
                             f"{stripped}")
                raise

    apply_all_or_nothing(options, apply)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No log records or warnings (a trial run repeats them otherwise)."""
    was_disabled, logger.disabled = logger.disabled, True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.disabled = was_disabled


def apply_all_or_nothing(options: Any, apply: Callable[[Any], None]) -> None:
    """Runs ``apply(options)`` only if it succeeds on a copy of
    ``options``: a failing setter leaves the options as they were. The
    setters are deterministic, so the second run succeeds too. Frozen
    options refuse the first change anyway."""
    if not options.frozen:
        with _quiet():
            apply(options.clone())
    apply(options)


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
    calls = [(key, _setter(options, key), _convert_value(value))
             for key, value in values.items()]

    def apply(target: Any) -> None:
        for key, _, value in calls:
            setter = _setter(target, key)
            if isinstance(value, list):
                setter(*value)
            else:
                setter(value)

    apply_all_or_nothing(options, apply)


def _setter(options: Any, key: str) -> Callable[..., Any]:
    """The setter that the dotted JSON key names on ``options``."""
    target = options
    for part in key.split("."):
        if not hasattr(target, part):
            known = [n for n in dir(target) if not n.startswith("_") and
                     callable(getattr(target, n, None))]
            close = difflib.get_close_matches(part, known, n=1)
            hint = (f"did you mean {close[0]!r}?" if close else
                    "use a setter of poptorch.Options, e.g. "
                    '"deviceIterations" or "Training.gradientAccumulation".')
            # AttributeError, as getattr raised before the hint was added.
            raise AttributeError(f"Invalid attribute {part}. Options JSON key "
                                 f"{key!r} names no option setter: {hint}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(
            f"Options JSON key {key!r} names a value, not a setter: use "
            "the setter's name, e.g. \"deviceIterations\" rather than "
            "\"device_iterations\"")
    return target
