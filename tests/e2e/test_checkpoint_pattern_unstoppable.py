"""No checkpoint pattern makes a local job unstoppable (issue 32 item 2): ``^(a+)+$`` against
lines of ``aaaa...ab`` backtracks for ever in Python's re, and the runner matched on the thread
that obeys cancel, SIGTERM and the time limit. With RE2 (linear in the line) all three end the
job. What each test waits for is the end itself: `dispatch run`'s exit after the committed
outcome, and the runner and its node gone; HANG_S only bounds a hung run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
from tests.e2e.conftest import Dispatch, script, wait_until

HANG_S = 120.0
# Before RE2, the runner's first bite of this output never came back from re.search. The
# node says (a file) once its first line is in the pipe: what the test stops the job after.
AAAB = script("import os, sys, time\n"
              "line = 'a' * 4000 + 'b\\n'\n"
              "sys.stdout.write(line); sys.stdout.flush()\n"
              "open(os.environ['FIRST_LINE'], 'w').close()\n"
              "while True:\n"
              "    sys.stdout.write(line); sys.stdout.flush(); time.sleep(0.005)\n")
PROGRESS = {"checkpoint_pattern": "^(a+)+$"}


def _spec(dispatch: Dispatch, **fields: object) -> Path:
    return dispatch.spec("aaab", AAAB, progress=PROGRESS,
                         env={"FIRST_LINE": str(dispatch.tmp / "first-line")}, **fields)


def _object_dir(dispatch: Dispatch) -> Path:
    (objdir,) = (dispatch.tmp / "local" / "objects").iterdir()
    return objdir


def _pids(dispatch: Dispatch, job: str) -> tuple[int, int]:
    """(runner, node 0) once the node runs."""
    dispatch.wait_for(job, lambda s: s["state"] == "running", timeout=HANG_S)
    objdir = _object_dir(dispatch)

    def node() -> int | None:
        try:
            pid = json.loads((objdir / "status.json").read_bytes())["nodes"][0].get("pid")
        except (OSError, ValueError, KeyError, IndexError):
            return None
        return int(pid) if pid else None

    wait_until(lambda: node() is not None, "node 0 never started", timeout=HANG_S)
    wait_until((dispatch.tmp / "first-line").exists, "node 0 never wrote its first line",
               timeout=HANG_S)
    runner = json.loads((objdir / "runner.json").read_bytes())["pid"]
    node_pid = node()
    assert node_pid is not None
    return int(runner), node_pid


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ended(dispatch: Dispatch, run: subprocess.Popen[str],
           pids: tuple[int, int]) -> tuple[int, dict[str, object]]:
    try:
        out, err = run.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the job did not end within {HANG_S} s") from None
    for pid in pids:
        wait_until(lambda pid=pid: not _alive(pid), f"pid {pid} outlived its job",
                   timeout=HANG_S)
    # The pathological lines went through the matcher (and matched nothing).
    objdir = _object_dir(dispatch)
    assert b"a" * 4000 + b"b\n" in (objdir / "node0.log").read_bytes()
    assert not (objdir / "node0.logcheckpoints.jsonl").exists()
    try:
        return run.returncode, json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {run.returncode}\n{out}\n{err}") from None


def test_cancel_ends_a_job_whose_pattern_backtracks(dispatch: Dispatch) -> None:
    spec = _spec(dispatch)
    run = dispatch.spawn("run", str(spec), "--json", "--poll", "0.2")
    pids = _pids(dispatch, "aaab")
    dispatch("cancel", "aaab", check=True)
    code, st = _ended(dispatch, run, pids)
    assert code == 130 and st["state"] == "cancelled", st


def test_the_time_limit_ends_a_job_whose_pattern_backtracks(dispatch: Dispatch) -> None:
    spec = _spec(dispatch, time_limit="3s")
    run = dispatch.spawn("run", str(spec), "--json", "--poll", "0.2")
    pids = _pids(dispatch, "aaab")
    code, st = _ended(dispatch, run, pids)
    assert code == 1 and st["state"] == "failed", st
    assert st["cause"]["kind"] == "time-limit", st  # type: ignore[index]


def test_sigterm_ends_the_runner_of_a_job_whose_pattern_backtracks(dispatch: Dispatch) -> None:
    spec = _spec(dispatch)
    run = dispatch.spawn("run", str(spec), "--json", "--poll", "0.2")
    pids = _pids(dispatch, "aaab")
    os.kill(pids[0], signal.SIGTERM)
    _, st = _ended(dispatch, run, pids)
    assert st["settled"] is True, st
