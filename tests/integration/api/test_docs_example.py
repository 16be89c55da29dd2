"""docs/python-api.md's runnable example, run exactly as written (real local processes)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "python-api.md"


def example_code() -> str:
    text = DOC.read_text()
    section = text.split("## A runnable example", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "docs/python-api.md has no python block under 'A runnable example'"
    return str(blocks[0])


def test_the_runnable_example_runs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DISPATCH_STORE"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    done = subprocess.run([sys.executable, "-c", example_code()], cwd=tmp_path, text=True,
                          capture_output=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "submitted" in out
    assert "log: == dispatch: submission 2 after non-zero-exit (exit 3)" in out
    assert "log: [node0.log] rank 0 of submission 2" in out
    assert "log: [node1.log] rank 1 of submission 2" in out
    assert "succeeded none after 2 submissions" in out
    assert "refused:" in out and "already succeeded" in out

