"""bench/bench_scale.py runs end to end at tiny sizes (SQLite): it fills a store, ticks
against its stand-in scheduler and prints its table. No time is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_scale_runs_at_tiny_sizes() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_scale.py"), "--smoke", "--no-postgres"],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [line for line in res.stdout.splitlines() if line.startswith("| SQLite |")]
    assert [r.split("|")[2].strip() for r in rows] == ["20", "200"]
    assert "P1 with snapshots (SQLite" in res.stdout


def test_bench_scale_local_runs_at_tiny_sizes() -> None:
    """The local backend's part (issue 49): real local objects, a SIGKILLed runner seen."""
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_scale.py"), "--local", "--no-postgres",
         "--live", "1000", "--finished", "10"],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [line for line in res.stdout.splitlines() if line.startswith("| SQLite |")]
    assert [r.split("|")[2].strip() for r in rows] == ["1,000"]
    assert "(1 of 1, 0)" in rows[0]  # the one SIGKILLed runner seen, by no full look


def test_bench_scale_ticks_runs_at_tiny_sizes() -> None:
    """The tick with 1 % ended alone (issue 49), measured by this tree's code and, as
    --before does for another tree, by the code under a given root (here this one)."""
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_scale.py"), "--ticks", "--no-postgres",
         "--live", "200", "--finished", "10", "--before", str(ROOT)],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [line for line in res.stdout.splitlines() if line.startswith("| SQLite |")]
    assert [r.split("|")[3].strip() for r in rows] == ["before (batched)", "this (batched)"]
    assert all("(2 ended)" in r for r in rows)
