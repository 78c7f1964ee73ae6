"""Every public class, method, property and function has a docstring.

The public API is what a user can reach without a leading underscore: the
names in ``__all__`` (or, without one, the public names) of every module of
``poptorch_core`` and ``poptorch_geometric`` whose dotted name has no
private part, the modules those expose as attributes (``poptorch.
poptorch_core``), and the sub-namespace classes of ``poptorch.Options``
(``opts.Training``, ``opts.Simulator``, ...), whose classes are private but
whose methods users call. A class's methods and properties count when they
are defined by the class or by one of its bases from these packages, not
when they come from torch or PyG.
"""
import dataclasses
import importlib
import inspect
import pathlib
import pkgutil
import re
import types
from functools import cached_property, singledispatchmethod
from typing import Any, Dict, Iterator, List, NamedTuple, Tuple

import pytest
import torch

import poptorch_core
import poptorch_geometric

PACKAGES = ("poptorch_core", "poptorch_geometric")


def _ours(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.split(".")[0] in PACKAGES


def _is_public_module(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _public_modules() -> List[types.ModuleType]:
    modules = []
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names = [package] + [i.name for i in pkgutil.walk_packages(
            path, package + ".")]
        modules += [importlib.import_module(n) for n in names
                    if _is_public_module(n)]
    # Modules exposed under a public name, e.g. PopTorch's
    # ``poptorch.poptorch_core`` (our ``_native``).
    for module in list(modules):
        for name, value in vars(module).items():
            if (isinstance(value, types.ModuleType)
                    and not name.startswith("_")
                    and value.__name__.split(".")[0] in PACKAGES
                    and value not in modules):
                modules.append(value)
    return modules


def _public_objects(module: types.ModuleType) -> Iterator[Tuple[str, Any]]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    for name in names:
        obj = getattr(module, name)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and _ours(obj):
            yield f"{module.__name__}.{name}", obj


def _options_namespace_classes() -> Iterator[Tuple[str, type]]:
    opts = poptorch_core.Options()
    for name in dir(opts):
        if not name.startswith("_") and _ours(type(getattr(opts, name))):
            yield f"poptorch.Options().{name}", type(getattr(opts, name))


def public_api() -> Dict[str, Any]:
    """``{dotted name: class or function}`` of the whole public API."""
    api = {}
    for module in _public_modules():
        api.update(_public_objects(module))
    api.update(_options_namespace_classes())
    return api


def _auto_class_doc(cls: type, doc: str) -> bool:
    # dataclasses and NamedTuples write "Name(field, ...)" when the class
    # has no docstring: that documents nothing.
    return re.fullmatch(re.escape(cls.__name__) + r"\(.*\)", doc,
                        re.DOTALL) is not None


def _own_doc(obj: Any) -> str:
    if isinstance(obj, singledispatchmethod):
        obj = obj.func
    if inspect.isclass(obj):
        doc = (vars(obj).get("__doc__") or "").strip()
        return "" if _auto_class_doc(obj, doc) else doc
    if isinstance(obj, (property, cached_property)):
        return (obj.__doc__ or "").strip()
    return (getattr(obj, "__doc__", None) or "").strip()


def _generated(value: Any) -> bool:
    """A module-level function set on a class at run time, not a method of
    its body: PyG compiles ``propagate``, ``collect``, ... of every
    ``MessagePassing`` subclass from a template on first construction and
    sets them on the class, so the check would depend on test order."""
    return inspect.isfunction(value) and "." not in value.__qualname__


def _members(cls: type) -> Iterator[Tuple[str, Any]]:
    seen = set()
    for base in cls.__mro__:
        if not _ours(base):
            continue
        for name, value in vars(base).items():
            if name.startswith("_") or name in seen or _generated(value):
                continue
            seen.add(name)
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if (inspect.isfunction(value) or inspect.isclass(value) or
                    isinstance(value, (property, cached_property,
                                       singledispatchmethod))):
                yield f"{base.__qualname__}.{name}", value


def undocumented(api: Dict[str, Any]) -> List[str]:
    """The names in ``api`` (and their classes' members) without a
    docstring."""
    missing = set()
    for name, obj in api.items():
        if not _own_doc(obj):
            missing.add(name)
        if inspect.isclass(obj):
            missing.update(f"{obj.__module__}.{member}"
                           for member, value in _members(obj)
                           if not _own_doc(value))
    return sorted(missing)


def test_every_public_name_has_a_docstring():
    api = public_api()
    # The walk must reach the API, not pass on an empty one.
    for name in ("poptorch_core.Options", "poptorch_core.PoplarExecutor",
                 "poptorch_core.optim.SGD", "poptorch_core.Ir",
                 "poptorch_geometric.FixedSizeDataLoader",
                 "poptorch.Options().Training"):
        assert name in api, name
    assert undocumented(api) == []


class _Documented:
    """A class with a docstring."""

    def method(self):
        """A method with a docstring."""

    @property
    def value(self):
        """A property with a docstring."""


class _Bare:
    def method(self):
        pass

    @property
    def value(self):
        return 1

    @staticmethod
    def helper():
        pass

    @singledispatchmethod
    def dispatch(self, arg):
        pass


@dataclasses.dataclass
class _BareRecord:
    field: int


class _BareTuple(NamedTuple):
    field: int


def _bare_function():
    pass


class _BareSubclass(_Documented):
    def extra(self):
        pass


def test_the_check_reports_what_has_no_docstring(monkeypatch):
    # The helpers above must look like package code to be checked at all.
    for obj in (_Documented, _Bare, _BareRecord, _BareTuple, _bare_function,
                _BareSubclass):
        monkeypatch.setattr(obj, "__module__", "poptorch_core.fake")
    assert undocumented({"documented": _Documented}) == []
    assert undocumented({"bare": _Bare, "record": _BareRecord,
                         "tuple": _BareTuple, "function": _bare_function,
                         "subclass": _BareSubclass}) == sorted([
        "bare", "poptorch_core.fake._Bare.method",
        "poptorch_core.fake._Bare.value", "poptorch_core.fake._Bare.helper",
        "poptorch_core.fake._Bare.dispatch",
        "record", "tuple", "function", "subclass",
        "poptorch_core.fake._BareSubclass.extra"])


def test_members_inherited_from_torch_are_not_checked(monkeypatch):
    class Layer(torch.nn.Module):
        """A layer."""

        def forward(self, x):
            """Returns ``x``."""
            return x

    monkeypatch.setattr(Layer, "__module__", "poptorch_core.fake")
    assert [name.rsplit(".", 1)[1] for name, _ in _members(Layer)] == [
        "forward"]


def test_no_docstring_cites_sections_of_a_specification():
    # Users do not have the document such citations point into.
    citation = re.compile(r"\bspec(ification)?s? *(section *)?§? *\d",
                          re.IGNORECASE)
    roots = [pathlib.Path(p.__file__).parent
             for p in (poptorch_core, poptorch_geometric)]
    offending = [f"{path}:{number}"
                 for root in roots for path in sorted(root.rglob("*.py"))
                 for number, line in enumerate(
                     path.read_text().splitlines(), 1)
                 if citation.search(line)]
    assert offending == []


# --- No measurements in docstrings and comments ------------------------------
#
# A docstring says what, why, the invariants and an example; a comment says
# why. Timings, run counts, dates and before/after ratios go stale with the
# next change and belong in the design notes (docs/design/) or on the
# generated benchmark page (docs/benchmarks.md).

_NUMBER = r"\d+(?:[.,]\d+)?"
_RANGE = rf"{_NUMBER}(?:-{_NUMBER})?"
_COUNT = (r"(?:\d+|two|three|four|five|six|seven|eight|nine|ten|eleven|"
          r"twelve|twenty)")
MEASUREMENT = re.compile("|".join([
    # A duration below a second, or a measured number of seconds: a
    # decimal, a range or "about N s" (a whole number of seconds alone is a
    # setting, such as a timeout).
    rf"\b{_RANGE} ?(?:ms|us|µs|ns)\b",
    rf"\b\d+\.\d+ ?s\b", rf"\b{_NUMBER}-{_NUMBER} ?s\b",
    rf"\b(?:about|took|takes|taking) {_NUMBER} ?s\b",
    # Dates.
    r"\b(?:19|20)\d\d-\d\d-\d\d\b",
    # Before/after: "1.5x", "0.93 of the time", "3 times as fast".
    rf"\b{_RANGE}x\b",
    rf"\b\d\.\d+(?: and \d\.\d+)? of (?:the|its) time\b",
    rf"\b(?:{_NUMBER}|twice|\w+ times) as (?:fast|long|slow|much)\b",
    rf"\b{_NUMBER}% (?:faster|slower)\b",
    rf"\b{_NUMBER}-{_NUMBER}%",
    rf"\btook {_NUMBER}",
    # Run counts.
    rf"\b(?:in|over|of) (?:\w+ )?{_COUNT} (?:paired |interleaved |fresh )?"
    r"(?:runs|rounds|epochs|pairs)\b",
    r"\bpaired\b", r"\binterleaved rounds\b", r"\bmedians? of\b",
    r"\b[Mm]easured (?:on|at|in|\d)",
]), re.IGNORECASE)

#: ``(path under the repository, text)`` of the lines that match
#: ``MEASUREMENT`` and measure nothing: each a format or a constant.
MEASUREMENT_ALLOWED = {
    # The report's format of durations, not a measured one.
    ("poptorch_core/device/report.py",
     '``"12.3 us"``, ``"4.56 ms"`` or ``"1.23 s"``.'),
}


def _comments_and_docstrings(source: str):
    """``(line, text)`` of every comment line and every line of a module,
    class or function docstring of ``source``."""
    import ast
    import io
    import tokenize
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and \
                    isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                for offset, line in enumerate(
                        first.value.value.splitlines()):
                    yield first.lineno + offset, line


def measurements(root: pathlib.Path, base: pathlib.Path) -> List[str]:
    """``path:line: text`` of every comment or docstring line under
    ``root`` that reads like a measurement (``MEASUREMENT``), less the
    allowed ones."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(base).as_posix()
        for number, text in _comments_and_docstrings(path.read_text()):
            text = text.strip()
            if MEASUREMENT.search(text) and \
                    (relative, text) not in MEASUREMENT_ALLOWED:
                found.append(f"{relative}:{number}: {text}")
    return found


def test_no_docstring_or_comment_holds_measurements():
    base = pathlib.Path(poptorch_core.__file__).parent.parent
    found = [line for package in PACKAGES
             for line in measurements(base / package, base)]
    assert found == [], "\n".join(
        ["Move these figures to docs/design/ (or the generated benchmark "
         "page) and keep what, why and the invariants here:"] + found)


def test_every_allowed_measurement_line_exists():
    # A stale allow-list entry would hide the next line that matches it.
    base = pathlib.Path(poptorch_core.__file__).parent.parent
    for relative, text in MEASUREMENT_ALLOWED:
        lines = [line.strip() for _, line in _comments_and_docstrings(
            (base / relative).read_text())]
        assert text in lines, (relative, text)


@pytest.mark.parametrize("text", [
    "a compiled training step went from about 14 ms to 6.7-7.4 ms",
    "took 0.93 and 0.97 of its time in two runs",
    "(median of 16 paired epochs)",
    "Measured on a first run on a machine (nothing cached), 2 cores",
    "steady steps took 1.01x as long (0.99-1.04, 20 interleaved rounds)",
    "measured on 2026-12-04",
    "about 20 times as fast as a Python loop",
    "first step 17.6 s before, 13.0 s after",
    "the first step took 14.5-14.8 s",
    "Async loading in a worker measured 6-10% slower than Sync",
    "about 80 µs for a 420 KB batch",
    "twice as fast as ATen's",
])
def test_measurements_are_recognised(text):
    assert MEASUREMENT.search(text), text


@pytest.mark.parametrize("text", [
    "Seconds between beats: a twentieth of the timeout, at most 1 s.",
    "the accessor's ``timeout`` (300 s) is for a worker that sends nothing",
    "30% once tracing is done, 70% once inductor has generated its code",
    "one pass over the buffers instead of eight",
    "``2 x output elements x contracted size``",
    "a graph overtakes fewer than ``lookahead`` waiting graphs",
    "several times slower on CPU with int32 indices",
    "the second call starts building",
])
def test_descriptions_are_not_measurements(text):
    assert not MEASUREMENT.search(text), text
