"""``python -m poptorch`` and ``python -m poptorch_core``: the installation
self-check that the README points new users to."""
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["poptorch", "poptorch_core"])
def test_self_check_runs(module):
    env = dict(os.environ, POPTORCH_LOG_LEVEL="ERR")
    result = subprocess.run([sys.executable, "-m", module],
                            capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0, result.stderr
    assert "Self-check passed." in result.stdout
    assert "Options(" in result.stdout
