"""Mutation testing with mutmut, one group of modules at a time.

    python -m tests.mutation GROUP [MUTMUT COMMAND AND ARGUMENTS]

``GROUP`` is a table of ``[tool.mutation]`` in ``pyproject.toml``: the
modules to mutate and the fast tests that cover them. The command defaults to
``run --max-children 2``; ``results`` and ``show NAME`` read what a run left.
mutmut takes its settings from the working directory's ``pyproject.toml``, so
each group runs in its own directory, ``.mutmut/GROUP/``, which links to the
sources and tests and keeps the group's results (``mutants/``) between runs.
Workers run with ``OMP_NUM_THREADS=1``: these tests are too small to gain from
threads, and a worker forked from a process whose thread pool has run can
deadlock.
"""
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINKED = ("poptorch", "poptorch_core", "poptorch_geometric", "tests")


def _toml_value(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def prepare(name: str) -> Path:
    """``.mutmut/NAME`` with links to the code and the group's settings."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    groups = tool["mutation"]
    if name not in groups:
        raise SystemExit(f"Unknown group {name!r}: choose one of "
                         f"{', '.join(sorted(groups))}.")
    group = groups[name]
    work = ROOT / ".mutmut" / name
    work.mkdir(parents=True, exist_ok=True)
    for linked in LINKED:
        if not (work / linked).exists():
            (work / linked).symlink_to(ROOT / linked)
    settings = dict(tool.get("mutmut", {}), only_mutate=group["modules"],
                    pytest_add_cli_args_test_selection=group["tests"])
    lines = ["[tool.mutmut]"] + [f"{key} = {_toml_value(value)}"
                                 for key, value in settings.items()]
    lines += ["[tool.pytest.ini_options]"] + [
        f"{key} = {_toml_value(value)}"
        for key, value in tool["pytest"]["ini_options"].items()]
    (work / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return work


def main(argv) -> int:
    if not argv:
        print(__doc__)
        return 2
    work = prepare(argv[0])
    command = argv[1:] or ["run", "--max-children", "2"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.call([sys.executable, "-m", "mutmut", *command],
                           cwd=work, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
