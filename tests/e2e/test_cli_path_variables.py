"""Issue 21 item 11: relative paths hang a job. A relative path in any path variable is
refused at start (exit 2, naming the variable, nothing recorded, no runner started), and the
local runner honours SIGTERM, also while it waits for its object to be published."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.e2e.conftest import REPO, Dispatch, script

from dispatch.backends.registry import path_variables

PATH_VARIABLES = path_variables()  # each backend's root variable, and the store's


@pytest.mark.parametrize("variable", PATH_VARIABLES)
@pytest.mark.parametrize("command", [("run", "{spec}", "--poll", "0.2"), ("submit", "{spec}"),
                                     ("ls",), ("status", "x"), ("supervise", "--once")])
def test_a_relative_path_variable_is_refused_at_start(dispatch: Dispatch, variable: str,
                                                      command: tuple[str, ...]) -> None:
    spec = dispatch.spec("rel", script("print('ran')"))
    absolute = dict(dispatch.env)
    dispatch.env[variable] = "relative/dir"
    done = dispatch(*(a.format(spec=spec) for a in command), "--json", timeout=60) \
        if command[0] in ("ls", "status") else \
        dispatch(*(a.format(spec=spec) for a in command), timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"{variable}='relative/dir' is a relative path" in done.stderr
    assert "Traceback" not in done.stderr
    if command[0] in ("ls", "status"):
        assert '"bad-input"' in done.stdout  # --json: the error as JSON too
    assert not (dispatch.tmp / "relative").exists()  # nothing made there
    dispatch.env = absolute
    assert dispatch("ls", "--all", "--json").stdout.strip() in ("[]", "")  # nothing recorded


def test_a_relative_local_root_given_to_the_python_api_is_refused(dispatch: Dispatch) -> None:
    dispatch.env["DISPATCH_LOCAL_ROOT"] = "relative/dir"
    spec = dispatch.spec("rel", script("print('ran')"))
    done = dispatch.python(
        "import dispatch\n"
        "from dispatch.errors import BadInput\n"
        "try:\n"
        f"    dispatch.submit({str(spec)!r})\n"
        "except BadInput as e:\n"
        "    print('refused:', e)\n")
    assert done.returncode == 0, done.stderr
    assert "refused: DISPATCH_LOCAL_ROOT='relative/dir' is a relative path" in done.stdout


def test_an_absolute_path_with_a_tilde_is_taken(dispatch: Dispatch) -> None:
    dispatch.env["HOME"] = str(dispatch.tmp)
    dispatch.env["DISPATCH_LOCAL_ROOT"] = "~/tilde-root"
    done = dispatch("run", str(dispatch.spec("tilde", script("print('ran')"))), "--poll", "0.2")
    assert done.returncode == 0, done.stderr
    assert (dispatch.tmp / "tilde-root" / "root.json").exists()


def caught(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (SigCgt in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_a_runner_waiting_for_its_object_honours_sigterm(tmp_path: Path) -> None:
    """Before this fix a runner whose object was never published (a relative root made it
    look in the wrong place) slept through SIGTERM for a minute."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    runner = subprocess.Popen(
        [sys.executable, "-m", "dispatch.backends.local.runner",
         str(tmp_path / "objects" / "l-00000000-00000000")],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not caught(runner.pid, signal.SIGTERM):  # its handler is in place
            assert runner.poll() is None, runner.communicate()
            assert time.monotonic() < deadline, "the runner never set up its handlers"
            time.sleep(0.01)
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=20)  # the wait is 60 s: 20 is generous
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode == 0
    assert "a signal came first" in err and "nothing was started" in err


def test_a_running_job_whose_runner_gets_sigterm_ends_with_its_processes(
        dispatch: Dispatch) -> None:
    spec = dispatch.spec("sleepy", script(
        "import time\nprint('up', flush=True)\ntime.sleep(600)\n"))
    run = dispatch.spawn("run", str(spec), "--poll", "0.2")
    status = dispatch.wait_for("sleepy", lambda s: s["state"] == "running"
                                                         and bool(s["objects"]))
    (ref,) = status["objects"]
    objdir = dispatch.tmp / "local" / "objects" / ref
    info = json.loads((objdir / "runner.json").read_bytes())

    def node_started() -> bool:
        try:
            return bool(json.loads((objdir / "status.json").read_bytes())["nodes"][0]
                        .get("pid"))
        except (OSError, ValueError, KeyError, IndexError):
            return False
    deadline = time.monotonic() + 60
    while not node_started():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    node = json.loads((objdir / "status.json").read_bytes())["nodes"][0]["pid"]
    os.kill(info["pid"], signal.SIGTERM)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1, err  # the job failed: its runner was told to stop
    final = dispatch.status("sleepy")
    assert final["state"] == "failed"
    assert "received SIGTERM" in json.dumps(final)
    assert not psutil.pid_exists(node) or psutil.Process(node).status() == "zombie"
