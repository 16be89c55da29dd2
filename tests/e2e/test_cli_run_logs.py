"""Issue 15: `dispatch run SPEC --logs` streams the job's output while it supervises the job,
through the follower of `dispatch logs -f`: on stdout only the job's output (and the marker line
at each resubmission), everything else on stderr; the tail is drained before it exits."""

from __future__ import annotations

import time

from tests.e2e.conftest import Dispatch, script
from tests.e2e.test_cli_local import RESUBMIT_PREEMPT

WAIT_S = 60.0  # an upper bound for a slow shared machine, never a timing assertion

# Prints a hundred lines, the last one just before it exits.
CHATTY = script(
    "import sys\n"
    "for i in range(100): print(f'step {i}', flush=True)\n"
    "sys.stdout.write('last words\\n')\n"
    "sys.exit(0)\n")
# The first submission prints one line, says so in a file, and waits to be preempted; the
# second prints its lines and exits at once after the last one.
PREEMPTED_THEN_DONE = script(
    "import os,sys,time\n"
    "n = os.environ['DISPATCH_SUBMISSION']\n"
    "print(f'submission {n} started', flush=True)\n"
    "if n == '1':\n"
    "    open('first-started', 'w').close()\n"
    "    time.sleep(60)\n"
    "for i in range(20): print(f'submission {n} step {i}', flush=True)\n"
    "print('the end')\n")


def test_run_logs_prints_exactly_the_jobs_output_on_stdout(dispatch: Dispatch) -> None:
    spec = dispatch.spec("chatty", CHATTY)
    done = dispatch("run", str(spec), "--logs", "--poll", "0.2", timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"step {i}" for i in range(100)] + ["last words"]
    assert "supervising" in done.stderr and "succeeded" in done.stderr  # states, history


def test_run_logs_follows_a_preempted_job_across_its_resubmission(dispatch: Dispatch) -> None:
    spec = dispatch.spec("pre", PREEMPTED_THEN_DONE, policy=RESUBMIT_PREEMPT)
    proc = dispatch.spawn("run", str(spec), "--logs", "--poll", "0.2")
    deadline = time.monotonic() + WAIT_S
    while not (dispatch.tmp / "first-started").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first submission never started"
        time.sleep(0.1)
    dispatch("local", "inject", "pre", "preempt", check=True)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert out.splitlines() == [
        "submission 1 started",
        "== dispatch: submission 2 after preempted",
        "submission 2 started",
        *[f"submission 2 step {i}" for i in range(20)],
        "the end",
    ]
    assert "recovering" in err and "succeeded" in err


def test_run_logs_exit_code_is_the_jobs(dispatch: Dispatch) -> None:
    spec = dispatch.spec("bad", script("print('about to fail', flush=True); raise SystemExit(3)"))
    done = dispatch("run", str(spec), "--logs", "--poll", "0.2", timeout=180)
    assert done.returncode == 1
    assert done.stdout.splitlines() == ["about to fail"]
    assert "non-zero-exit (exit 3)" in done.stderr


def test_run_logs_with_json_is_refused(dispatch: Dispatch) -> None:
    spec = dispatch.spec("both", script("print('hi')"))
    done = dispatch("run", str(spec), "--logs", "--json")
    assert done.returncode == 2
    assert "--logs" in done.stderr and "--json" in done.stderr
    assert dispatch("ls", "--all", "--json").stdout.strip() == "[]"  # nothing was recorded
