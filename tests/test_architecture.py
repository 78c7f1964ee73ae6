"""The package layering that ``ARCHITECTURE.md`` draws, checked on the source.

Every ``import`` and ``from ... import`` in ``poptorch_core`` and
``poptorch_geometric`` is read with ``ast`` (function-level imports and
``TYPE_CHECKING`` blocks included: both are real dependencies) and each
must point down the layers below. Modules of one unit (a package such as
``executor`` or ``options``) may import each other, but the whole import
graph has no cycle. Units that share a layer are independent of each
other.
"""
import ast
import pathlib
from typing import Dict, List, Set, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: Bottom-up. A module may import from its own unit and from units of lower
#: layers only. Keep in step with ARCHITECTURE.md.
LAYERS: List[Tuple[str, ...]] = [
    ("errors", "enums", "_logging", "_version", "_utils", "_module_repr",
     "profiling", "testing"),
    ("_impl", "_args_parser", "files"),
    ("_dtypes", "_native"),
    ("options",),
    ("annotations",),
    ("ops",),
    ("_tracing",),
    ("_ir",),
    ("optim", "data"),
    ("device",),
    ("_executor",),
    ("distributed", "plugins"),
    ("__init__",),
    ("__main__",),
]
CORE = "poptorch_core"
GEOMETRIC = "poptorch_geometric"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Dict[str, pathlib.Path]:
    return {_module_name(p): p
            for package in (CORE, GEOMETRIC)
            for p in (ROOT / package).rglob("*.py")}


def _imports(name: str, path: pathlib.Path,
             modules: Dict[str, pathlib.Path]) -> Set[str]:
    """The project modules that ``name`` imports (the deepest module each
    import names: ``from .x import y`` is ``x.y`` when that is a module)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if not is_package:
                    base.pop()
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules
                       else source for a in node.names]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                found.add(target)
    return found


def _graph() -> Dict[str, Set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules)
            for name, path in modules.items()}


def _unit(module: str) -> str:
    """``poptorch_core._executor.backends.passes.lowering`` -> ``executor``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(module: str) -> int:
    unit = _unit(module)
    for index, units in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(
        f"{module}: unit {unit!r} has no layer; add it to LAYERS and to "
        "ARCHITECTURE.md")


def test_core_units_have_a_layer():
    for module in _modules():
        if module.startswith(CORE):
            _layer(module)


def test_core_imports_point_down():
    bad = []
    for module, targets in _graph().items():
        if not module.startswith(CORE):
            continue
        for target in targets:
            if target.startswith(GEOMETRIC):
                bad.append(f"{module} -> {target} (the core never imports "
                           "its plugin)")
            elif _unit(target) != _unit(module) and \
                    _layer(target) >= _layer(module):
                bad.append(f"{module} -> {target}")
    assert not bad, "imports that do not point down:\n" + "\n".join(bad)


def _cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import cycle, as a list of modules, or [] if there is none."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        state[node] = 2
        stack.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_no_import_cycles():
    cycle = _cycle(_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_cycle_finder(graph, expected):
    assert _cycle(graph) == expected


def test_geometric_uses_the_core_public_api_or_shared_utilities():
    # Besides the public API, the plugin uses the core's plugin interface
    # (``poptorch_core.plugins``) and its atomic file writes
    # (``poptorch_core.files``).
    allowed = {CORE, f"{CORE}.plugins", f"{CORE}.files"}
    bad = [f"{module} -> {target}"
           for module, targets in _graph().items()
           if module.startswith(GEOMETRIC)
           for target in targets
           if target.startswith(CORE) and target not in allowed]
    assert not bad, "\n".join(bad)


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def test_modules_and_functions_stay_small():
    """One concept per module and per function: no module over 600 lines,
    no function (docstring included) over 60."""
    too_long = []
    for name, path in _modules().items():
        source = path.read_text()
        lines = source.count("\n")
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)


def test_package_versions_are_real():
    import re
    import tomllib

    import poptorch_core
    import poptorch_geometric
    from poptorch_core._version import __simulator_version__

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == __simulator_version__
    for version in (poptorch_core.__version__, poptorch_geometric.__version__,
                    __simulator_version__):
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), version


def test_no_assert_statements_in_the_packages():
    """Checks of user input must survive ``python -O``, which strips
    ``assert``: they raise explicitly (AssertionError where PopTorch's
    documented behaviour is one)."""
    found = [f"{name}:{node.lineno}" for name, path in _modules().items()
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Assert)]
    assert not found, "assert statements: " + ", ".join(found)


# --- What a leading underscore means (ARCHITECTURE.md) ----------------------

#: Underscored names that PopTorch and PopTorch Geometric themselves define
#: and user code reaches (the spec quotes them): they keep their names
#: although other modules import them.
UPSTREAM_PRIVATE_NAMES = {
    "_OverwriteContextManager", "_TorchGeometricOpsSubstitutionManager",
    "_IExecutionStrategy", "_PopartOptions", "_DistributedOptions",
    "_JitOptions", "_PrecisionOptions", "_TensorLocationOptions",
    "_TrainingOptions",
}

#: Module names the spec fixes in ``poptorch_geometric`` (``types.py``,
#: ``utils.py``), which the core may share in its private modules.
SPEC_MODULE_NAMES = {"types", "utils"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_aliases(name: str, path: pathlib.Path,
                    modules: Dict[str, pathlib.Path]) -> Dict[str, str]:
    """Local names that ``name`` binds to project modules."""
    aliases = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            source = _absolute_source(name, path, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = \
                        f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
    return aliases


def _absolute_source(name: str, path: pathlib.Path,
                     node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".")
    if path.name != "__init__.py":
        base.pop()
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def test_private_names_stay_in_their_module():
    """A name another module imports, or reads as ``module._name``, has no
    leading underscore."""
    modules = _modules()
    bad = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases = _module_aliases(name, path, modules)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute_source(name, path, node)
                if source.split(".")[0] not in (CORE, GEOMETRIC):
                    continue
                bad += [f"{name}: from {source} import {a.name}"
                        for a in node.names
                        if _is_private(a.name)
                        and f"{source}.{a.name}" not in modules
                        and a.name not in UPSTREAM_PRIVATE_NAMES]
            elif isinstance(node, ast.Attribute) and \
                    isinstance(node.value, ast.Name) and \
                    node.value.id in aliases and _is_private(node.attr) and \
                    node.attr not in UPSTREAM_PRIVATE_NAMES and \
                    f"{aliases[node.value.id]}.{node.attr}" not in modules:
                bad.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    assert not bad, "\n".join(sorted(set(bad)))


def test_modules_of_private_packages_have_plain_names():
    bad = [name for name in _modules()
           if any(_is_private(part) for part in name.split(".")[:-1])
           and _is_private(name.split(".")[-1])]
    assert not bad, "\n".join(bad)


def test_private_modules_declare_no_all():
    bad = []
    for name, path in _modules().items():
        if not any(_is_private(part) for part in name.split(".")):
            continue
        for node in ast.parse(path.read_text()).body:
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, ast.AnnAssign)
                       else [])
            if any(isinstance(t, ast.Name) and t.id == "__all__"
                   for t in targets) and \
                    isinstance(node.value, ast.List) and not node.value.elts:
                bad.append(name)
    assert not bad, "\n".join(bad)


def test_module_names_are_distinct():
    """Two modules never share a name (leading underscore aside), so that a
    name in a traceback or a review points at one file."""
    seen: Dict[str, List[str]] = {}
    for name in _modules():
        last = name.split(".")[-1].lstrip("_")
        if name.split(".")[-1] == name.split(".")[0] or \
                (ROOT / pathlib.Path(*name.split("."))).is_dir():
            continue  # a package (its __init__)
        seen.setdefault(last, []).append(name)
    bad = [f"{short}: {', '.join(names)}" for short, names in seen.items()
           if len(names) > 1 and short not in SPEC_MODULE_NAMES]
    assert not bad, "\n".join(sorted(bad))
