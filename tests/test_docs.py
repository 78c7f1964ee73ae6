"""The documentation site builds without a warning and documents the whole
public API; the README stays a short, true entry point.

The build is the command the README gives, ``python -m sphinx -W -b html
docs <out>``, run in a fresh process; it needs Sphinx (the ``docs`` extra),
and is skipped, saying so, where Sphinx is not installed. Its inventory
(``objects.inv``, every object the site documents) is then compared with
the public names computed from the packages themselves, so a new public
name without an entry in ``docs/api/`` fails here.
"""
import doctest
import importlib
import inspect
import pathlib
import re
import subprocess
import sys
import zlib
from typing import Set

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

sys.path.insert(0, str(DOCS / "_ext"))
import generated_markdown  # noqa: E402

from .test_docstrings import MEASUREMENT  # noqa: E402

README = ROOT / "README.md"


def _inventory(path: pathlib.Path) -> Set[str]:
    """The object names of a Sphinx ``objects.inv`` (format 2: four header
    lines, then zlib-compressed ``name domain:role priority uri name``
    lines)."""
    data = path.read_bytes()
    for _ in range(4):
        data = data[data.index(b"\n") + 1:]
    lines = zlib.decompress(data).decode("utf-8").splitlines()
    return {line.split(" ", 1)[0] for line in lines
            if line.split(" ", 2)[1].startswith("py:")}


def _public(module_name: str, names) -> Set[str]:
    module = importlib.import_module(module_name)
    return {f"{module_name}.{name}" for name in names
            if inspect.isclass(getattr(module, name))
            or callable(getattr(module, name))}


def expected_names() -> Set[str]:
    """Every public class and function a user imports: ``poptorch``'s
    top-level names (``poptorch_core``) and its ``optim``, ``distributed``,
    ``profiling`` and ``testing`` modules, and the ``__all__`` of
    ``poptorch_geometric``, its ``ops`` and its ``datasets``."""
    import poptorch_core
    top = [name for name in dir(poptorch_core) if not name.startswith("_")
           and not inspect.ismodule(getattr(poptorch_core, name))
           and name != "logger"]
    names = _public("poptorch_core", top)
    for sub in ("optim", "distributed", "profiling", "testing"):
        module = importlib.import_module(f"poptorch_core.{sub}")
        names |= _public(module.__name__, module.__all__)
    for name in ("poptorch_geometric", "poptorch_geometric.ops",
                 "poptorch_geometric.datasets"):
        module = importlib.import_module(name)
        names |= _public(name, [n for n in module.__all__
                                if not n.startswith("_")])
    return names


def test_expected_names_reach_the_api():
    # The walk must find the API, not compare an empty set.
    names = expected_names()
    for name in ("poptorch_core.Options", "poptorch_core.trainingModel",
                 "poptorch_core.optim.Adam",
                 "poptorch_geometric.FixedSizeDataLoader",
                 "poptorch_geometric.ops.knn_graph",
                 "poptorch_geometric.datasets.NCITPSA"):
        assert name in names, name
    assert len(names) > 150, len(names)


def test_the_site_builds_without_warnings_and_documents_every_name(
        tmp_path):
    pytest.importorskip(
        "sphinx", reason="Sphinx is not installed: pip install -e '.[docs]'")
    out = tmp_path / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html",
         str(DOCS), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    documented = _inventory(out / "objects.inv")
    assert expected_names() - documented == set()
    for page in ("index", "getting_started", "deviations", "benchmarks",
                 "design/index", "api/poptorch_core"):
        assert (out / f"{page}.html").is_file(), page


def test_markdown_reader_examples():
    result = doctest.testmod(generated_markdown)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("text", [
    "a_b_ c", "x * y", "a |sub| b", "-- dashes", "#. x", "a) x", "`a`b", "**b**c", "back\\slash", "[x](y)z",
    "<http://x>", "1.", ":role:`x`", ".. note:: x", "x_",
])
def test_markdown_text_never_becomes_markup(text):
    # Whatever a generated page's text holds reads as that text: the
    # reStructuredText parser warns of nothing and shows the same words.
    docutils_core = pytest.importorskip("docutils.core")
    rst = generated_markdown.to_rst(f"# T\n\n{text} end\n")
    html = docutils_core.publish_parts(
        rst, writer="html", settings_overrides={
            "report_level": 2, "halt_level": 2})["body"]
    plain = text.replace("`", "").replace("**", "")
    if "](" in plain:
        plain = plain.split("](")[0].lstrip("[") + plain.split(")", 1)[1]
    words = (re.sub(r"<[^>]+>", "", html).replace("&lt;", "<")
             .replace("&gt;", ">").replace("&amp;", "&"))
    assert f"{plain} end" in words, (rst, html)


def test_readme_is_short_and_holds_no_measurements():
    # What it is, the two commands and a tour with links: the figures are
    # on the generated benchmark page and in the design notes.
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, len(lines)
    assert [line for line in lines if MEASUREMENT.search(line)] == []


def test_readme_test_command_is_the_ci_command():
    # CI runs the README's test command verbatim on a fresh machine.
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = [line for line in ci if "pytest" in line]
    assert len(command) == 1 and "[test,docs]" in command[0]
    assert command[0] in README.read_text().splitlines()


def test_readme_links_point_at_files():
    targets = re.findall(r"\]\(([^)#:]+)\)", README.read_text())
    assert "docs/benchmarks.md" in targets
    assert [t for t in targets if not (ROOT / t).exists()] == []
