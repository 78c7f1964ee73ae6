"""COVERAGE.md (``python -m poptorch_geometric.coverage --out COVERAGE.md``)
is current: it has a row for every PyG name it covers, its headline count
agrees with its rows, and a few rows regenerated now read exactly as
committed (one with the compile backend)."""
import pathlib
import re

import pytest

from poptorch_geometric import coverage
from poptorch_geometric._coverage.table import all_rows

COVERAGE_MD = pathlib.Path(__file__).resolve().parents[1] / "COVERAGE.md"
#: A green conv (compiled), a row with a reason, a pooling function.
REGENERATED = ["GCNConv", "WLConv", "global_max_pool"]


@pytest.fixture(scope="module")
def committed():
    text = COVERAGE_MD.read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\| `(\w+)` \|", line)
        if match:
            rows[match.group(1)] = line
    return text, rows


def test_every_covered_name_has_one_row(committed):
    _, rows = committed
    assert sorted(rows) == sorted(name for _, name, _, _ in all_rows())


def test_headline_count_agrees_with_the_rows(committed):
    text, rows = committed
    green = runnable = 0
    convs = {name for kind, name, _, _ in all_rows() if kind == "conv"}
    for name in convs:
        cells = [c.strip() for c in rows[name].split(" | ")]
        reason = cells[-1].rstrip(" |")
        if cells[1] == "-" and (reason.startswith("PyG itself fails") or
                                reason.startswith("base class")):
            continue
        runnable += 1
        green += cells[1:5] == ["yes"] * 4
    assert f"**Conv classes: {green} of the {runnable} " in \
        text.replace("\n", " ")
    assert green >= 0.9 * runnable


def test_regenerated_rows_equal_the_committed_ones(committed):
    _, rows = committed
    for row in coverage.run(REGENERATED, compile_check=True):
        assert coverage.row_line(row) == rows[row.name]
