"""Bare ``pytest`` collects what ``python -m pytest`` collects (issue 50 item 6): tests import
their helpers as ``tests.<module>``, which needs the repository root on sys.path (pyproject's
``pythonpath``), not only the current directory ``python -m`` adds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bare_pytest_collects_a_test_that_imports_a_helper_of_tests() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pytest"), "--collect-only", "-q",
         "-p", "no:cacheprovider", "tests/unit/core/test_app_error.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No module named 'tests'" not in done.stdout + done.stderr
    assert "test_app_error.py::" in done.stdout
