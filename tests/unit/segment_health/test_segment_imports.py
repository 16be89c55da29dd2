"""torch stays optional: importing dispatch and its segment health modules never imports it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[3] / "src")

PROBE = r"""
import sys
import dispatch
import dispatch.segment_health
import dispatch.segment_health.artifact
import dispatch.segment_health.cli
import dispatch.segment_health.consumer
import dispatch.segment_health.launch
import dispatch.segment_health.publisher
import dispatch.segment_health.state
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print(",".join(loaded) or "NO_TORCH")
"""


def test_importing_dispatch_never_imports_torch():
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert done.stdout.strip() == "NO_TORCH"
