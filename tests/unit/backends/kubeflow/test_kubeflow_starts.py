"""Issue 46, "Misreadings a held-out run found": an execution starts when a container of it
runs, never at a pod's ``status.startTime`` (the kubelet sets that when it admits the pod,
before it pulls the image). Pods shaped as the API server sends them (validated against the
Pod schema); the recorded image-pull scenario replayed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from test_kubeflow_mapping import job, jobset, pod, row, trainjob, waiting
from test_kubeflow_replay import Path_, recorded, replay

from dispatch.backends.kubeflow.container_times import container_start
from dispatch.core.model import CauseKind, State
from kube_fake import schemas
from kube_fake.trainer import builtin_cond

AT = "2026-03-01T10:00:07Z"


def _status(p: dict[str, Any], state: dict[str, Any], last: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    cs = p["status"]["containerStatuses"][0]
    cs["state"] = state
    if last is not None:
        cs["lastState"] = last
    schemas.validate("Pod", p)
    return p


@pytest.mark.parametrize(("state", "last", "started"), [
    ({"running": {"startedAt": AT}}, None, AT),
    ({"terminated": {"reason": "Error", "exitCode": 2, "startedAt": AT,
                     "finishedAt": "2026-03-01T10:01:00Z"}}, None, AT),
    # restarted in place: the first start is the last termination's
    ({"running": {"startedAt": "2026-03-01T10:02:00Z"}},
     {"terminated": {"reason": "Error", "exitCode": 1, "startedAt": AT,
                     "finishedAt": "2026-03-01T10:01:00Z"}}, AT),
    ({"waiting": {"reason": "ErrImagePull", "message": "pull access denied"}}, None, None),
    ({"waiting": {"reason": "ImagePullBackOff"}}, None, None),
    ({"waiting": {"reason": "ContainerCreating"}}, None, None),
    # a container that could not start: the runtime writes the epoch as its start
    ({"terminated": {"reason": "StartError", "exitCode": 128,
                     "startedAt": "1970-01-01T00:00:00Z",
                     "finishedAt": "2026-03-01T10:01:00Z"}}, None, None),
    ({"terminated": {"reason": "ContainerCannotRun", "exitCode": 128, "startedAt": AT,
                     "finishedAt": "2026-03-01T10:01:00Z"}}, None, None),
])
def test_a_pod_started_when_a_container_ran_never_at_its_start_time(
        state: dict[str, Any], last: dict[str, Any] | None, started: str | None) -> None:
    p = _status(pod(0, phase="Pending"), state, last)
    assert p["status"]["startTime"]  # set in every row: it is not the start
    want = None if started is None else datetime.fromisoformat(started.replace("Z", "+00:00"))
    assert container_start(p) == want


def _pulling(i: int, node: str) -> dict[str, Any]:
    return pod(i, phase="Pending", node_name=node,
               state=waiting("ErrImagePull", "pull access denied for trainer:1"))


def test_a_job_whose_bound_pods_cannot_pull_never_started() -> None:
    # both pods bound (spec.nodeName, startTime set by the kubelet), both ErrImagePull
    report = row(trainjob(), jobset(), [job()], [_pulling(0, "n1"), _pulling(1, "n2")])
    assert report.state is State.PENDING and report.cause.kind is CauseKind.LAUNCH_FAILED
    (current,) = report.executions
    assert current.started_at is None, current
    # both are placed: the note counts them both (it said "1 of 2" before)
    assert "2 of 2 pods placed, holding n1, n2" in report.cause.note, report.cause.note
    assert "while the rest wait" not in report.cause.note


def test_a_gang_with_one_pod_unplaced_still_says_the_rest_wait() -> None:
    unplaced = pod(1, phase="Pending", scheduled=False, conditions=[builtin_cond(
        "PodScheduled", "False", "Unschedulable", "0/2 nodes are available")])
    report = row(trainjob(), jobset(), [job()], [pod(0), unplaced])
    assert report.state is State.PENDING and report.cause.kind is CauseKind.NO_CAPACITY
    assert ("1 of 2 pods placed, holding n1 while the rest wait: JobSet does not schedule"
            in report.cause.note), report.cause.note


def test_the_start_is_the_first_container_that_ran_among_its_pods() -> None:
    early = pod(0, state={"running": {"startedAt": AT}})
    late = pod(1, node_name="n2", state={"running": {"startedAt": "2026-03-01T10:00:09Z"}})
    report = row(trainjob(), jobset(), [job()], [late, early])
    assert report.state is State.RUNNING
    assert report.executions[-1].started_at == datetime(2026, 3, 1, 10, 0, 7, tzinfo=UTC)


def test_one_pod_running_and_one_that_cannot_pull_is_pending_with_the_runner_placed() -> None:
    report = row(trainjob(), jobset(), [job()], [pod(0), _pulling(1, "n2")])
    assert report.state is State.PENDING and report.cause.kind is CauseKind.LAUNCH_FAILED
    assert "2 of 2 pods placed" in report.cause.note


def test_the_recorded_image_pull_never_reads_a_start(path: Path_) -> None:
    # The recording's pod has status.startTime (KWOK sets it as a kubelet does) and only a
    # waiting container: no reading may say its execution started.
    assert any(ln["kind"] == "Pod" and (ln["object"].get("status") or {}).get("startTime")
               for ln in recorded("image-pull"))
    readings = replay("image-pull", path)
    starts = [e.started_at for r in readings if r is not None for e in r.executions]
    assert starts and all(s is None for s in starts), starts
