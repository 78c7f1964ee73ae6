"""PopTorch's log lines go to ``sys.stderr`` as it is when they are logged,
so a redirect made after ``import poptorch`` (or a test's capture) sees
them, and a stream replaced and closed since then is never written to."""
import io
import sys

import poptorch
from poptorch_core._logging import logger


def test_log_lines_reach_the_current_stderr(capsys):
    logger.warning("a line for the stderr of this test")
    assert "a line for the stderr of this test" in capsys.readouterr().err


def test_a_replaced_and_closed_stderr_is_not_written_to(monkeypatch):
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logger.warning("first")
    assert "[warning] first" in first.getvalue()
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logger.warning("second")
    assert "[warning] second" in second.getvalue()
    assert "Logging error" not in second.getvalue()


def test_set_log_level_filters_what_reaches_stderr(capsys):
    level = logger.level
    poptorch.setLogLevel("ERR")
    try:
        logger.warning("filtered out")
        logger.error("kept")
    finally:
        logger.setLevel(level)
    err = capsys.readouterr().err
    assert "kept" in err and "filtered out" not in err
