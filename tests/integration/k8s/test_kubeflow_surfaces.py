"""Issue 35's scenarios 10 and 11 on the real control plane: the application's own error (the
termination message its container wrote) where people and programs read a job: `status`,
`ls`, `history`, and the HTTP API of a `dispatch serve` that supervised the job itself."""

from __future__ import annotations

from pathlib import Path

from test_kubeflow_real import kind
from tests.e2e.conftest import Dispatch
from tests.integration.http.serve_harness import Served

MESSAGE = "RuntimeError: loss is nan at step 7"


def test_the_termination_message_is_shown_by_status_ls_history_and_the_api(
    cli: Dispatch, namespace: str, tmp_path: Path
) -> None:
    # Submitted through the API and supervised by `dispatch serve` (its own process, the same
    # record as the CLI); the stock runtime, so the pod crash-loops and is deleted by the Job
    # controller before the TrainJob says Failed: the message must be captured before that.
    served = Served(tmp_path)
    try:
        job = served.submit(
            {
                "name": "apperr",
                "backend": "kubeflow",
                "command": ["python", "train.py"],
                "nodes": 2,
                "env": {
                    "DISPATCH_TESTBED_SECONDS": "1",
                    "DISPATCH_TESTBED_EXIT": "3",
                    "DISPATCH_TESTBED_MESSAGE": MESSAGE,
                },
                "kubeflow": {"namespace": namespace, "runtime": "torch-distributed"},
            }
        )
        st = served.wait_for(job, lambda s: s["settled"])
        assert st["state"] == "failed" and kind(st) == "non-zero-exit", st
        err = st["application_error"]
        assert (err["message"], err["exit_code"], err["source"]) == (
            MESSAGE,
            3,
            "termination-message",
        ), err
        assert err["node"].startswith("kwok-node-") and err["rank"] in (0, 1), err
        # The list's row (a page, searched by the error's words, as the dashboard asks).
        page = served.client.get("/api/jobs", params={"limit": 10, "q": "loss is nan"}).json()
        assert [(r["job"], r["app_error"]) for r in page["jobs"]] == [(job, MESSAGE)], page
        story = served.client.get(f"/api/jobs/{job}/history").json()
        assert [e for e in story if e["type"] == "ApplicationErrorRecorded"], story
        metrics = served.client.get("/metrics").text
        assert 'dispatch_application_errors_total{cause="non-zero-exit"} 1.0' in metrics
    finally:
        served.close()

    # The same record read by the CLI, as a person reads it.
    status = cli("status", job, check=True).stdout
    assert (
        f"error: rank {err['rank']} on {err['node']}: {MESSAGE}  (termination-message)" in status
    ), status
    assert cli.status(job)["application_error"] == err
    ls = cli("ls", "--all", check=True).stdout
    (line,) = [ln for ln in ls.splitlines() if ln.startswith(job)]
    assert line.rstrip().endswith(MESSAGE), ls
    history = cli("history", job, check=True).stdout
    assert (
        f"from termination-message): rank {err['rank']} on {err['node']}: {MESSAGE}" in history
    ), history
    # Once: a crash loop restarts the container several times; the record has one such event.
    events = cli.json("history", job)
    assert len([e for e in events if e["type"] == "ApplicationErrorRecorded"]) == 1, events
