"""A mistyped DISPATCH_FAILPOINTS (issue 45 item 10): every entry point exits 2 with one
line naming the unknown point and the known ones. Before, `dispatch --help`, `supervise`
and `serve` printed a traceback from the import of support/failpoints.py. Real processes:
the variable is read when that module is first imported, once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.conftest import world_env

from dispatch.support.failpoints import KNOWN

ENTRY_POINTS = [["--help"], ["supervise", "--once", "--scope", "local"],
                ["serve", "--port", "0"], ["status", "nope"], ["ls"]]


def _dispatch(tmp_path: Path, points: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **world_env(tmp_path), "DISPATCH_FAILPOINTS": points}
    return subprocess.run([sys.executable, "-m", "dispatch.cli", *args], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", ENTRY_POINTS, ids=[a[0] for a in ENTRY_POINTS])
def test_an_unknown_failpoint_is_exit_2_naming_the_known_ones(tmp_path: Path,
                                                              args: list[str]) -> None:
    proc = _dispatch(tmp_path, "acted:stop, acted:teleport", args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.startswith("error: DISPATCH_FAILPOINTS: no failpoint 'acted:teleport'")
    assert all(name in proc.stderr for name in KNOWN)
    assert len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "record.sqlite3").exists()  # nothing started


def test_known_failpoints_start_as_before(tmp_path: Path) -> None:
    proc = _dispatch(tmp_path, "acted:submit,lease:renewed", ["--help"])
    assert proc.returncode == 0 and "Usage: " in proc.stdout, proc.stderr
