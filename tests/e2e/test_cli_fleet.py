"""Issue 24 part 2: the CLI with a real fleet, through the real `dispatch` in real processes
(pipes are real pipes, Ctrl-C a real SIGINT): names and id prefixes, supersede NAME, nothing
cut on a pipe, `watch` on a pipe, `logs --json`, times with their zone, a held job's next
steps, and Ctrl-C in `run`."""

from __future__ import annotations

import json
import re
import signal
import time

from tests.e2e.conftest import Dispatch, script, wait_until

from dispatch.errors import EXIT_DETACHED

QUICK = script("import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])")


def run_ok(d: Dispatch, name: str, **fields: object) -> str:
    spec = d.spec(name, QUICK, **fields)
    done = d("run", str(spec), "--json", "--poll", "0.2", timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    return str(json.loads(done.stdout)["job"])


def test_a_name_means_the_newest_of_its_supersede_chain(dispatch: Dispatch) -> None:
    first = run_ok(dispatch, "demo", nodes=2)
    # supersede NAME: exit 0, prints the new job (before: exit 3 "name matches 2 jobs").
    done = dispatch("supersede", "demo", check=True)
    new = re.match(r"(\w+) supersedes (\w+)\n", done.stdout)
    assert new is not None and new.group(2) == first, done.stdout
    second = new.group(1)
    assert f"{second} demo: " in done.stdout  # its status follows
    dispatch("supervise", "--once", check=True)
    st = dispatch.wait_for("demo", lambda s: s["state"] == "succeeded")
    assert st["job"] == second and st["supersedes"] == first
    # The name keeps working for every command: it means the newest run.
    assert dispatch("logs", "demo", check=True).stdout.count("rank") == 2
    assert dispatch.json("history", "demo")[0]["event"]["job_id"] == second
    # supersede NAME again: the chain goes on, the name follows it.
    third = dispatch.json("supersede", "demo")["job"]
    assert dispatch.json("status", "demo")["job"] == third


def test_unrelated_jobs_sharing_a_name_are_listed(dispatch: Dispatch) -> None:
    a = run_ok(dispatch, "twin")
    b = run_ok(dispatch, "twin")
    done = dispatch("status", "twin")
    assert done.returncode == 3
    for job in (a, b):  # each with its state and creation time
        assert re.search(rf"{job}\s+succeeded\s+created \d{{4}}-\d\d-\d\dT", done.stderr), \
            done.stderr
    assert "Traceback" not in done.stderr


def test_unique_id_prefixes_work_everywhere(dispatch: Dispatch) -> None:
    job = run_ok(dispatch, "pre")
    prefix = job[:4]
    assert dispatch.json("status", prefix)["job"] == job
    assert "rank 0" in dispatch("logs", prefix, check=True).stdout
    assert dispatch.json("history", job[:6])[0]["event"]["job_id"] == job
    short = dispatch("status", job[:3])
    assert short.returncode == 3 and "at least 4 characters" in short.stderr
    # The Python API resolves through the same service.
    code = f"import dispatch; print(dispatch.get({prefix!r}).id)"
    assert dispatch.python(code).stdout.strip() == job


def test_a_pipe_gets_whole_rows_and_plain_gets_tabs(dispatch: Dispatch) -> None:
    name = "a-rather-long-job-name-" + "x" * 90
    job = run_ok(dispatch, name)
    dispatch.env.pop("COLUMNS", None)
    piped = dispatch("ls", "--all")  # stdout is a pipe
    assert piped.returncode == 0, piped.stderr
    rows = piped.stdout.splitlines()
    assert len(rows) == 2, rows  # a header and one row: nothing wrapped
    assert job in rows[1] and name in rows[1] and "none (exit 0)" in rows[1]
    assert all(row == row.rstrip() for row in rows)  # no padding after the last column
    plain = dispatch("ls", "--all", "--plain", check=True).stdout.splitlines()
    assert plain[0].split("\t") == ["JOB", "NAME", "STATE", "CAUSE", "SUBMISSIONS",
                                    "BUDGET USED", "AGE", "ERROR"]
    assert plain[1].split("\t")[:5] == [job, name, "succeeded", "none (exit 0)", "1"]
    assert plain[1].split("\t")[-1] == ""  # it succeeded: no error, an empty last cell


def test_watch_on_a_pipe_prints_each_refresh(dispatch: Dispatch) -> None:
    job = run_ok(dispatch, "watched")
    proc = dispatch.spawn("watch", "--all", "--interval", "0.2")
    headers: list[str] = []
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    while len(headers) < 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        if line.startswith("JOB"):
            headers.append(line)
        elif line.strip():
            assert job in line
    assert len(headers) == 3  # three refreshes reached the pipe while it ran
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0


def test_logs_json_is_json_lines(dispatch: Dispatch) -> None:
    job = run_ok(dispatch, "jl", nodes=2)
    done = dispatch("logs", job, "--json", check=True)
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert sorted((x["submission"], x["node"], x["line"]) for x in lines) == [
        (1, "node0.log", "rank 0 of 2"), (1, "node1.log", "rank 1 of 2")]


def test_times_carry_their_zone_local_by_default_utc_on_request(dispatch: Dispatch) -> None:
    job = run_ok(dispatch, "tz")
    dispatch.env["TZ"] = "IST-5:30"  # a POSIX zone: +05:30, no tz database needed
    local = dispatch("history", job, check=True).stdout.splitlines()[0]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+05:30  #1 ", local), local
    utc = dispatch("--utc", "history", job, check=True).stdout.splitlines()[0]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC  #1 ", utc), utc


def _held(dispatch: Dispatch, name: str) -> str:
    body = ("import os,signal,sys\n"
            "if os.environ['DISPATCH_SUBMISSION'] == '1': os.kill(os.getpid(), signal.SIGSEGV)\n"
            "print('second submission ran', flush=True)\n")
    spec = dispatch.spec(name, script(body),
                         policy={"rules": [{"on": ["unknown"], "action": "hold"}]})
    dispatch.spawn("run", str(spec), "--json", "--poll", "0.2")
    return str(dispatch.wait_for(name, lambda s: s["state"] == "held")["job"])


def test_a_held_job_says_what_resolves_it(dispatch: Dispatch) -> None:
    job = _held(dispatch, "waits")
    out = dispatch("status", "waits", check=True).stdout
    assert f"dispatch resubmit {job}" in out and f"dispatch give-up {job}" in out
    assert f"dispatch cancel {job}" in out
    # logs -f on the held job: says it is held, and keeps following until it is resolved.
    follower = dispatch.spawn("logs", job, "-f")
    assert follower.stderr is not None and follower.stdout is not None
    said = follower.stderr.readline()
    assert f"job {job} is held" in said and f"dispatch resubmit {job}" in said, said
    assert follower.poll() is None  # still waiting
    dispatch("resubmit", job, check=True)
    out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, err
    assert "second submission ran" in out


def test_ctrl_c_in_run_stops_supervising_not_the_job(dispatch: Dispatch) -> None:
    spec = dispatch.spec("keeps", script("import time; time.sleep(120)"))
    proc = dispatch.spawn("run", str(spec), "--poll", "0.2")
    st = dispatch.wait_for("keeps", lambda s: s["state"] == "running")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_DETACHED == 75, err
    assert (f"stopped supervising; the job keeps running (`dispatch cancel {st['job']}` "
            "stops it)") in err
    assert "Traceback" not in err
    assert dispatch.status("keeps")["state"] == "running"  # the job did not stop
    dispatch("cancel", "keeps", check=True)
    dispatch.spawn("supervise", "--poll", "0.2")
    wait_until(lambda: dispatch.status("keeps")["state"] == "cancelled", "cancelled")


def test_supersede_run_supervises_the_new_job_in_the_foreground(dispatch: Dispatch) -> None:
    first = run_ok(dispatch, "again")
    done = dispatch("supersede", "again", "--run", "--json", "--poll", "0.2", timeout=180)
    assert done.returncode == 0, done.stderr
    st = json.loads(done.stdout)
    assert st["state"] == "succeeded" and st["supersedes"] == first
    assert f"{st['job']} supersedes {first}" in done.stderr
    assert dispatch.json("status", "again")["job"] == st["job"]


def test_watch_json_prints_one_array_a_refresh(dispatch: Dispatch) -> None:
    job = run_ok(dispatch, "wj")
    done = dispatch("watch", "--all", "--json", "--count", "2", "--interval", "0.1",
                    check=True)
    refreshes = [json.loads(x) for x in done.stdout.splitlines()]
    assert [[row["job"] for row in r] for r in refreshes] == [[job], [job]]
