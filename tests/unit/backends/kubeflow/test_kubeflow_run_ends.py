"""Issue 46: a run on Kubernetes ends when its last container stopped, not when the signal
that ended it was stamped. A preemption's DisruptionTarget and a deadline's Failed are dated
when decided; the processes run on through their SIGTERM grace, on the nodes, doing work
that only a checkpoint keeps (seen on the real nodes: a preemption stamped before the last
checkpoint read as having lost nothing). Pods shaped as the API server sends them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from test_kubeflow_mapping import FAILED_JOBS, job, jobset, pod, row, terminated, trainjob

from dispatch.backends.kubeflow.container_times import containers_ended
from dispatch.core.model import CauseKind, State
from kube_fake import schemas
from kube_fake.trainer import builtin_cond, cond


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).astimezone(UTC)


DECIDED = "2026-03-01T10:05:00Z"  # the condition's stamp
STOPPED = "2026-03-01T10:05:27Z"  # the container's end, after its grace


def _preempted(finished: str, i: int = 0) -> dict[str, Any]:
    p = pod(i, phase="Failed", state=terminated("Error", 143, at=finished), conditions=[
        builtin_cond("DisruptionTarget", reason="PreemptionByScheduler",
                     message="Preempted in order to admit critical pod", at=DECIDED)])
    schemas.validate("Pod", p)
    return p


def test_a_preemption_ends_when_its_container_stopped_after_the_grace() -> None:
    r = row(trainjob([FAILED_JOBS], active=0), None, [], [_preempted(STOPPED)])
    assert r.state is State.FAILED and r.cause.kind is CauseKind.PREEMPTED
    last = r.executions[-1]
    assert last.cause is not None and last.cause.at == _t(STOPPED) == last.ended_at
    assert r.cause.at == _t(STOPPED)
    assert "PreemptionByScheduler" in r.cause.detail  # the scheduler's words, unchanged


def test_a_container_that_stopped_before_the_stamp_leaves_the_stamp() -> None:
    r = row(trainjob([FAILED_JOBS], active=0), None, [],
            [_preempted("2026-03-01T10:04:59Z")])
    assert r.executions[-1].ended_at == _t(DECIDED)


def test_two_pods_end_when_the_later_one_stopped() -> None:
    late = _preempted("2026-03-01T10:05:09Z", 1)
    late["spec"]["nodeName"] = "n2"
    r = row(trainjob([FAILED_JOBS], active=0), None, [],
            [_preempted("2026-03-01T10:05:03Z"), late])
    assert r.executions[-1].ended_at == _t("2026-03-01T10:05:09Z")


def test_a_deadline_ends_when_its_pods_stopped_and_stays_a_time_limit() -> None:
    deadline = cond("Failed", reason="DeadlineExceeded",
                    message="Job was active longer than specified deadline", at=DECIDED)
    r = row(trainjob([deadline], active=0), jobset([deadline]), [job(active=0)],
            [pod(0, phase="Failed", state=terminated("Error", 143, at=STOPPED))])
    assert r.cause.kind is CauseKind.TIME_LIMIT
    assert r.executions[-1].ended_at == _t(STOPPED)


def test_a_success_is_dated_by_its_condition_when_that_is_later() -> None:
    done = cond("Complete", reason="JobSetCompleted", message="done", at=DECIDED)
    r = row(trainjob([done], active=0), None, [],
            [pod(0, phase="Succeeded", state=terminated("Completed", 0,
                                                        at="2026-03-01T10:04:58Z"))])
    assert r.state is State.SUCCEEDED and r.executions[-1].ended_at == _t(DECIDED)


@pytest.mark.parametrize(("state", "want"), [
    ({"running": {"startedAt": DECIDED}}, None),
    ({"waiting": {"reason": "ContainerCreating"}}, None),
    ({"terminated": {"reason": "Error", "exitCode": 1, "finishedAt": STOPPED}}, STOPPED),
    # a container that could not start: no run to end
    ({"terminated": {"reason": "StartError", "exitCode": 128,
                     "finishedAt": "1970-01-01T00:00:00Z"}}, None),
    ({"terminated": {"reason": "ContainerCannotRun", "exitCode": 128,
                     "finishedAt": STOPPED}}, None),
])
def test_containers_ended_reads_only_a_current_termination(
        state: dict[str, Any], want: str | None) -> None:
    p = pod(0, state=state)
    assert containers_ended([p]) == (None if want is None else _t(want))
