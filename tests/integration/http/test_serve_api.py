"""The JSON API of `dispatch serve`: the same shapes as the CLI's --json, person requests,
logs that stream across submissions, and the error mapping (exit code -> HTTP status)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from serve_harness import Served, cli, spec

FAIL_FIRST = ("import os, sys\n"
              "print('submission', os.environ['DISPATCH_SUBMISSION'], flush=True)\n"
              "sys.exit(3 if os.environ['DISPATCH_SUBMISSION'] == '1' else 0)\n")
SLEEP = "import time; time.sleep(120)"


def test_status_and_history_are_the_clis_json(serve: Callable[..., Served],
                                              tmp_path: Path) -> None:
    s = serve()
    job = s.submit(spec("hello", "print('hi')"))
    done = s.wait_for(job, lambda st: st["settled"])
    assert done["state"] == "succeeded" and done["cause"]["kind"] == "none"
    by_cli = json.loads(cli(tmp_path, "status", job, "--json").stdout)
    assert s.status(job) == by_cli
    history = s.client.get(f"/api/jobs/{job}/history").json()
    assert history == json.loads(cli(tmp_path, "history", job, "--json").stdout)
    assert [h["type"] for h in history][0] == "JobCreated"
    listed = s.client.get("/api/jobs", params={"all": "1"}).json()
    assert [row["job"] for row in listed] == [job]
    assert s.client.get("/api/jobs").json() == []  # finished jobs only with all=1
    assert s.client.get("/api/jobs", params={"all": "1", "state": "failed"}).json() == []
    assert s.client.get(f"/api/jobs/{job}/logs").text == "hi\n"


def test_a_running_jobs_status_has_its_running_execution_as_the_cli_says(
        serve: Callable[..., Served], tmp_path: Path) -> None:
    """Issue 48 item 8: `running` (since when, the last checkpoint) is in the API's status as
    in `dispatch status --json`: times from the record, so both documents agree."""
    s = serve()
    job = s.submit(spec("sleepy", SLEEP))
    doc = s.wait_for(job, lambda st: st.get("running") is not None)
    assert doc["running"]["submission"] == 1 and doc["running"]["checkpoint"] is None
    by_cli = json.loads(cli(tmp_path, "status", job, "--json").stdout)
    assert by_cli["running"] == doc["running"]


# Submission 1 ends only once the follower has its line: a follow starts at the newest
# submission, so a follower that arrived after the resubmission would never see the first.
FAIL_FIRST_ON_GO = ("import os, sys, time\n"
                    "print('submission', os.environ['DISPATCH_SUBMISSION'], flush=True)\n"
                    "while os.environ['DISPATCH_SUBMISSION'] == '1' and "
                    "not os.path.exists(os.environ['GO']):\n"
                    "    time.sleep(0.05)\n"
                    "sys.exit(3 if os.environ['DISPATCH_SUBMISSION'] == '1' else 0)\n")


def test_logs_follow_streams_across_submissions(serve: Callable[..., Served],
                                                tmp_path: Path) -> None:
    s = serve()
    policy = {"rules": [{"on": ["non-zero-exit"], "action": "resubmit", "budget": 1}]}
    go = tmp_path / "go"
    job = s.submit(spec("twice", FAIL_FIRST_ON_GO, policy=policy, env={"GO": str(go)}))
    lines: list[str] = []
    try:
        with s.client.stream("GET", f"/api/jobs/{job}/logs", params={"follow": "1"}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/plain")
            for line in r.iter_lines():  # the stream ends at the committed outcome
                lines.append(line)
                go.touch()
    finally:
        go.touch()
    assert lines == ["submission 1", "== dispatch: submission 2 after non-zero-exit (exit 3)",
                     "submission 2"]
    st = s.status(job)
    assert st["state"] == "succeeded" and st["submissions"] == 2
    assert st["budget_used"] == {"non-zero-exit (resubmit)": 1}  # the rule's name
    r = s.client.get(f"/api/jobs/{job}/logs", params={"submission": "1"})
    assert r.text == "submission 1\n"


def test_cancel_is_recorded_and_carried_out_then_refused(serve: Callable[..., Served]) -> None:
    s = serve()
    job = s.submit(spec("sleepy", SLEEP))
    s.wait_for(job, lambda st: st["state"] == "running")
    r = s.post(f"/api/jobs/{job}/cancel")
    assert r.status_code == 200 and r.json()["job"] == job
    done = s.wait_for(job, lambda st: st["settled"])
    assert done["state"] == "cancelled"
    history = s.client.get(f"/api/jobs/{job}/history").json()
    cancel = [h for h in history if h["type"] == "CancelRequested"]
    assert cancel and cancel[0]["event"]["actor"]  # the user who started the server
    again = s.post(f"/api/jobs/{job}/cancel")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "state-conflict"
    assert again.json()["error"]["exit_code"] == 6


def test_supersede_and_resubmit_give_up_refusals(serve: Callable[..., Served]) -> None:
    s = serve()
    job = s.submit(spec("once", "pass"))
    for action in ("resubmit", "give-up"):
        r = s.post(f"/api/jobs/{job}/{action}")
        assert r.status_code == 409, r.text
    s.wait_for(job, lambda st: st["settled"])
    r = s.post(f"/api/jobs/{job}/supersede")
    assert r.status_code == 201, r.text
    new = r.json()
    assert new["supersedes"] == job and new["job"] != job
    assert s.wait_for(new["job"], lambda st: st["settled"])["state"] == "succeeded"
    assert s.post(f"/api/jobs/{job}/supersede").status_code == 409


def test_error_mapping(serve: Callable[..., Served], tmp_path: Path) -> None:
    s = serve()
    r = s.client.get("/api/jobs/no-such-job")
    assert r.status_code == 404
    assert r.json() == {"error": {"code": "not-found", "exit_code": 3,
                                  "message": "no such job: no-such-job"}}
    assert s.client.get("/api/jobs/no-such-job/history").status_code == 404
    assert s.post("/api/jobs/no-such-job/cancel").status_code == 404
    bad = s.post("/api/jobs", {"name": "x", "command": "python train.py"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "bad-input" and "command" in bad.json()["error"][
        "message"]
    unknown_key = s.post("/api/jobs", {"name": "x", "command": ["true"], "nodez": 1})
    assert unknown_key.status_code == 400 and "unknown key" in unknown_key.text
    policy = s.post("/api/jobs", {"name": "x", "command": ["true"],
                                  "policy": {"rules": [{"on": ["bogus"], "action": "hold"}]}})
    assert policy.status_code == 400
    not_json = s.client.post("/api/jobs", content=b"name: x",
                             headers={"Content-Type": "application/yaml"})
    assert not_json.status_code == 415
    garbage = s.client.post("/api/jobs", content=b"{", headers={
        "Content-Type": "application/json"})
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "bad-input"
    for workdir in ("/tmp/" + "a" * 256, "/" + "b/" * 2048):  # was 500: ENAMETOOLONG
        long = s.post("/api/jobs", {"name": "x", "command": ["true"], "workdir": workdir})
        assert long.status_code == 400, long.text
        assert long.json()["error"]["code"] == "bad-input"
        assert "workdir" in long.json()["error"]["message"]
    cross = s.post("/api/jobs", spec("x", "pass"), headers={"Origin": "http://elsewhere.test"})
    assert cross.status_code == 403
    rebound = s.client.get("/api/jobs", headers={"Host": "elsewhere.test"})
    assert rebound.status_code == 403
    # nothing was recorded by any of the refused requests
    assert s.client.get("/api/jobs", params={"all": "1"}).json() == []


def test_unreachable_scheduler_is_503_with_the_status(serve: Callable[..., Served],
                                                      tmp_path: Path) -> None:
    """A Slurm job while no Slurm tool can be run: the submission's intent is recorded, the
    status is the record's, and the answer is the CLI's exit code 4 as HTTP 503."""
    empty = tmp_path / "no-tools"
    empty.mkdir()
    s = serve(env={"PATH": str(empty)})
    r = s.post("/api/jobs", {"name": "far", "backend": "slurm", "command": ["true"]})
    assert r.status_code == 201, r.text
    job = r.json()["job"]
    got = s.client.get(f"/api/jobs/{job}")
    assert got.status_code == 503
    body = got.json()
    assert body["job"] == job and body["scheduler"] == "unreachable"
    assert body["state"] == "pending" and "squeue" in body["scheduler_problem"]
    listed = s.client.get("/api/jobs").json()
    assert [row["scheduler"] for row in listed] == ["unreachable"]


def test_store_unusable_is_500(serve: Callable[..., Served], tmp_path: Path) -> None:
    """A store that cannot be used at start stops the server (exit 5); one that becomes
    unusable later answers 500 with the error shape."""
    (tmp_path / "a-file").write_text("")
    done = cli(tmp_path, "serve", "--port", "1", "--store",
               str(tmp_path / "a-file" / "record.sqlite3"))
    assert done.returncode == 5 and "a-file is not a directory" in done.stderr
    s = serve("--store", str(tmp_path / "later.sqlite3"))
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"later.sqlite3{suffix}").unlink(missing_ok=True)
    (tmp_path / "later.sqlite3").write_bytes(b"this is not a database" * 100)
    r = s.client.get("/api/jobs")
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "store-unusable"
    assert r.json()["error"]["exit_code"] == 5


def test_the_dashboard_and_its_files_are_served(serve: Callable[..., Served]) -> None:
    s = serve()
    page = s.client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/static/dashboard.js" in page.text
    for name in ("dashboard.js", "dashboard.css"):
        assert s.client.get(f"/static/{name}").status_code == 200
    assert s.client.get("/static/nothing.js").status_code == 404


def test_cli_client_and_server_share_the_record(serve: Callable[..., Served],
                                                tmp_path: Path) -> None:
    """A job submitted with the CLI is supervised by the serving process."""
    s = serve()
    path = tmp_path / "cli.json"
    path.write_text(json.dumps(spec("from-cli", "print('ok')")))
    done = cli(tmp_path, "submit", str(path), "--json")
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)["job"]
    assert s.wait_for(job, lambda st: st["settled"])["state"] == "succeeded"
    assert sys.executable  # the node ran this interpreter
    assert s.client.get("/metrics").status_code == 200
