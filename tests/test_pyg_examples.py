"""The PyG scripts of ``examples/pyg/``: each converted script differs from
its unconverted PyG reference (``examples/pyg/reference/``) by fewer than
10 written lines outside its data-loading block, and with
``--cpu-reference`` both compute the same thing on the same data.

Equality is checked where the two can agree to float precision: without
dropout (``--dropout 0``) the full-graph Cora scripts agree on every epoch;
the batched scripts agree on the first epoch, whose shuffled order both
sides draw from the same seed (compiling a model draws the simulated
device's seed from the host RNG, so later epochs are shuffled differently).
Runs are short (few epochs, small subsets).
"""
import ast
import difflib
import importlib
import json
import pathlib
import runpy
import sys
from typing import Dict, List, Tuple

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples" / "pyg"
NAMES = ["gcn", "gat", "gin", "nnconv", "topk_pool"]
DATA_START = "# --- data loading ---"
DATA_END = "# --- end of data loading ---"


def _code(text: str) -> List[str]:
    """The script's lines without its module docstring (which says which
    version it is), the data-loading block reduced to one marker."""
    first = ast.parse(text).body[0]
    skip = first.end_lineno if isinstance(first, ast.Expr) else 0
    lines = text.splitlines()[skip:]
    start, end = lines.index(DATA_START), lines.index(DATA_END)
    return lines[:start] + ["<data loading>"] + lines[end + 1:]


def conversion_size(reference: str, converted: str) -> Tuple[int, int]:
    """``(written, removed)``: lines of the converted script that are new
    or rewritten, and reference lines removed beyond those rewritten."""
    written = removed = 0
    matcher = difflib.SequenceMatcher(a=_code(reference), b=_code(converted),
                                      autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            written += j2 - j1
        if tag in ("replace", "delete"):
            removed += max(0, (i2 - i1) - (j2 - j1))
    return written, removed


def test_conversion_size_counts_written_and_removed_lines():
    reference = '"""Doc."""\nimport torch\n# --- data loading ---\nA\n' \
        '# --- end of data loading ---\na\nb\nc\nd\n'
    converted = '"""Other doc."""\nimport torch\nimport poptorch\n' \
        '# --- data loading ---\nB\nC\n# --- end of data loading ---\n' \
        'a\nx\nd\n'
    # +import poptorch, b,c -> x: 2 written; c removed beyond the rewrite.
    assert conversion_size(reference, converted) == (2, 1)


@pytest.mark.parametrize("name", NAMES)
def test_conversion_stays_under_ten_lines(name):
    reference = (EXAMPLES / "reference" / f"{name}.py").read_text()
    converted = (EXAMPLES / f"{name}.py").read_text()
    written, removed = conversion_size(reference, converted)
    print(f"{name}: {written} lines written, {removed} removed")
    assert written < 10, f"{name}: {written} lines written or changed"
    assert "import poptorch" not in reference


def test_train_epochs_reports_test_at_the_best_val(tmp_path, monkeypatch):
    """The shared epoch loop's model selection logs and finishes what the
    loop of PyG's gcn.py does: Test from the epoch of the highest Val so
    far (strictly higher, starting from 0)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    common = importlib.import_module("_pyg_common")
    losses = [4.0, 3.0, 2.0, 1.0]
    evals = [(0.5, 0.0, 0.1), (0.6, 0.3, 0.2), (0.7, 0.2, 0.9),
             (0.8, 0.3, 0.4)]  # Train, Val, Test
    out = tmp_path / "run.json"
    common.parse_args(["--epochs", "4", "--json", str(out)])
    steps, tests = iter(losses), iter(evals)
    common.train_epochs(4, lambda: next(steps), lambda: dict(
        zip(("Train", "Val", "Test"), next(tests))), select=("Val", "Test"))

    expected, best_val_acc, test_acc = [], 0, 0
    for epoch, (loss, (train_acc, val_acc, tmp_test_acc)) in enumerate(
            zip(losses, evals), 1):
        if val_acc > best_val_acc:
            best_val_acc = val_acc
            test_acc = tmp_test_acc
        expected.append(dict(Epoch=epoch, Loss=loss, Train=train_acc,
                             Val=val_acc, Test=test_acc))
    results = json.loads(out.read_text())["results"]
    assert [{k: v for k, v in h.items() if k != "seconds"}
            for h in results["history"]] == expected
    assert results["final"] == dict(Loss=1.0, Val=best_val_acc,
                                    Test=test_acc) == dict(Loss=1.0, Val=0.3,
                                                           Test=0.2)


def _run(name: str, argv: List[str], tmp_path: pathlib.Path,
         capsys) -> Dict:
    """Runs ``examples/pyg/<name>.py`` in this process, as the command line
    would, and returns its JSON record."""
    out = tmp_path / f"{name}.json"
    script = str(EXAMPLES / f"{name}.py")
    saved = sys.argv, list(sys.path)
    sys.argv = [script, *argv, "--cpu-reference", "--json", str(out)]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved
    printed = capsys.readouterr().out
    assert "simulated IPU" in printed and "plain PyG (CPU)" in printed
    return json.loads(out.read_text())


def _losses(side: Dict) -> List[float]:
    return [epoch["Loss"] for epoch in side["history"]]


@pytest.mark.parametrize("name", ["gcn", "gat"])
def test_cora_scripts_agree_on_every_epoch(name, cora_root, tmp_path,
                                           capsys):
    record = _run(name, ["--epochs", "3", "--dropout", "0", "--data-root",
                         str(cora_root)], tmp_path, capsys)
    ipu, cpu = record["results"], record["cpu_reference"]
    assert _losses(ipu) == pytest.approx(_losses(cpu), rel=1e-4)
    assert _losses(ipu)[-1] < _losses(ipu)[0]
    assert ipu["final"] == pytest.approx(cpu["final"], rel=1e-4)


BATCHED = {
    "gin": ["--hidden-channels", "16", "--num-layers", "2",
            "--dropout", "0"],
    "nnconv": ["--dim", "8"],
    "topk_pool": ["--hidden-channels", "16", "--dropout", "0"],
}


@pytest.mark.parametrize("name", sorted(BATCHED))
def test_batched_scripts_agree_on_the_first_epoch(name, nci_data_root,
                                                  tmp_path, capsys):
    record = _run(name, ["--epochs", "1", "--subset", "160",
                         "--batch-size", "32", "--data-root", nci_data_root,
                         *BATCHED[name]], tmp_path, capsys)
    ipu, cpu = record["results"], record["cpu_reference"]
    # Every training and test graph counted once, padding never.
    assert ipu["final"] == pytest.approx(cpu["final"], rel=1e-4)
