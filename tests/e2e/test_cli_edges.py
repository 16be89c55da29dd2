"""Through the real CLI on the local backend, paths no other test walks: `dispatch logs -f`
following a job across its resubmission and exiting with the job's exit code (and SIGINT),
`dispatch logs --submission N`, `dispatch local inject` refusing what it cannot do, and a
person's give-up reaching the supervisor's escalation command."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import Dispatch, script, wait_until
from tests.e2e.test_cli_local import RESUBMIT_PREEMPT

WAIT_S = 60.0  # an upper bound for a slow shared machine, never a timing assertion


class Lines:
    """Every line a spawned process writes on stdout and stderr, read by threads of their
    own, so a test can wait for one line without ever blocking on the pipe."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.out: list[str] = []
        self.err: list[str] = []
        self.threads = [threading.Thread(target=self._read, args=(s, into), daemon=True)
                        for s, into in ((proc.stdout, self.out), (proc.stderr, self.err))]
        for t in self.threads:
            t.start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def wait_for(self, line: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while line not in self.out:
            assert self.proc.poll() is None or line in self.out, (
                f"exited {self.proc.returncode} before printing {line!r}:\n"
                + "\n".join(self.out + self.err))
            assert time.monotonic() < deadline, f"never printed {line!r}: {self.out}"
            time.sleep(0.05)

    def finish(self, timeout: float = 180) -> int:
        code = self.proc.wait(timeout)
        for t in self.threads:
            t.join(timeout)
        return code


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr


# -- dispatch logs -f ------------------------------------------------------------------------

# The first submission prints a line, says so in a file and waits to be preempted; the second
# prints its lines and exits with ``exit_code``.
def preempted_then(exit_code: int) -> list[str]:
    return script(
        "import os,sys,time\n"
        "n = os.environ['DISPATCH_SUBMISSION']\n"
        "print(f'submission {n} started', flush=True)\n"
        "if n == '1':\n"
        "    open('first-started', 'w').close()\n"
        "    time.sleep(60)\n"
        "for i in range(5): print(f'submission {n} step {i}', flush=True)\n"
        f"sys.exit({exit_code})\n")


@pytest.mark.parametrize(("job_exit", "state", "logs_exit"),
                         [(0, "succeeded", 0), (3, "failed", 1)])
def test_logs_follow_crosses_the_resubmission_and_exits_with_the_jobs_code(
        dispatch: Dispatch, job_exit: int, state: str, logs_exit: int) -> None:
    dispatch.spawn("supervise", "--poll", "0.2")  # stopped by the fixture
    spec = dispatch.spec("fol", preempted_then(job_exit), policy=RESUBMIT_PREEMPT)
    job = json.loads(dispatch("submit", str(spec), "--json", check=True).stdout)["job"]
    wait_until((dispatch.tmp / "first-started").exists, "the first submission never started")

    follower = Lines(dispatch.spawn("logs", job, "-f"))
    follower.wait_for("submission 1 started")  # it follows submission 1 before the preempt
    dispatch("local", "inject", job, "preempt", check=True)
    code = follower.finish()

    assert code == logs_exit, "\n".join(follower.err)
    assert follower.out == [
        "submission 1 started",
        "== dispatch: submission 2 after preempted",
        "submission 2 started",
        *[f"submission 2 step {i}" for i in range(5)],
    ]
    assert not any("Traceback" in line for line in follower.err), follower.err
    st = dispatch.status(job)
    assert st["state"] == state and st["submissions"] == 2  # the committed outcome it ended at

    first = dispatch("logs", job, "--submission", "1")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["submission 1 started"]
    latest = dispatch("logs", job)
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout.splitlines() == [
        "submission 2 started", *[f"submission 2 step {i}" for i in range(5)]]


def test_logs_of_a_submission_that_never_was_is_not_found(dispatch: Dispatch) -> None:
    spec = dispatch.spec("one", script("print('only one')"))
    code = dispatch("run", str(spec), "--poll", "0.2", timeout=180).returncode
    assert code == 0
    done = dispatch("logs", "one", "--submission", "2")
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert done.stdout == ""
    no_traceback(done)
    bad = dispatch("logs", "one", "--submission", "0")
    assert bad.returncode == 2 and "--submission" in bad.stderr
    no_traceback(bad)


def test_logs_follow_interrupted_exits_130(dispatch: Dispatch) -> None:
    spec = dispatch.spec("long", script(
        "import time\nprint('tick', flush=True)\ntime.sleep(120)\n"))
    dispatch("submit", str(spec), check=True)  # no supervisor: nothing ends it meanwhile
    follower = Lines(dispatch.spawn("logs", "long", "-f"))
    follower.wait_for("tick")
    follower.proc.send_signal(signal.SIGINT)
    code = follower.finish(timeout=60)
    assert code == 130, "\n".join(follower.err)
    assert follower.out == ["tick"]
    assert not any("Traceback" in line for line in follower.err), follower.err
    assert dispatch.status("long")["state"] == "running"  # interrupting logs stops nothing


# -- dispatch local inject -------------------------------------------------------------------


def test_inject_refuses_what_can_never_be_done_with_exit_2(dispatch: Dispatch) -> None:
    spec = dispatch.spec("inj", script("import time; time.sleep(120)"), nodes=2)
    dispatch("submit", str(spec), check=True)
    dispatch.wait_for("inj", lambda s: s["state"] == "running")
    cases = {
        ("lose-node", "99"): "no node 99",
        ("lose-node", "2"): "no node 2",
        ("lose-node", "--", "-1"): "no node -1",
        ("preempt", "0"): "preempt takes no node",
        ("lose-node", "one"): "'one' is not a valid integer",
        ("explode",): "'explode' is not one of",
    }
    for args, words in cases.items():
        done = dispatch("local", "inject", "inj", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert words in done.stderr, (args, done.stderr)
        no_traceback(done)
    assert "has nodes 0..1" in dispatch("local", "inject", "inj", "lose-node", "99").stderr
    st = dispatch.status("inj")  # nothing was injected: still running, no cause
    assert st["state"] == "running" and st["cause"] is None, st
    from dispatch.backends.local import LocalBackend
    from dispatch.backends.local.wire import CONTROL

    control = LocalBackend(dispatch.tmp / "local").object_dir(st["objects"][0]) / CONTROL
    assert not control.exists() or not any(control.iterdir())  # no request was written

    gone = dispatch("local", "inject", "no-such-job", "preempt")
    assert gone.returncode == 3, gone.stderr
    no_traceback(gone)


def test_inject_into_a_finished_job_exits_6(dispatch: Dispatch) -> None:
    spec = dispatch.spec("done", script("print('ok')"), nodes=2)
    assert dispatch("run", str(spec), "--poll", "0.2", timeout=180).returncode == 0
    for args in (("preempt",), ("lose-node",), ("lose-node", "0")):
        done = dispatch("local", "inject", "done", *args)
        assert done.returncode == 6, (args, done.stdout, done.stderr)
        assert "has already ended (succeeded)" in done.stderr, (args, done.stderr)
        no_traceback(done)
    st = dispatch.status("done")
    assert st["state"] == "succeeded" and st["cause"]["kind"] == "none"


# -- a person's give-up reaches the escalation command ----------------------------------------

RECORDER = """\
import json, os, sys
with open(sys.argv[1], 'a') as f:
    f.write(json.dumps({'argv': sys.argv[1:], 'stdin': sys.stdin.read(),
                        'env': {k: v for k, v in os.environ.items()
                                if k.startswith('DISPATCH')}}) + '\\n')
"""


def delivered(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_give_up_reaches_the_escalation_command(dispatch: Dispatch) -> None:
    recorder = dispatch.tmp / "recorder.py"
    recorder.write_text(RECORDER)
    received = dispatch.tmp / "escalations.jsonl"
    command = shlex.join([sys.executable, str(recorder), str(received), "an extra arg"])
    dispatch.spawn("supervise", "--poll", "0.2", "--escalation-command", command)
    spec = dispatch.spec("held", script("import sys; sys.exit(3)"),
                         policy={"rules": [{"on": ["non-zero-exit"], "action": "hold"}]})
    job = json.loads(dispatch("submit", str(spec), "--json", check=True).stdout)["job"]
    held = dispatch.wait_for(job, lambda s: s["state"] == "held")
    assert held["cause"]["kind"] == "non-zero-exit" and held["cause"]["exit_code"] == 3

    dispatch("give-up", job, check=True)
    st = dispatch.wait_for(job, lambda s: s["state"] == "failed")
    given_up = [e for e in st["escalations"] if e["message"].startswith("given up by ")]
    assert len(given_up) == 1, st["escalations"]

    def got_it() -> bool:
        return any(json.loads(r["stdin"])["message"] == given_up[0]["message"]
                   for r in delivered(received))
    wait_until(got_it, f"the escalation command never received the give-up; it got "
                       f"{delivered(received)}")
    calls = [r for r in delivered(received)
             if json.loads(r["stdin"])["message"] == given_up[0]["message"]]
    assert len(calls) == 1, calls  # delivered once
    call = calls[0]
    assert call["argv"] == [str(received), "an extra arg"]  # the argv as split, no shell
    payload = json.loads(call["stdin"])
    assert payload["job"] == job and payload["name"] == "held"
    assert payload["backend"] == "local"
    assert payload["cause"]["kind"] == "non-zero-exit" and payload["cause"]["exit_code"] == 3
    assert datetime.fromisoformat(payload["at"]).tzinfo is not None  # an ISO time, aware
    assert call["env"]["DISPATCH_STORE"] == dispatch.env["DISPATCH_STORE"]  # it inherits env
