"""No checkpoint pattern makes a local job unstoppable (issue 32 item 2): ``^(a+)+$`` against
lines of ``aaaa...ab`` backtracks for ever in Python's re, and the runner matched on the thread
that obeys cancel, SIGTERM and the time limit. With RE2 (linear in the line) all three end the
job. What each test waits for is the end itself: `dispatch run`'s exit after the committed
outcome, and the runner and its node gone; HANG_S only bounds a hung run.

Linear is not cheap (issue 45 item 8): ``(?P<step>(?:a?){600}a{600})`` cost ~75 ms a 4 KiB
line, and the end matched all of a 1 MiB pipe before the object could end (a cancel took
22 s). Such a pattern is refused before anything runs; one at the bound, against lines made to
cost it the most, leaves the end at most one pipe and one bite (16 KiB each) to match after
the node is killed: counted from the runner's own stamp on each match and the node's on its
SIGTERM, never from a duration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
from tests.e2e.conftest import Dispatch, script, wait_until

from dispatch.backends.local.output import MATCH_PIPE_BYTES, MATCH_READ_BYTES
from dispatch.core.progress import MOST_PATTERN_PROGRAM, compile_pattern

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


# At the bound (512 instructions, so lines of at most 910 bytes): after the step, random a/b
# bytes make RE2's DFA build a new state a byte (2^502 of them), the costliest input for it.
COSTLY = r"^(?P<step>\d+) [ab]*a[ab]{502}c$"
LINE = 910
# Lines the node has written when the test cancels: far more than a pipe and a bite hold
# (the 1 MiB pipe of before, full by then, left ~1000 to match after the kill).
WRITTEN = 300
# Every line matches (step = its number). The node writes each line whole (under PIPE_BUF,
# so a line is in the pipe whole or not at all) and, on SIGTERM, the time it got it.
COSTLY_NODE = script(
    "import os, random, signal, time\n"
    "def killed(signum, frame):\n"
    "    with open(os.environ['KILLED'], 'w') as f:\n"
    "        f.write(repr(time.time()))\n"
    "    os._exit(0)\n"
    "signal.signal(signal.SIGTERM, killed)\n"
    "rand = random.Random(8)\n"
    "def ab(count):\n"
    "    return ''.join(rand.choice('ab') for _ in range(count))\n"
    "bodies = [ab(398) + 'a' + ab(502) + 'c' for _ in range(64)]\n"  # 910 bytes a line
    "step = 0\n"
    "while True:\n"
    "    step += 1\n"
    "    os.write(1, f'{step:07d} {bodies[step % 64]}\\n'.encode())\n"
    "    if step == int(os.environ['WRITTEN']):\n"
    "        open(os.environ['WRITTEN_FILE'], 'w').close()\n")


def test_the_audit_s_costly_pattern_is_refused_before_anything_runs(dispatch: Dispatch) -> None:
    spec = dispatch.spec("costly", ["true"],
                         progress={"checkpoint_pattern": "(?P<step>(?:a?){600}a{600})"})
    done = dispatch("run", str(spec))
    assert done.returncode == 2, done
    assert "progress.checkpoint_pattern" in done.stderr
    assert f"1806 RE2 instructions, more than {MOST_PATTERN_PROGRAM}" in done.stderr
    assert "Traceback" not in done.stderr
    assert dispatch("status", "costly").returncode == 3  # nothing was recorded
    assert not (dispatch.tmp / "local" / "objects").exists() or \
        not any((dispatch.tmp / "local" / "objects").iterdir())


def _costly(dispatch: Dispatch, **fields: object) -> subprocess.Popen[str]:
    assert compile_pattern(COSTLY).most_line_bytes == LINE
    spec = dispatch.spec("costly", COSTLY_NODE, progress={"checkpoint_pattern": COSTLY},
                         env={"KILLED": str(dispatch.tmp / "killed"), "WRITTEN": str(WRITTEN),
                              "WRITTEN_FILE": str(dispatch.tmp / "written")}, **fields)
    return dispatch.spawn("run", str(spec), "--json", "--poll", "0.2")


def _matched_after_the_kill(dispatch: Dispatch, run: subprocess.Popen[str]) -> dict[str, object]:
    """The committed outcome, once every line the node wrote was matched (in order, each
    once), and that at most a pipe and a bite of them were left to match after its SIGTERM."""
    try:
        out, err = run.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the job did not end within {HANG_S} s") from None
    try:
        st: dict[str, object] = json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {run.returncode}\n{out}\n{err}") from None
    killed_at = float((dispatch.tmp / "killed").read_text())
    objdir = _object_dir(dispatch)
    docs = [json.loads(line)
            for line in (objdir / "node0.logcheckpoints.jsonl").read_text().splitlines()]
    steps = [d["step"] for d in docs]
    assert steps == list(range(1, len(steps) + 1)), "a line was matched twice or not at all"
    last_written = int((objdir / "node0.log").read_bytes().splitlines()[-1].split()[0])
    assert steps[-1] == last_written
    after = sum(1 for d in docs if d["time"] > killed_at)
    assert after <= (MATCH_PIPE_BYTES + MATCH_READ_BYTES) // LINE + 1, (after, len(docs))
    return st


def test_a_cancel_leaves_at_most_a_pipe_of_costly_lines_to_match(dispatch: Dispatch) -> None:
    run = _costly(dispatch)
    wait_until((dispatch.tmp / "written").exists,
               f"the node never wrote {WRITTEN} lines", timeout=HANG_S)
    dispatch("cancel", "costly", check=True)
    st = _matched_after_the_kill(dispatch, run)
    assert run.returncode == 130 and st["state"] == "cancelled", st


def test_a_time_limit_leaves_at_most_a_pipe_of_costly_lines_to_match(
        dispatch: Dispatch) -> None:
    run = _costly(dispatch, time_limit="4s")
    st = _matched_after_the_kill(dispatch, run)
    assert run.returncode == 1 and st["state"] == "failed", st
    assert st["cause"]["kind"] == "time-limit", st  # type: ignore[index]
