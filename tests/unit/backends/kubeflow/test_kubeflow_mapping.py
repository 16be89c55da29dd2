"""Table tests of the pure Kubernetes -> (state, cause) mapping: one row per Kubernetes row of
docs/scheduler-signals.md. Every TrainJob / JobSet / Job / Pod / Node fed in is first validated
against the real CRD schemas (built-ins: the API reference subset in kube_fake.schemas)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from dispatch.backends.kubeflow.gone import deleted_by, report_gone  # noqa: E402
from dispatch.backends.kubeflow.mapping import report_trainjob  # noqa: E402
from dispatch.backends.kubeflow.objects import (  # noqa: E402
    JOBSET_NAME_LABEL,
    MANAGED_LABEL,
    RESTART_ATTEMPT_LABEL,
    TOKEN_LABEL,
)
from dispatch.core.model import CauseKind, Provenance, State  # noqa: E402
from kube_fake import schemas  # noqa: E402
from kube_fake.trainer import T0, T1, builtin_cond, cond, node  # noqa: E402

NOW = datetime(2026, 3, 1, 10, 7, tzinfo=UTC)
NAME = "train-abc"
NS = "team"
TOKEN = "job-1.0"


def trainjob(
    conditions: list[dict[str, Any]] = (),  # type: ignore[assignment]
    *,
    active: int = 1,
    suspend: bool = False,
    gate: str = "open",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": NAME,
            "namespace": NS,
            "labels": {MANAGED_LABEL: "true", TOKEN_LABEL: TOKEN},
            "annotations": {"dispatch.io/gate": gate},
        },
        "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": 2}, "suspend": suspend},
        "status": {
            "conditions": list(conditions),
            "jobsStatus": [
                {
                    "name": "node",
                    "active": active,
                    "ready": active,
                    "succeeded": 0,
                    "failed": 0,
                    "suspended": 0,
                }
            ],
        },
    }
    schemas.validate("TrainJob", obj)
    return obj


def jobset(conditions: list[dict[str, Any]] = (), restarts: int = 0) -> dict[str, Any]:  # type: ignore[assignment]
    obj: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": NAME, "namespace": NS, "labels": {MANAGED_LABEL: "true"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "node",
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {"containers": [{"name": "node", "image": "trainer:1"}]}
                            }
                        }
                    },
                }
            ]
        },
        "status": {"conditions": list(conditions), "restarts": restarts},
    }
    schemas.validate("JobSet", obj)
    return obj


def job(conditions: list[dict[str, Any]] = (), attempt: int = 0, active: int = 2) -> dict[str, Any]:  # type: ignore[assignment]
    obj: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{NAME}-node-0-r{attempt}",
            "namespace": NS,
            "labels": {JOBSET_NAME_LABEL: NAME, RESTART_ATTEMPT_LABEL: str(attempt)},
        },
        "status": {"active": active, "conditions": list(conditions)},
    }
    schemas.validate("Job", obj)
    return obj


def pod(
    i: int = 0,
    *,
    phase: str = "Running",
    node_name: str = "n1",
    attempt: int = 0,
    state: dict[str, Any] | None = None,
    conditions: list[dict[str, Any]] = (),  # type: ignore[assignment]
    deleting: bool = False,
    scheduled: bool = True,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": list(conditions)}
    if scheduled:
        status["startTime"] = T0
        status["containerStatuses"] = [
            {
                "name": "node",
                "ready": phase == "Running",
                "restartCount": 0,
                "image": "trainer:1",
                "imageID": "sha256:abc",
                "state": state or {"running": {"startedAt": T0}},
            }
        ]
    meta: dict[str, Any] = {
        "name": f"{NAME}-node-0-{i}-a{attempt}",
        "namespace": NS,
        "labels": {JOBSET_NAME_LABEL: NAME, RESTART_ATTEMPT_LABEL: str(attempt)},
    }
    if deleting:
        meta["deletionTimestamp"] = T1
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node_name} if scheduled else {},
        "status": status,
    }
    schemas.validate("Pod", obj)
    return obj


def terminated(reason: str, code: int, at: str = T1) -> dict[str, Any]:
    return {"terminated": {"reason": reason, "exitCode": code, "finishedAt": at}}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message}}


def nodes(*lost: str) -> list[dict[str, Any]]:
    out = [node("n1", lost="n1" in lost), node("n2", lost="n2" in lost)]
    for n in out:
        schemas.validate("Node", n)
    return out


FAILED_JOBS = cond("Failed", reason="FailedJobs", message="jobset failed: job train-abc-node-0")


def row(tj, js=None, jobs=(), pods=(), ns=None):  # type: ignore[no-untyped-def]
    return report_trainjob(tj, js, list(jobs), list(pods), ns if ns is not None else nodes(), NOW)


# (id, inputs, state, cause kind, provenance, exit code, words that must appear in the detail)
ROWS = [
    (
        "running",
        lambda: row(trainjob(), jobset(), [job()], [pod(0), pod(1, node_name="n2")]),
        State.RUNNING,
        CauseKind.NONE,
        Provenance.SCHEDULER,
        None,
        "",
    ),
    (
        "pending-pods",
        lambda: row(trainjob(), jobset(), [job()], [pod(0, phase="Pending")]),
        State.PENDING,
        CauseKind.NONE,
        Provenance.SCHEDULER,
        None,
        "",
    ),
    (
        "suspended-by-our-gate",
        lambda: row(
            trainjob(
                [cond("Suspended", reason="Suspended", message="TrainJob is suspended")],
                active=0,
                suspend=True,
                gate="closed",
            )
        ),
        State.HELD,
        CauseKind.HELD,
        Provenance.ACTOR,
        None,
        "TrainJob is suspended",
    ),
    (
        # Resumed (spec.suspend false: our gate opened, or a person resumed) and Trainer has
        # not yet turned its Suspended condition False: a resume in progress, nobody's hold.
        "suspended-condition-the-spec-no-longer-asks-for",
        lambda: row(
            trainjob(
                [cond("Suspended", reason="Suspended", message="TrainJob is suspended")],
                active=0,
                suspend=False,
                gate="open",
            )
        ),
        State.PENDING,
        CauseKind.RELEASED,
        Provenance.SCHEDULER,
        None,
        "Suspended=True",
    ),
    (
        "resumed-not-started",
        lambda: row(
            trainjob([cond("Suspended", "False", "Resumed", "TrainJob is resumed")], active=0)
        ),
        State.PENDING,
        CauseKind.RELEASED,
        Provenance.SCHEDULER,
        None,
        "Resumed",
    ),
    (
        "complete",
        lambda: row(
            trainjob(
                [cond("Complete", reason="JobSetCompleted", message="jobset completed")], active=0
            )
        ),
        State.SUCCEEDED,
        CauseKind.NONE,
        Provenance.SCHEDULER,
        None,
        "jobset completed",
    ),
    (
        "jobset-completed-not-yet-copied",
        lambda: row(trainjob(active=0), jobset([cond("Completed", reason="AllJobsCompleted")])),
        State.SUCCEEDED,
        CauseKind.NONE,
        Provenance.SCHEDULER,
        None,
        "AllJobsCompleted",
    ),
    (
        "failed-exit-code",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            jobset([FAILED_JOBS]),
            [job([builtin_cond("Failed", reason="BackoffLimitExceeded")], active=0)],
            [
                pod(0, phase="Failed", state=terminated("Error", 3)),
                pod(1, phase="Failed", state=terminated("Error", 143, at="2026-03-01T10:05:30Z")),
            ],
        ),
        State.FAILED,
        CauseKind.NON_ZERO_EXIT,
        Provenance.APPLICATION,
        3,
        "exitCode=3",
    ),
    (
        "failed-137-without-oomkilled-is-unknown",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [],
            [pod(0, phase="Failed", state=terminated("Error", 137))],
        ),
        State.FAILED,
        CauseKind.UNKNOWN,
        Provenance.SCHEDULER,
        137,
        "exitCode=137",
    ),
    (
        "oomkilled",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [],
            [
                pod(0, phase="Failed", state=terminated("OOMKilled", 137)),
                pod(1, phase="Failed", state=terminated("Error", 1, at=T0)),
            ],
        ),
        State.FAILED,
        CauseKind.OUT_OF_MEMORY,
        Provenance.SCHEDULER,
        137,
        "OOMKilled",
    ),
    (
        "preempted-by-scheduler",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [],
            [
                pod(
                    0,
                    phase="Failed",
                    state=terminated("Error", 143),
                    conditions=[
                        builtin_cond(
                            "DisruptionTarget",
                            reason="PreemptionByScheduler",
                            message="Preempted in order to admit critical pod",
                        )
                    ],
                )
            ],
        ),
        State.FAILED,
        CauseKind.PREEMPTED,
        Provenance.SCHEDULER,
        None,
        "PreemptionByScheduler",
    ),
    (
        "evicted-by-eviction-api",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [],
            [
                pod(
                    0,
                    phase="Failed",
                    conditions=[builtin_cond("DisruptionTarget", reason="EvictionByEvictionAPI")],
                )
            ],
        ),
        State.FAILED,
        CauseKind.PREEMPTED,
        Provenance.SCHEDULER,
        None,
        "EvictionByEvictionAPI",
    ),
    (
        "deleted-by-taint-manager",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [],
            [
                pod(
                    0,
                    phase="Failed",
                    conditions=[builtin_cond("DisruptionTarget", reason="DeletionByTaintManager")],
                )
            ],
        ),
        State.FAILED,
        CauseKind.NODE_LOST,
        Provenance.SCHEDULER,
        None,
        "DeletionByTaintManager",
    ),
    (
        "deleted-by-pod-gc",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [],
            [
                pod(
                    0,
                    phase="Failed",
                    conditions=[builtin_cond("DisruptionTarget", reason="DeletionByPodGC")],
                )
            ],
        ),
        State.FAILED,
        CauseKind.NODE_LOST,
        Provenance.SCHEDULER,
        None,
        "DeletionByPodGC",
    ),
    (
        "kubelet-memory-pressure",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [],
            [
                pod(
                    0,
                    phase="Failed",
                    conditions=[
                        builtin_cond(
                            "DisruptionTarget",
                            reason="TerminationByKubelet",
                            message="The node was low on resource: memory.",
                        )
                    ],
                )
            ],
        ),
        State.FAILED,
        CauseKind.OUT_OF_MEMORY,
        Provenance.SCHEDULER,
        None,
        "low on resource",
    ),
    (
        "kubelet-node-shutdown",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [],
            [
                pod(
                    0,
                    phase="Failed",
                    conditions=[
                        builtin_cond(
                            "DisruptionTarget",
                            reason="TerminationByKubelet",
                            message="Pod was terminated in response to imminent node shutdown.",
                        )
                    ],
                )
            ],
        ),
        State.FAILED,
        CauseKind.NODE_LOST,
        Provenance.SCHEDULER,
        None,
        "node shutdown",
    ),
    (
        "start-error",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [],
            [pod(0, phase="Failed", state=terminated("StartError", 128))],
        ),
        State.FAILED,
        CauseKind.LAUNCH_FAILED,
        Provenance.SCHEDULER,
        128,
        "StartError",
    ),
    (
        "deadline-exceeded",
        lambda: row(
            trainjob(
                [
                    cond(
                        "Failed",
                        reason="DeadlineExceeded",
                        message="TrainJob exceeded its deadline",
                    )
                ],
                active=0,
            )
        ),
        State.FAILED,
        CauseKind.TIME_LIMIT,
        Provenance.SCHEDULER,
        None,
        "exceeded its deadline",
    ),
    (
        "job-deadline-beats-exit-codes",
        lambda: row(
            trainjob([FAILED_JOBS], active=0),
            None,
            [job([builtin_cond("Failed", reason="DeadlineExceeded")], active=0)],
            [pod(0, phase="Failed", state=terminated("Error", 143))],
        ),
        State.FAILED,
        CauseKind.TIME_LIMIT,
        Provenance.SCHEDULER,
        None,
        "DeadlineExceeded",
    ),
    (
        "failed-without-evidence-is-unknown",
        lambda: row(
            trainjob([cond("Failed", reason="ReachedMaxRestarts", message="reached max")], active=0)
        ),
        State.FAILED,
        CauseKind.UNKNOWN,
        Provenance.SCHEDULER,
        None,
        "ReachedMaxRestarts",
    ),
    (
        "runtime-not-supported",
        lambda: row(
            trainjob(
                [
                    # Trainer v2.3.0: a reason of Failed (trainjob_controller.go), never a type
                    cond(
                        "Failed",
                        reason="TrainingRuntimeNotSupported",
                        message="unsupported runtime: ClusterTrainingRuntime.trainer.kubeflow.org",
                    )
                ],
                active=0,
            )
        ),
        State.FAILED,
        CauseKind.LAUNCH_FAILED,
        Provenance.SCHEDULER,
        None,
        "unsupported runtime",
    ),
    (
        "image-pull-error",
        lambda: row(
            trainjob(),
            jobset(),
            [job()],
            [pod(0, phase="Pending", state=waiting("ImagePullBackOff", "Back-off pulling image"))],
        ),
        State.PENDING,
        CauseKind.LAUNCH_FAILED,
        Provenance.SCHEDULER,
        None,
        "ImagePullBackOff",
    ),
    (
        "err-image-pull-while-peer-runs",
        lambda: row(
            trainjob(),
            jobset(),
            [job()],
            [pod(0), pod(1, phase="Pending", state=waiting("ErrImagePull"))],
        ),
        State.PENDING,
        CauseKind.LAUNCH_FAILED,
        Provenance.SCHEDULER,
        None,
        "ErrImagePull",
    ),
    (
        "create-container-config-error",
        lambda: row(
            trainjob(),
            None,
            [],
            [
                pod(
                    0,
                    phase="Pending",
                    state=waiting("CreateContainerConfigError", "secret x not found"),
                )
            ],
        ),
        State.PENDING,
        CauseKind.LAUNCH_FAILED,
        Provenance.SCHEDULER,
        None,
        "secret x not found",
    ),
    (
        "unschedulable",
        lambda: row(
            trainjob(),
            None,
            [],
            [
                pod(
                    0,
                    phase="Pending",
                    scheduled=False,
                    conditions=[
                        builtin_cond(
                            "PodScheduled", "False", "Unschedulable", "0/4 nodes are available"
                        )
                    ],
                )
            ],
        ),
        State.PENDING,
        CauseKind.NO_CAPACITY,
        Provenance.SCHEDULER,
        None,
        "0/4 nodes are available",
    ),
    (
        "scheduling-gated",
        lambda: row(
            trainjob(),
            None,
            [],
            [
                pod(
                    0,
                    phase="Pending",
                    scheduled=False,
                    conditions=[builtin_cond("PodScheduled", "False", "SchedulingGated")],
                )
            ],
        ),
        State.HELD,
        CauseKind.HELD,
        Provenance.SCHEDULER,
        None,
        "SchedulingGated",
    ),
    (
        "pod-on-unreachable-node",
        lambda: row(trainjob(), jobset(), [job()], [pod(0), pod(1, node_name="n2")], nodes("n2")),
        State.RUNNING,
        CauseKind.NODE_LOST,
        Provenance.SCHEDULER,
        None,
        "node.kubernetes.io/unreachable",
    ),
    (
        # M3: every Job failure passes through FailureTarget while its pods terminate;
        # it is not node loss (the old row read it as node-lost).
        "failure-target-is-not-node-loss",
        lambda: row(
            trainjob(),
            jobset(),
            [
                job(
                    [
                        builtin_cond(
                            "FailureTarget",
                            reason="PodFailurePolicy",
                            message="Container node for pod x failed",
                            at="2026-03-01T10:03:00Z",
                        )
                    ]
                )
            ],
            [pod(0, deleting=True), pod(1, node_name="n2", deleting=True)],
        ),
        State.RUNNING,
        CauseKind.NONE,
        Provenance.SCHEDULER,
        None,
        "",
    ),
    (
        "restarted-recovering",
        lambda: row(
            trainjob(),
            jobset([cond("RestartingJobSet", reason="Restarting", message="restarting")], 1),
            [
                job([builtin_cond("Failed", reason="BackoffLimitExceeded")], attempt=0, active=0),
                job(attempt=1, active=2),
            ],
            [
                pod(
                    0,
                    phase="Failed",
                    attempt=0,
                    conditions=[builtin_cond("DisruptionTarget", reason="PreemptionByScheduler")],
                ),
                pod(0, phase="Pending", attempt=1),
            ],
        ),
        State.RECOVERING,
        CauseKind.PREEMPTED,
        Provenance.SCHEDULER,
        None,
        "status.restarts=1",
    ),
]


@pytest.mark.parametrize(
    ("make", "state", "kind", "provenance", "exit_code", "said"),
    [pytest.param(*r[1:], id=r[0]) for r in ROWS],
)
def test_signal_rows(make, state, kind, provenance, exit_code, said) -> None:  # type: ignore[no-untyped-def]
    report = make()
    assert report.state is state
    assert report.cause.kind is kind
    assert report.cause.provenance is provenance
    assert report.cause.exit_code == exit_code
    assert said in report.cause.detail
    assert report.ref == f"{NS}/{NAME}"
    assert report.token == TOKEN


def test_node_lost_since_is_the_taint_time_inside_the_window() -> None:
    report = row(trainjob(), jobset(), [job()], [pod(0), pod(1, node_name="n2")], nodes("n2"))
    assert report.lost_since == datetime(2026, 3, 1, 10, 5, tzinfo=UTC)
    assert NOW - report.lost_since < timedelta(minutes=5)
    assert report.alive and report.cause.at == report.lost_since


def test_a_failure_target_of_any_reason_never_fences() -> None:
    # M3: BackoffLimitExceeded, PodFailurePolicy, DeadlineExceeded all pass through
    # FailureTarget (Kubernetes pkg/controller/job); none of them is node loss.
    for reason in ("BackoffLimitExceeded", "PodFailurePolicy", "DeadlineExceeded"):
        failing = job([builtin_cond("FailureTarget", reason=reason, at="2026-03-01T10:03:00Z")])
        report = row(trainjob(), jobset(), [failing], [pod(0, deleting=True)])
        assert report.cause.kind is not CauseKind.NODE_LOST, reason
        assert report.lost_since is None


@pytest.mark.parametrize("reason", ["DeletionByTaintManager", "DeletionByPodGC",
                                    "DeletionByDeviceTaintManager"])
def test_a_node_loss_disruption_fences_from_its_transition_time(reason: str) -> None:
    lost = pod(0, deleting=True, conditions=[
        builtin_cond("DisruptionTarget", reason=reason, at="2026-03-01T10:03:00Z")])
    report = row(trainjob(), jobset(), [job()], [lost])
    assert report.state is State.RUNNING and report.cause.kind is CauseKind.NODE_LOST
    assert report.lost_since == datetime(2026, 3, 1, 10, 3, tzinfo=UTC)
    assert reason in report.cause.detail


def test_lost_node_without_a_time_falls_back_to_now() -> None:
    n2 = node("n2")
    n2["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    schemas.validate("Node", n2)
    report = row(trainjob(), None, [], [pod(1, node_name="n2")], [n2])
    assert report.cause.kind is CauseKind.NODE_LOST
    assert report.lost_since == NOW


def test_finished_pod_on_lost_node_does_not_fence() -> None:
    report = row(
        trainjob(active=0),
        None,
        [],
        [pod(1, node_name="n2", phase="Succeeded", state=terminated("Completed", 0))],
        nodes("n2"),
    )
    assert report.cause.kind is not CauseKind.NODE_LOST


def test_jobset_restarts_become_executions_each_with_its_cause() -> None:
    report = row(
        trainjob([FAILED_JOBS], active=0),
        jobset([FAILED_JOBS], restarts=2),
        [job(attempt=2, active=0)],
        [
            pod(0, phase="Failed", attempt=0, state=terminated("OOMKilled", 137)),
            pod(0, phase="Failed", attempt=2, state=terminated("Error", 2)),
        ],
    )
    assert [e.index for e in report.executions] == [0, 1, 2]
    assert [e.cause.kind for e in report.executions if e.cause] == [
        CauseKind.OUT_OF_MEMORY,  # attempt 0: its pod is still there
        CauseKind.REQUEUED,  # attempt 1: evidence gone, the JobSet's words kept
        CauseKind.NON_ZERO_EXIT,  # the last attempt ended the object
    ]
    assert report.state is State.FAILED and report.cause.exit_code == 2
    assert "status.restarts=2" in report.executions[1].cause.detail  # type: ignore[union-attr]


def test_running_execution_is_open_and_names_its_nodes() -> None:
    report = row(trainjob(), jobset(), [job()], [pod(0), pod(1, node_name="n2")])
    (execution,) = report.executions
    assert execution.cause is None and execution.nodes == ("n1", "n2")
    assert execution.started_at == datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def test_gone_trainjob_is_cancelled_by_an_unknown_actor() -> None:
    report = report_gone(f"{NS}/{NAME}", TOKEN, None, NOW)
    assert report.state is State.CANCELLED
    assert report.cause.kind is CauseKind.CANCELLED
    assert report.cause.provenance is Provenance.ACTOR
    assert report.cause.actor is None
    assert "actor unknown" in report.cause.note
    assert report.cause.detail == ""  # the API server said nothing but "not found"


json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=12)
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
condition_like = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Complete", "Failed", "Suspended", "FailureTarget", "Weird"]),
        "status": st.sampled_from(["True", "False", "Unknown", 1]),
        "reason": st.text(max_size=20),
        "message": st.text(max_size=20),
        "lastTransitionTime": st.sampled_from([T0, "not a time", 5]),
    }
)


@settings(max_examples=120, deadline=None)
@given(
    tj_status=st.dictionaries(
        st.sampled_from(["conditions", "jobsStatus", "x"]),
        st.lists(condition_like | json_any, max_size=3) | json_any,
        max_size=3,
    ),
    junk=st.lists(json_any, max_size=3),
    pod_status=json_any,
)
# found by CI's Python 3.14 lane: a phase or reason that is a list (unhashable) in a set test
@example(tj_status={}, junk=[], pod_status={"phase": []})
@example(tj_status={}, junk=[], pod_status={"reason": [], "phase": "Failed"})
def test_malformed_input_never_crashes_and_never_guesses(tj_status, junk, pod_status) -> None:  # type: ignore[no-untyped-def]
    tj = {"metadata": {"name": NAME, "namespace": NS}, "status": tj_status}
    weird_pod = {"metadata": {"name": "p"}, "status": pod_status}
    report = report_trainjob(tj, junk[0] if junk else None, junk, [*junk, weird_pod], junk, NOW)
    assert report.state in State
    assert report.cause.kind in CauseKind
    if report.cause.kind is CauseKind.UNKNOWN:
        assert report.cause.detail  # the words are kept, never an empty unknown


@settings(max_examples=40, deadline=None)
@given(reason=st.from_regex(r"[A-Z][A-Za-z]{2,20}", fullmatch=True))
def test_unmapped_disruption_reason_is_unknown_with_its_words(reason: str) -> None:
    if reason in {
        "PreemptionByScheduler",
        "EvictionByEvictionAPI",
        "DeletionByTaintManager",
        "DeletionByPodGC",
        "TerminationByKubelet",
    }:
        return
    report = row(
        trainjob([FAILED_JOBS], active=0),
        None,
        [],
        [pod(0, phase="Failed", conditions=[builtin_cond("DisruptionTarget", reason=reason)])],
    )
    assert report.cause.kind is CauseKind.UNKNOWN
    assert reason in report.cause.detail


# --- the kubelet's own words (issue 12, item 11) -----------------------------------------------


def _kubelet_ended(message: str, *, as_status: str | None = None) -> Any:
    """A pod the kubelet ended with ``message``: as its DisruptionTarget condition, or (with
    ``as_status``) as the pod's status reason/message only."""
    p = pod(0, phase="Failed", conditions=[] if as_status else [builtin_cond(
        "DisruptionTarget", reason="TerminationByKubelet", message=message)])
    if as_status:
        p["status"]["reason"] = as_status
        p["status"]["message"] = message
    return row(trainjob([FAILED_JOBS], active=0), None, [], [p])


# Messages exactly as the kubelet writes them (pkg/kubelet/eviction/helpers.go: "The node was
# low on resource: %v. " + "Threshold quantity: %v, available: %v. " + container usage;
# nodeshutdown; preemption).
KUBELET_WORDS = [
    ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
     "Container node was using 2Gi, request is 1Gi, has larger consumption of memory. ",
     CauseKind.OUT_OF_MEMORY),
    ("The node was low on resource: memory.", CauseKind.OUT_OF_MEMORY),
    ("The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: "
     "512Mi. Container node was using 3Gi, request is 0, has larger consumption of "
     "ephemeral-storage. ", CauseKind.UNKNOWN),
    ("The node was low on resource: pids. ", CauseKind.UNKNOWN),
    ("The node was low on resource: inodes. Threshold quantity: 5%, available: 1%. ",
     CauseKind.UNKNOWN),
    ("The node had condition: [MemoryPressure]. ", CauseKind.UNKNOWN),
    ("Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ",
     CauseKind.UNKNOWN),
    ("Pod was terminated in response to imminent node shutdown.", CauseKind.NODE_LOST),
    ("Pod was preempted by Kubelet to accommodate a critical pod.", CauseKind.PREEMPTED),
    ("the node is on fire", CauseKind.UNKNOWN),
    ("memory of the node was fine; shutdown of something else", CauseKind.UNKNOWN),
    ("", CauseKind.UNKNOWN),
]


@pytest.mark.parametrize(("message", "kind"), KUBELET_WORDS,
                         ids=[m[:40] or "empty" for m, _ in KUBELET_WORDS])
def test_termination_by_kubelet_maps_the_kubelets_words_never_a_guess(
        message: str, kind: CauseKind) -> None:
    """"TerminationByKubelet with 'The node was low on resource: ephemeral-storage' (or
    pids, memory) is a resource eviction, not node-lost: map what the kubelet really says,
    else unknown with the words." """
    report = _kubelet_ended(message)
    assert report.state is State.FAILED
    assert report.cause.kind is kind
    assert report.cause.kind is not CauseKind.NODE_LOST or "node shutdown" in message
    assert "TerminationByKubelet" in report.cause.detail
    if message:
        assert f"message={message}" in report.cause.detail  # the words, whole and unescaped


@pytest.mark.parametrize(("message", "kind"), [
    (KUBELET_WORDS[0][0], CauseKind.OUT_OF_MEMORY),
    (KUBELET_WORDS[2][0], CauseKind.UNKNOWN),
    (KUBELET_WORDS[3][0], CauseKind.UNKNOWN),
])
def test_an_evicted_pods_status_words_map_the_same_way(message: str, kind: CauseKind) -> None:
    report = _kubelet_ended(message, as_status="Evicted")
    assert report.cause.kind is kind
    assert "reason=Evicted" in report.cause.detail and message in report.cause.detail


def test_a_pod_the_kubelet_preempted_for_a_critical_pod_is_preempted() -> None:
    report = _kubelet_ended("Preempted in order to admit critical pod", as_status="Preempting")
    assert report.cause.kind is CauseKind.PREEMPTED
    assert "reason=Preempting" in report.cause.detail


def test_jobset_restart_numbering_is_dispatchs_note_not_the_detail() -> None:
    report = row(
        trainjob(),
        jobset([], 1),
        [job(attempt=1, active=2)],
        [pod(0, phase="Pending", attempt=1)],
    )
    cause = report.executions[0].cause
    assert cause is not None and cause.kind is CauseKind.REQUEUED
    assert cause.note == "restart 1 of the JobSet"
    assert cause.detail == f"jobset {NAME}: status.restarts=1"


def test_a_message_with_quotes_and_a_newline_is_kept_verbatim() -> None:
    # S2: the scheduler's words, never escaped or re-quoted by dispatch.
    said = 'can\'t "evict"\nsecond line\\n'
    report = _kubelet_ended(said)
    assert f"message={said}" in report.cause.detail
    assert repr(said) not in report.cause.detail


@pytest.mark.parametrize(("metadata", "who"), [
    pytest.param({}, None, id="not-being-deleted"),
    pytest.param({"annotations": {"dispatch.io/stop": "stopped by dispatch"}}, None,
                 id="annotated-not-yet-deleted"),
    pytest.param({"deletionTimestamp": "2026-03-01T10:06:00Z",
                  "annotations": {"dispatch.io/stop": "stopped by dispatch"}}, "dispatch",
                 id="our-stop"),
    pytest.param({"deletionTimestamp": "2026-03-01T10:06:00Z"}, "unknown",
                 id="someone-elses-delete"),
    pytest.param({"deletionTimestamp": "2026-03-01T10:06:00Z", "annotations": "x"}, "unknown",
                 id="annotations-of-the-wrong-type"),
])
def test_who_deleted_a_trainjob(metadata: dict[str, object], who: str | None) -> None:
    assert deleted_by({"metadata": metadata}) == who


# -- issue 35: what the real controllers do ----------------------------------------------------


def crash_looping(count: int, last: dict[str, Any], now_state: dict[str, Any]) -> dict[str, Any]:
    """A pod restarted in place (JobSet's webhook defaults restartPolicy OnFailure)."""
    obj = pod(0)
    cs = obj["status"]["containerStatuses"][0]
    cs.update(restartCount=count, lastState=last, state=now_state, ready=False)
    schemas.validate("Pod", obj)
    return obj


def test_a_crash_loop_is_recovering_with_its_last_termination() -> None:
    # M1: pod Running, container waiting CrashLoopBackOff, restartCount rising.
    last = {"terminated": {"reason": "Error", "exitCode": 3, "finishedAt": T1,
                           "message": "ValueError: bad lr"}}
    looping = crash_looping(4, last, waiting("CrashLoopBackOff", "back-off 40s restarting"))
    report = row(trainjob(), jobset(), [job()], [looping])
    assert report.state is State.RECOVERING
    assert report.cause.kind is CauseKind.NON_ZERO_EXIT
    assert report.cause.provenance is Provenance.APPLICATION
    assert report.cause.exit_code == 3
    assert "restartCount=4" in report.cause.detail
    assert "CrashLoopBackOff" in report.cause.detail
    assert "ValueError: bad lr" in report.cause.detail
    assert "not by a dispatch rule" in report.cause.note


def test_a_crash_loop_after_an_oom_is_out_of_memory_and_after_a_start_error_launch_failed() -> None:
    oom = {"terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": T1}}
    start = {"terminated": {"reason": "StartError", "exitCode": 128, "finishedAt": T1}}
    for last, kind in ((oom, CauseKind.OUT_OF_MEMORY), (start, CauseKind.LAUNCH_FAILED)):
        report = row(trainjob(), jobset(), [job()],
                     [crash_looping(1, last, waiting("CrashLoopBackOff"))])
        assert (report.state, report.cause.kind) == (State.RECOVERING, kind)


def test_a_container_running_again_after_a_restart_in_place_says_so() -> None:
    last = {"terminated": {"reason": "Error", "exitCode": 3, "finishedAt": T1}}
    report = row(trainjob(), jobset(), [job()],
                 [crash_looping(2, last, {"running": {"startedAt": T1}})])
    assert report.state is State.RUNNING
    assert "restarted in place by Kubernetes 2 time(s)" in report.cause.note


@pytest.mark.parametrize("reason", ["CreateContainerError", "RunContainerError",
                                    "ErrImageNeverPull", "ImageInspectError"])
def test_waiting_reasons_that_cannot_start_a_container_are_launch_failed(reason: str) -> None:
    # M6: the kubelet's words (pkg/kubelet/images, kuberuntime, container/sync_result.go).
    stuck = pod(0, phase="Pending", state=waiting(reason, "the runtime's words"))
    report = row(trainjob(), jobset(), [job()], [stuck])
    assert report.cause.kind is CauseKind.LAUNCH_FAILED
    assert reason in report.cause.detail and "the runtime's words" in report.cause.detail


def test_a_deadline_exceeded_condition_type_is_not_read() -> None:
    # M8: DeadlineExceeded is a reason of Failed, never a condition type.
    odd = trainjob([cond("DeadlineExceeded", reason="DeadlineExceeded")])
    report = row(odd, jobset(), [job()], [pod(0)])
    assert report.state is State.RUNNING


def test_a_scheduler_error_is_pending_unknown_with_its_words() -> None:
    # M9: PodScheduled=False reason SchedulerError (k8s.io/api core/v1 PodReasonSchedulerError).
    waiting_pod = pod(0, phase="Pending", scheduled=False, conditions=[builtin_cond(
        "PodScheduled", status="False", reason="SchedulerError",
        message="nodeaffinity: parse error")])
    report = row(trainjob(), jobset(), [job()], [waiting_pod])
    assert (report.state, report.cause.kind) == (State.PENDING, CauseKind.UNKNOWN)
    assert "nodeaffinity: parse error" in report.cause.detail


def test_a_pod_the_kubelet_terminated_for_node_shutdown_is_node_lost() -> None:
    # M9: the pod's status reason "Terminated" (kubelet nodeshutdown_manager.go).
    ended = pod(0, phase="Failed", state=terminated("Error", 143))
    ended["status"].update(reason="Terminated",
                           message="Pod was terminated in response to imminent node shutdown.")
    schemas.validate("Pod", ended)
    report = row(trainjob([FAILED_JOBS], active=0), jobset([FAILED_JOBS]), [job(active=0)],
                 [ended])
    assert (report.state, report.cause.kind) == (State.FAILED, CauseKind.NODE_LOST)


def _restarted_job(attempt: int, active: int) -> dict[str, Any]:
    obj = job(active=active)
    obj["metadata"]["name"] = f"{NAME}-node-0-j{attempt}"
    obj["metadata"]["labels"].update({
        "jobset.sigs.k8s.io/job-restart-attempt": str(attempt),
        "jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0"})
    return obj


def test_jobset_restart_job_attempts_are_past_executions() -> None:
    # M7: RestartJob bumps job-restart-attempt (JobSet v0.12.0), not status.restarts.
    old = pod(0, phase="Failed", state=terminated("Error", 3))
    old["metadata"]["labels"].update({
        "jobset.sigs.k8s.io/job-restart-attempt": "0",
        "jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0"})
    new = pod(1)
    new["metadata"]["labels"].update({
        "jobset.sigs.k8s.io/job-restart-attempt": "1",
        "jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0"})
    report = row(trainjob(), jobset(), [_restarted_job(1, 1)], [old, new])
    assert [e.index for e in report.executions] == [0, 1]
    first = report.executions[0].cause
    assert first is not None and first.kind is CauseKind.NON_ZERO_EXIT and first.exit_code == 3
    assert "RestartJob 1" in first.note
    assert report.state is State.RUNNING and report.executions[1].cause is None


def test_our_gate_is_gated_a_persons_suspend_is_a_hold_not_our_gate() -> None:
    # Seen on the real control plane (issue 35, scenario 7): a person's `kubectl patch
    # trainjob … suspend: true` on a running job was read as our own gate, so `status` said
    # pending (waiting for a gate dispatch would open) instead of held.
    suspended = [cond("Suspended", reason="Suspended", message="TrainJob is suspended")]
    ours = row(trainjob(suspended, active=0, suspend=True, gate="closed"))
    assert ours.state is State.HELD and ours.gated
    assert ours.cause.provenance is Provenance.ACTOR and ours.cause.actor == "dispatch"
    persons = row(trainjob(suspended, active=0, suspend=True, gate="open"))
    assert persons.state is State.HELD and not persons.gated
    assert persons.cause.kind is CauseKind.HELD
    assert persons.cause.provenance is Provenance.SCHEDULER
    assert "TrainJob is suspended" in persons.cause.detail


def test_an_end_the_pod_tells_names_the_node_it_ran_on() -> None:
    # Issue 46: a real cgroup OOM (or any exit) is read off one pod; its cause names the node
    # the kubelet that wrote those words runs on, beside the pod and container.
    report = row(trainjob([FAILED_JOBS], active=0), None, [], [
        pod(0, phase="Failed", state=terminated("OOMKilled", 137), node_name="real-node-2"),
    ])
    assert report.cause.kind is CauseKind.OUT_OF_MEMORY and report.cause.exit_code == 137
    assert "(node real-node-2) container node: terminated reason=OOMKilled exitCode=137" in \
        report.cause.detail, report.cause.detail


def test_a_crash_loop_between_restarts_on_a_real_kubelet_is_recovering() -> None:
    # Seen on the real nodes (issue 46): for most of the back-off the kubelet shows the
    # container terminated (its last exit) in a pod still Running, restartCount counting the
    # restarts so far; CrashLoopBackOff shows only for a moment before the next start. Read
    # running before (goodput counted the back-off as running).
    now = terminated("Error", 3)
    now["terminated"]["message"] = "ValueError: loss is nan"
    looping = crash_looping(1, terminated("Error", 3, at=T0), now)
    looping["spec"]["restartPolicy"] = "OnFailure"
    report = row(trainjob(), jobset(), [job()], [looping])
    assert report.state is State.RECOVERING, report
    assert (report.cause.kind, report.cause.exit_code) == (CauseKind.NON_ZERO_EXIT, 3)
    assert report.cause.provenance is Provenance.APPLICATION
    assert "restartCount=1" in report.cause.detail and "ValueError: loss is nan" in \
        report.cause.detail, report.cause
    assert "restarted in place by Kubernetes" in report.cause.note, report.cause
    # its first crash, before the kubelet's first restart (restartCount 0): the same
    first = crash_looping(0, {}, now)
    first["status"]["containerStatuses"][0].pop("lastState")
    first["spec"]["restartPolicy"] = "OnFailure"
    assert row(trainjob(), jobset(), [job()], [first]).state is State.RECOVERING
    # under restartPolicy Never nothing restarts it (its pod ends Failed): not a crash loop
    never = crash_looping(1, terminated("Error", 3, at=T0), now)
    never["spec"]["restartPolicy"] = "Never"
    assert row(trainjob(), jobset(), [job()], [never]).state is not State.RECOVERING
    # nor once the pod is being deleted (the Job's backoffLimit reached: its end follows)
    deleting = crash_looping(1, terminated("Error", 3, at=T0), now)
    deleting["spec"]["restartPolicy"] = "OnFailure"
    deleting["metadata"]["deletionTimestamp"] = T1
    assert row(trainjob(), jobset(), [job()], [deleting]).state is not State.RECOVERING


def test_a_trainjob_failed_while_its_pods_still_go_is_not_ended_until_they_are() -> None:
    # Seen on the real nodes (issue 46): at its deadline Trainer says Failed
    # (DeadlineExceeded) and deletes the JobSet; the pod gets SIGTERM and its grace, and a
    # process deaf to SIGTERM ran 30 s more while dispatch had committed failed (a
    # replacement's gate, S11, would have opened beside it).
    deadline = cond("Failed", reason="DeadlineExceeded", message="TrainJob exceeded its deadline")
    going = pod(0, deleting=True)  # Running, Terminating
    report = row(trainjob([deadline], active=0), None, [], [going])
    assert (report.state, report.cause.kind) == (State.RUNNING, CauseKind.NONE), report
    assert report.alive and "not yet gone" in report.cause.note, report.cause
    assert going["metadata"]["name"] in report.cause.note
    # once its pod has ended (killed at the grace's end), the end is read, as before
    ended = pod(0, phase="Failed", deleting=True, state=terminated("Error", 137))
    report = row(trainjob([deadline], active=0), None, [], [ended])
    assert (report.state, report.cause.kind) == (State.FAILED, CauseKind.TIME_LIMIT), report
    assert report.executions[-1].error is None
