"""Issue 46 on the stand-in API server: a TrainJob whose spec names ``kubeflow.shared_dir``
(here a temporary directory standing for the shared volume) has its pods' torchelastic error
files and progress files read by ``discover`` through the backend: the first failing
worker's error file is the application's error (not the termination message), and the latest
checkpoint rides on the running execution. The cause is the scheduler's in every case."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.specs import parse_spec

from dispatch.backends.base import Submission
from dispatch.backends.kubeflow import KubeflowBackend
from dispatch.core.model import CauseKind, ObjectReport, State
from kube_fake import FakeApiServer
from kube_fake import trainer as tr

NODES = ["n1", "n2"]


def look(backend: KubeflowBackend, token: str) -> ObjectReport:
    found = backend.discover([token], [])
    assert found.complete
    (report,) = found.objects
    return report


def submit(fake: FakeApiServer, backend: KubeflowBackend, shared: Path) -> tuple[str, str,
                                                                                 list[str]]:
    for n in NODES:
        fake.put(tr.node(n))
    spec = parse_spec({"name": "train", "command": ["torchrun", "train.py"],
                       "backend": "kubeflow", "nodes": len(NODES),
                       "kubeflow": {"runtime": "torch-distributed", "image": "trainer:1",
                                    "volumes": [{"host_path": str(shared),
                                                 "mount_path": str(shared)}],
                                    "shared_dir": str(shared)}})
    ref = backend.submit(Submission(job_id="job-a", number=0, token="job-a.0", spec=spec))
    ns, name = ref.split("/")
    return ns, name, tr.materialize(fake, ns, name, NODES)


def error_file(words: str) -> str:
    return json.dumps({"message": {"message": words, "extraInfo": {
        "py_callstack": f"Traceback (most recent call last):\n  File \"/w/train.py\", line 9, "
                        f"in main\n{words}\n", "timestamp": "1900000000"}, "errorCode": 1}})


def test_the_first_workers_error_file_in_the_shared_dir_is_the_error(
        fake: FakeApiServer, backend: KubeflowBackend, tmp_path: Path) -> None:
    ns, name, pods = submit(fake, backend, tmp_path)
    (tmp_path / f"dispatch-{pods[1]}.error.json").write_text(
        error_file("FloatingPointError: loss is NaN at step 7"))
    tr.terminate(fake, ns, pods[1], reason="Error", exit_code=1, at=tr.T1,
                 message="the termination message's words")
    tr.terminate(fake, ns, pods[0], reason="Error", exit_code=1, at=tr.T2)
    cond = tr.cond("Failed", reason="FailedJobs", message=f"jobset failed: job {name}-node-0",
                   at=tr.T2)
    tr.set_conditions(fake, "JobSet", ns, name, cond)
    tr.set_conditions(fake, "TrainJob", ns, name, cond)
    tr.finish_jobs_status(fake, ns, name, succeeded=0, failed=1)
    report = look(backend, "job-a.0")
    assert report.state is State.FAILED and report.cause.kind is CauseKind.NON_ZERO_EXIT
    assert "FloatingPointError" not in report.cause.detail + report.cause.note
    error = report.executions[-1].error
    assert error is not None and error.source.value == "torchelastic-error-file", error
    assert error.message == "FloatingPointError: loss is NaN at step 7"
    assert (error.rank, error.node, error.exit_code) == (1, "n2", 1)
    assert 'File "/w/train.py", line 9' in error.traceback_tail


def test_the_pods_checkpoints_ride_on_the_running_execution(
        fake: FakeApiServer, backend: KubeflowBackend, tmp_path: Path) -> None:
    ns, name, pods = submit(fake, backend, tmp_path)
    lines: list[dict[str, Any]] = [{"step": 5, "checkpoint": True, "time": 1772359500.0},
                                   {"step": 6}]
    (tmp_path / f"dispatch-{pods[0]}.progress.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines))
    report = look(backend, "job-a.0")
    assert report.state is State.RUNNING
    progress = report.executions[-1].progress
    assert progress is not None and progress.checkpoint is not None
    assert progress.checkpoint.step == 5
    # every pod's env names its own files after the pod, in the directory of the spec
    trainjob = fake.get("TrainJob", ns, name)
    assert trainjob is not None
    env = {e["name"]: e.get("value") for e in trainjob["spec"]["trainer"]["env"]}
    assert env["DISPATCH_PROGRESS_FILE"] == \
        f"{tmp_path}/dispatch-$(DISPATCH_POD_NAME).progress.jsonl"


REAL = Path(__file__).resolve().parents[2] / "fixtures" / "torchrun-c10d"


def test_real_torchrun_under_c10d_the_rank_is_torchruns_not_the_pods_index(
        fake: FakeApiServer, backend: KubeflowBackend, tmp_path: Path) -> None:
    """Real torchrun output (tests/fixtures/torchrun-c10d): under a c10d rendezvous the
    rendezvous, not the pod's completion index, orders the nodes. Here pod 0 ran rank 1,
    which raised; pod 1 ran rank 0, whose worker failed after it in the same second. The
    first worker's file (by when it was written: the timestamps tie) is rank 1's; its rank
    is the one torchrun's Root Cause block in pod 0's log says (24 lines from its end)."""
    ns, name, pods = submit(fake, backend, tmp_path)
    first = tmp_path / f"dispatch-{pods[0]}.error.json"
    then = tmp_path / f"dispatch-{pods[1]}.error.json"
    first.write_bytes((REAL / "rank1.error.json").read_bytes())
    then.write_bytes((REAL / "rank0.error.json").read_bytes())
    at = first.stat().st_mtime_ns
    os.utime(then, ns=(at + 300_000_000, at + 300_000_000))
    assert json.loads(first.read_text())["message"]["extraInfo"]["timestamp"] == \
        json.loads(then.read_text())["message"]["extraInfo"]["timestamp"]
    fake.write_log(ns, pods[0], (REAL / "rank1.log").read_text())
    fake.write_log(ns, pods[1], (REAL / "rank0.log").read_text())
    tr.terminate(fake, ns, pods[0], reason="Error", exit_code=1, at=tr.T1)
    tr.terminate(fake, ns, pods[1], reason="Error", exit_code=1, at=tr.T1)
    cond = tr.cond("Failed", reason="FailedJobs", message=f"jobset failed: job {name}-node-0",
                   at=tr.T2)
    tr.set_conditions(fake, "JobSet", ns, name, cond)
    tr.set_conditions(fake, "TrainJob", ns, name, cond)
    tr.finish_jobs_status(fake, ns, name, succeeded=0, failed=1)
    report = look(backend, "job-a.0")
    assert report.cause.kind is CauseKind.NON_ZERO_EXIT
    error = report.executions[-1].error
    assert error is not None and error.source.value == "torchelastic-error-file", error
    assert error.message == "FloatingPointError: loss is nan at step 3"
    assert (error.rank, error.local_rank, error.node) == (1, 0, "n1"), error
    assert error.note == "", error.note
    assert "in layer" in error.traceback_tail
    # the log was read once, for the pod whose file won; a later look asks no more
    asked = [r.path for r in fake.requests if r.path.endswith("/log")]
    assert asked == [f"/api/v1/namespaces/{ns}/pods/{pods[0]}/log"], asked
    assert look(backend, "job-a.0").executions[-1].error == error
    assert [r.path for r in fake.requests if r.path.endswith("/log")] == asked
