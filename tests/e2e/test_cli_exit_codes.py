"""Exit codes and silent acceptance (issue 21, item 16), on real processes: `submit` with an
unreachable scheduler exits 4 and says the job is recorded; a bad escalation webhook or
command is refused at start with exit 2; usage errors under --json print the JSON error
shape; a reader that closes the pipe (`history J | head -1`) ends dispatch quietly with 141;
the Python API names the parameter it cannot use."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.e2e.conftest import Dispatch, script

EXIT_PIPE_CLOSED = 141


def no_slurm_tools(dispatch: Dispatch) -> dict[str, str]:
    """The environment with a PATH where no Slurm tool can be found (the scheduler cannot be
    asked), python still runnable by its full path."""
    empty = dispatch.tmp / "empty-bin"
    empty.mkdir(exist_ok=True)
    return {**dispatch.env, "PATH": str(empty)}


def jobs_recorded(dispatch: Dispatch) -> int:
    path = Path(dispatch.env["DISPATCH_STORE"])
    if not path.exists():
        return 0
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM jobs").fetchone()[0])
    finally:
        db.close()


def test_submit_with_an_unreachable_scheduler_exits_4_and_the_job_is_recorded(
        dispatch: Dispatch) -> None:
    spec = dispatch.spec("s1", ["/bin/true"], backend="slurm")
    env = no_slurm_tools(dispatch)
    done = subprocess.run(dispatch.argv("submit", str(spec)), env=env, cwd=dispatch.tmp,
                          text=True, capture_output=True, timeout=120)
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert "is recorded" in done.stderr and "dispatch supervise" in done.stderr
    assert "Traceback" not in done.stderr
    assert jobs_recorded(dispatch) == 1
    as_json = subprocess.run(dispatch.argv("submit", str(spec), "--json"), env=env,
                             cwd=dispatch.tmp, text=True, capture_output=True, timeout=120)
    assert as_json.returncode == 4
    doc = json.loads(as_json.stdout)  # the job's status document, as `status --json` gives
    assert doc["scheduler"] == "unreachable" and doc["state"] == "pending"
    status = subprocess.run(dispatch.argv("status", doc["job"]), env=env, cwd=dispatch.tmp,
                            text=True, capture_output=True, timeout=120)
    assert status.returncode == 4  # the same code as status, for the same situation


def test_submit_with_a_local_root_that_cannot_be_made_exits_4(dispatch: Dispatch) -> None:
    # /proc makes no directory (ENOENT): the root reads as never used afterwards, so submit
    # exited 0 with only the supervisor's warning; the submission's own word counts now.
    root = f"/proc/dispatch-no-such-{dispatch.tmp.name}/local"
    spec = dispatch.spec("r1", ["/bin/true"])
    done = subprocess.run(dispatch.argv("submit", str(spec)),
                          env={**dispatch.env, "DISPATCH_LOCAL_ROOT": root}, cwd=dispatch.tmp,
                          text=True, capture_output=True, timeout=120)
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert f"cannot make the local root {root}" in done.stderr
    assert "is recorded" in done.stderr and "Traceback" not in done.stderr
    assert jobs_recorded(dispatch) == 1


@pytest.mark.parametrize("variable, value, words", [
    ("DISPATCH_ESCALATION_WEBHOOK", "ftp://hooks.example/x", "http:// or https://"),
    ("DISPATCH_ESCALATION_WEBHOOK", "hooks.example/x", "http:// or https://"),
    ("DISPATCH_ESCALATION_WEBHOOK", "http://", "with a host"),
    ("DISPATCH_ESCALATION_WEBHOOK", "http://[::1", "not a URL"),
    ("DISPATCH_ESCALATION_WEBHOOK", "http://h:notaport/x", "not a URL"),
    ("DISPATCH_ESCALATION_COMMAND", "notify 'unterminated", "cannot be split"),
    ("DISPATCH_ESCALATION_COMMAND", "   ", "names no program"),
])
def test_a_bad_escalation_target_is_refused_at_start(dispatch: Dispatch, variable: str,
                                                    value: str, words: str) -> None:
    spec = dispatch.spec("e1", script("pass"))
    env = {**dispatch.env, variable: value}
    for argv in (["submit", str(spec)], ["supervise", "--once"], ["run", str(spec)]):
        done = subprocess.run(dispatch.argv(*argv), env=env, cwd=dispatch.tmp, text=True,
                              capture_output=True, timeout=120)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert variable in done.stderr and words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert jobs_recorded(dispatch) == 0
    option = "--" + variable.removeprefix("DISPATCH_").lower().replace("_", "-")
    done = dispatch("submit", str(spec), option, value, "--json")
    assert done.returncode == 2 and option in done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "bad-input"


def test_a_good_escalation_target_is_accepted(dispatch: Dispatch) -> None:
    env = {**dispatch.env, "DISPATCH_ESCALATION_WEBHOOK": "https://hooks.example:8443/x",
           "DISPATCH_ESCALATION_COMMAND": f"{sys.executable} -c 'import sys'"}
    done = subprocess.run(dispatch.argv("supervise", "--once"), env=env, cwd=dispatch.tmp,
                          text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("argv", [
    ["status", "--json"], ["status", "j", "--bogus", "--json"], ["nosuch", "--json"],
    ["ls", "--json", "extra"], ["logs", "j", "--submission", "0", "--json"],
    ["history", "--json"], ["--json", "history"],
])
def test_a_usage_error_under_json_prints_the_json_error_shape(dispatch: Dispatch,
                                                              argv: list[str]) -> None:
    done = dispatch(*argv)
    assert done.returncode == 2, (done.stdout, done.stderr)
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "bad-input" and error["exit_code"] == 2 and error["message"]
    assert "Usage:" in done.stderr  # click's usage text stays on stderr
    plain = dispatch(*[a for a in argv if a != "--json"])
    assert plain.returncode == 2 and plain.stdout == ""


def test_a_closed_stdout_ends_history_quietly_with_141(dispatch: Dispatch) -> None:
    """A real pipe whose reader reads one line and leaves (what `| head -1` does)."""
    spec = str(dispatch.spec("p", ["true"]))
    job = dispatch.python(
        "from dispatch.service import Service\nfrom dispatch.service.specfile import load_spec\n"
        "from pathlib import Path\n"
        f"with Service.open() as s:\n    print(s.create(load_spec(Path({spec!r}))))\n"
    ).stdout.strip()
    db = sqlite3.connect(dispatch.env["DISPATCH_STORE"])
    at = datetime.now(UTC).isoformat()
    rows = [(job, seq, json.dumps({"type": "escalation-raised", "seq": seq, "at": at,
                                   "message": "x" * 200}).encode()) for seq in range(2, 3002)]
    db.executemany("INSERT INTO events (job_id, seq, body) VALUES (?, ?, ?)", rows)
    db.execute("UPDATE jobs SET version = 3001 WHERE job_id = ?", (job,))
    db.commit()
    db.close()
    full = dispatch("history", job)
    assert full.returncode == 0 and len(full.stdout) > 256 * 1024  # far over a pipe's buffer
    proc = subprocess.Popen(dispatch.argv("history", job), env=dispatch.env, cwd=dispatch.tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    assert b"created" in first
    proc.stdout.close()  # the reader leaves
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == EXIT_PIPE_CLOSED, err
    assert err == b"", err  # quietly: no traceback, no "Exception ignored"


def test_the_python_api_names_the_parameter_it_cannot_use(dispatch: Dispatch) -> None:
    code = """
import dispatch, json
from dispatch.errors import BadInput
out = []
for call in (lambda: dispatch.get(None), lambda: dispatch.get(""),
             lambda: dispatch.submit("x.yaml", store=123),
             lambda: dispatch.jobs(store=b"x"),
             lambda: dispatch.Job("j").logs(submission="1"),
             lambda: dispatch.Job("j").logs(submission=0),
             lambda: dispatch.Job("j").logs(submission=True),
             lambda: dispatch.Job(None)):
    try:
        call()
        out.append(["no error"])
    except BadInput as e:
        out.append([type(e).__name__, getattr(e, "parameter", None), str(e), e.exit_code])
    except Exception as e:
        out.append(["untyped", type(e).__name__, str(e)])
print(json.dumps(out))
"""
    done = dispatch.python(code)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert [g[1] for g in got] == ["job", "job", "store", "store", "submission", "submission",
                                   "submission", "id"], got
    assert all(g[0] == "BadArgument" and g[3] == 2 for g in got), got
