"""Issue 35's scenarios 10 and 11 on the real control plane: the application's own error (the
termination message its container wrote) where people and programs read a job: `status`,
`ls`, `history`, and the HTTP API of a `dispatch serve` that supervised the job itself; and
`dispatch.Executor(backend="kubeflow")` and goodput, as far as KWOK (no containers) shows them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from k8s_helpers import get
from test_kubeflow_real import DISPATCH_RUNTIME, kind, run, spec
from tests.e2e.conftest import Dispatch
from tests.integration.http.serve_harness import Served

import dispatch
from dispatch.fn.job import FunctionFailed, ResultMissing

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
        # the record's totals once serve built them (a scrape before that holds the store's
        # counts only, issue 49)
        while "dispatch_record_totals_ready 1.0" not in (
                metrics := served.client.get("/metrics").text):
            time.sleep(0.2)
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


def add(a: int, b: int) -> int:
    return a + b


def test_an_executor_function_on_kubeflow_what_kwok_can_show(
    cli: Dispatch, namespace: str, tmp_path: Path
) -> None:
    # Scenario 11. KWOK runs no process: the pods "run" for DISPATCH_TESTBED_SECONDS and exit
    # as their env says, so what is real here is everything up to the pod and back: the
    # TrainJob the executor makes, its supervision by `wait`/`result`, and the record. What
    # the function returns and raises needs a kubelet that runs the image's python (with
    # dispatch installed) and the call folder mounted at the same path on every pod.
    store = str(tmp_path / "record.sqlite3")
    ex = dispatch.Executor(
        tmp_path / "runs",
        backend="kubeflow",
        store=store,
        nodes=2,
        env={"DISPATCH_TESTBED_SECONDS": "3"},
        kubeflow={"namespace": namespace, "runtime": DISPATCH_RUNTIME},
    )
    job = ex.submit(add, 2, 3)
    final = job.wait(timeout=180, poll=0.5)
    assert final.state is dispatch.State.SUCCEEDED, final
    st = cli.status(job.id)
    assert st["backend"] == "kubeflow" and st["submissions"] == 1, st
    trainer = get("trainjob", st["objects"][-1].split("/")[-1], namespace)["spec"]["trainer"]
    assert trainer["command"] == ["python", "-I", "-m", "dispatch.fn", str(job.folder)]
    assert trainer["numNodes"] == 2
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["DISPATCH_JOB_ID"] == job.id and env["DISPATCH_SUBMISSION"] == "1"
    # The call was pickled into its folder before anything was recorded; no process read it,
    # so no return value came back: the record's success is not turned into a made-up value.
    assert any(job.folder.iterdir())
    with pytest.raises(ResultMissing):
        job.result(timeout=0)

    # A function whose pods fail: the cause and the termination message come from the cluster
    # (FunctionFailed carries them); the remote exception (its pickled traceback) needs the
    # bootstrap to have run, so there is none.
    ex.update_parameters(
        env={
            "DISPATCH_TESTBED_SECONDS": "1",
            "DISPATCH_TESTBED_EXIT": "1",
            "DISPATCH_TESTBED_MESSAGE": MESSAGE,
        }
    )
    failing = ex.submit(add, 1, 1)
    err = failing.exception(timeout=180, poll=0.5)
    assert isinstance(err, FunctionFailed), err
    assert err.status.cause.kind is dispatch.CauseKind.NON_ZERO_EXIT, err.status
    assert err.status.error is not None
    assert err.status.error.message == MESSAGE
    assert err.remote is None


def test_goodput_on_kubeflow_is_node_time_from_the_record(cli: Dispatch, namespace: str) -> None:
    # Goodput (G1, G2) is read from the record alone: the execution's start as the scheduler
    # says it (a pod's startedAt, whole seconds) on the nodes it started on, its end, the
    # outcome. Lost work (G3) needs reported checkpoints: the kubeflow backend sets no
    # DISPATCH_PROGRESS_FILE (a pod's file is not readable by the supervisor), so none is
    # counted, whatever the cluster.
    code, st = run(
        cli,
        spec(
            cli,
            namespace,
            "gp",
            {"DISPATCH_TESTBED_SECONDS": "4"},
            nodes=2,
            runtime=DISPATCH_RUNTIME,
        ),
    )
    assert code == 0 and st["state"] == "succeeded", st
    events = {e["type"]: e["event"] for e in cli.json("history", "gp")}
    assert events["ExecutionStarted"]["nodes"] == 2
    (group,) = cli.json("goodput", "gp")["groups"]
    parts = {(p["phase"], p["cause"]): p for p in group["parts"]}
    running = parts[("running", "none")]
    assert running["node_seconds"] == pytest.approx(2 * running["seconds"], abs=1e-6)
    assert running["seconds"] >= 3  # the pods ran 4 s (whole-second stamps: at least 3)
    assert sum(p["node_seconds"] for p in group["parts"]) == pytest.approx(
        group["node_seconds"], abs=1e-5
    )
    assert group["node_seconds"] == pytest.approx(2 * group["wall_seconds"], abs=1e-5)
    assert group["lost_work"] == []
    assert 0 < group["goodput"] <= 1 and group["goodput_allocated"] > 0
