"""A container that ends because its pod was deleted (issue 46, real containers): the kubelet
sends SIGTERM and, after the pod's grace, SIGKILL, so the container ends 143 (its own handler)
or 137. That end is the deletion's, never the application's own failure: a person's
``kubectl delete pod`` of one rank, or the Job controller deleting a crash-looping pod whose
last restart was running when the Job reached its backoffLimit (the earlier failure, in
``lastState``, is why the Job failed). Pure."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from dispatch.backends.kubeflow.mapping import report_trainjob  # noqa: E402
from dispatch.backends.kubeflow.objects import (  # noqa: E402
    JOBSET_NAME_LABEL,
    MANAGED_LABEL,
    TOKEN_LABEL,
)
from dispatch.backends.kubeflow.pod_errors import first_pod_error  # noqa: E402
from dispatch.backends.kubeflow.pod_evidence import evidence_of, with_evidence  # noqa: E402
from dispatch.backends.kubeflow.pods import carry_deletion, pod_end_signals  # noqa: E402
from dispatch.core.model import CauseKind, Provenance, State  # noqa: E402
from kube_fake import schemas  # noqa: E402
from kube_fake.trainer import builtin_cond, cond  # noqa: E402

NS, NAME = "team", "tj"
STARTED = "2026-12-07T10:00:00Z"
CRASHED = "2026-12-07T10:00:40Z"  # the last failure of a crash loop
ASKED = "2026-12-07T10:01:00Z"  # the deletion was asked (deletionTimestamp less the grace)
DEADLINE = "2026-12-07T10:01:30Z"  # deletionTimestamp: asked + 30 s of grace
KILLED = "2026-12-07T10:01:30Z"  # SIGKILL at the grace's end: 137
TERMED = "2026-12-07T10:01:01Z"  # its own SIGTERM handler: 143


def _pod(rank: int, state: dict[str, Any], *, last: dict[str, Any] | None = None,
         restarts: int = 0, deleting: str | None = DEADLINE) -> dict[str, Any]:
    cs: dict[str, Any] = {"name": "node", "ready": False, "restartCount": restarts,
                          "image": "real:1", "imageID": "sha256:a", "state": state}
    if last is not None:
        cs["lastState"] = last
    md: dict[str, Any] = {"name": f"{NAME}-node-0-{rank}-x", "namespace": NS,
                          "uid": f"u{rank}", "creationTimestamp": STARTED,
                          "labels": {JOBSET_NAME_LABEL: NAME,
                                     "batch.kubernetes.io/job-completion-index": str(rank)}}
    if deleting is not None:
        md["deletionTimestamp"] = deleting
        md["deletionGracePeriodSeconds"] = 30
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": md,
           "spec": {"nodeName": f"real-node-{rank + 1}"},
           "status": {"phase": "Failed", "startTime": STARTED, "containerStatuses": [cs]}}
    schemas.validate("Pod", obj)
    return obj


def _ended(code: int, at: str, message: str = "", reason: str = "Error") -> dict[str, Any]:
    term: dict[str, Any] = {"reason": reason, "exitCode": code, "startedAt": STARTED,
                            "finishedAt": at}
    if message:
        term["message"] = message
    return {"terminated": term}


def _failed_trainjob() -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": NAME, "namespace": NS,
                     "labels": {MANAGED_LABEL: "true", TOKEN_LABEL: "j.1"},
                     "annotations": {"dispatch.io/gate": "open"}},
        "spec": {"runtimeRef": {"name": "real"}, "trainer": {"numNodes": 2}},
        "status": {"conditions": [cond("Failed", reason="FailedJobs",
                                       message="jobset failed: job tj-node-0", at=KILLED)]},
    }
    schemas.validate("TrainJob", obj)
    return obj


def _job() -> dict[str, Any]:
    obj = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": f"{NAME}-node-0", "namespace": NS,
                        "labels": {JOBSET_NAME_LABEL: NAME}},
           "status": {"failed": 1, "conditions": [builtin_cond(
               "Failed", reason="BackoffLimitExceeded",
               message="Job has reached the specified backoff limit", at=KILLED)]}}
    schemas.validate("Job", obj)
    return obj


def _read(pods: list[dict[str, Any]]) -> Any:
    return report_trainjob(_failed_trainjob(), None, [_job()], pods, [], _time(KILLED))


def _time(text: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_crash_loops_last_restart_killed_by_the_jobs_end_is_read_from_its_failure() -> None:
    # restartPolicy OnFailure, backoffLimit 2: the Job fails when the second restart begins
    # (restartCount 2), while that run is running; the Job controller deletes the pod and the
    # kubelet kills it (Python as PID 1 ignores SIGTERM: 137 after the grace). The failure is
    # the crash loop's exit 3 in lastState, not the kill.
    looping = _pod(0, _ended(137, KILLED), restarts=2,
                   last=_ended(3, CRASHED, "ValueError: loss is nan"))
    for pods in ([looping], [evidence_of(looping)]):
        report = _read(pods)  # type: ignore[list-item]
        assert (report.state, report.cause.kind) == (State.FAILED, CauseKind.NON_ZERO_EXIT)
        assert report.cause.exit_code == 3, report.cause
        assert report.cause.provenance is Provenance.APPLICATION
        error = report.executions[-1].error
        assert error is not None and error.message == "ValueError: loss is nan", error
        assert error.exit_code == 3


def test_a_rank_a_person_deleted_is_not_the_applications_failure() -> None:
    # A person's `kubectl delete pod` of rank 0 (its SIGTERM handler exits 143); the Job
    # (backoffLimit 0) fails and its controller deletes rank 1 later. Neither 143 is the
    # application's own end: unknown, the deletion in the words, no application error.
    deleted = _pod(0, _ended(143, TERMED))
    peer = _pod(1, _ended(143, "2026-12-07T10:01:05Z"), deleting="2026-12-07T10:01:34Z")
    for pods in ([deleted, peer], [evidence_of(deleted), evidence_of(peer)]):
        report = _read(pods)  # type: ignore[list-item]
        assert (report.state, report.cause.kind) == (State.FAILED, CauseKind.UNKNOWN), report
        assert report.cause.provenance is not Provenance.APPLICATION
        assert report.cause.exit_code == 143
        assert f"pod {NS}/{NAME}-node-0-0-x" in report.cause.detail, report.cause
        assert f"deletionTimestamp={DEADLINE}" in report.cause.detail, report.cause
        assert "deleted" in report.cause.note, report.cause
        assert report.executions[-1].error is None
    # a SIGKILL at the grace's end (PID 1 without a SIGTERM handler) reads the same
    killed = _pod(0, _ended(137, KILLED))
    report = _read([killed])
    assert (report.cause.kind, report.cause.exit_code) == (CauseKind.UNKNOWN, 137)
    assert "deleted" in report.cause.note and report.executions[-1].error is None
    assert first_pod_error([killed]) is None


def test_a_container_that_failed_before_its_pod_was_deleted_is_still_its_own_failure() -> None:
    # restartPolicy Never: rank 0 exits 3, then the Job controller deletes the failed pod.
    failed = _pod(0, _ended(3, CRASHED, "ValueError: bad batch"))
    (sig,) = pod_end_signals(failed)
    assert (sig[2].kind, sig[2].exit_code) == (CauseKind.NON_ZERO_EXIT, 3)
    report = _read([failed, _pod(1, _ended(143, TERMED))])
    assert (report.cause.kind, report.cause.exit_code) == (CauseKind.NON_ZERO_EXIT, 3)
    error = report.executions[-1].error
    assert error is not None and error.message == "ValueError: bad batch"


def test_an_oom_kill_during_the_deletions_grace_is_still_out_of_memory() -> None:
    oom = _pod(0, _ended(137, TERMED, reason="OOMKilled"))
    assert _read([oom]).cause.kind is CauseKind.OUT_OF_MEMORY


def test_a_pod_not_being_deleted_keeps_137_as_unknown_without_a_deletion_note() -> None:
    # a SIGKILL from anywhere (S3: never guessed as the application's own exit)
    killed = _pod(0, _ended(137, KILLED), deleting=None)
    report = _read([killed])
    assert (report.cause.kind, report.cause.exit_code) == (CauseKind.UNKNOWN, 137)
    assert "deleted" not in (report.cause.note or "")


def test_the_kubelets_last_delete_does_not_hide_when_the_deletion_was_asked() -> None:
    # Seen on the real nodes: once the kubelet has ended the container it deletes the pod
    # again with grace 0, which moves deletionTimestamp to that moment, after the container's
    # end; only the version before says when the deletion was asked. The informer carries it
    # from version to version (carry_deletion), and so does the evidence kept across looks.
    asked = _pod(0, {"running": {"startedAt": STARTED}})  # deletionTimestamp = ask + 30 s
    final = _pod(0, _ended(143, TERMED), deleting="2026-12-07T10:01:02Z")
    final["metadata"]["deletionGracePeriodSeconds"] = 0
    schemas.validate("Pod", final)
    assert _read([final]).cause.kind is CauseKind.NON_ZERO_EXIT  # alone, it cannot tell
    carried = carry_deletion(asked, final)
    for pods in ([carried], [evidence_of(carried)]):
        report = _read(pods)  # type: ignore[list-item]
        assert (report.cause.kind, report.cause.exit_code) == (CauseKind.UNKNOWN, 143), report
        assert "deleted" in report.cause.note and report.executions[-1].error is None
    # across looks: the evidence of the last look keeps the first look's ask
    _, kept = with_evidence([_pod(0, _ended(143, TERMED))], {})
    pods, kept = with_evidence([final], kept)
    assert _read(pods).cause.kind is CauseKind.UNKNOWN
    # a version that never showed a deletion carries nothing
    assert carry_deletion(_pod(0, {"running": {"startedAt": STARTED}}, deleting=None),
                          final) is final


def test_a_crash_in_the_second_its_pod_is_deleted_is_still_the_crash() -> None:
    # The Job controller deletes a crash-looping pod in the very second its container exits 3
    # (its backoffLimit reached): Kubernetes' whole seconds cannot order the two, and the
    # deletion answered the crash; only the kill's own codes (143, 137) read as the
    # deletion's end then (seen on the testbed's KWOK stages, which keep that exit as the
    # state; a real kubelet shows it between two restarts).
    crashed = _pod(0, _ended(3, ASKED, "ValueError: loss is nan"), restarts=6,
                   last=_ended(3, ASKED, "ValueError: loss is nan"))
    for pods in ([crashed], [evidence_of(crashed)]):
        report = _read(pods)  # type: ignore[list-item]
        assert (report.cause.kind, report.cause.exit_code) == (CauseKind.NON_ZERO_EXIT, 3), \
            report.cause
        error = report.executions[-1].error
        assert error is not None and error.message == "ValueError: loss is nan"
    # the kill's own code in that second is the deletion's
    report = _read([_pod(0, _ended(143, ASKED))])
    assert (report.cause.kind, report.cause.exit_code) == (CauseKind.UNKNOWN, 143)
    # a last state ended before the current run began: never by this deletion
    waiting = _pod(0, {"waiting": {"reason": "CrashLoopBackOff"}}, restarts=6,
                   last=_ended(143, KILLED))
    assert _read([waiting]).cause.kind is CauseKind.NON_ZERO_EXIT


TORCHRUN_TERMED = (
    "Traceback (most recent call last):\n  File \"/v/bin/torchrun\", line 8, in <module>\n"
    "    sys.exit(main())\n"
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15\n")


def test_torchrun_stopped_in_the_second_its_pod_is_deleted_is_the_deletions_end() -> None:
    # A person's `kubectl delete pod` of a torchrun rank: its agent gets SIGTERM and exits 1
    # (its SignalException), in the very second the deletion was asked. Its own words say
    # what stopped it: the deletion's end, never the application's failure.
    stopped = _pod(0, _ended(1, ASKED, TORCHRUN_TERMED))
    for pods in ([stopped], [evidence_of(stopped)]):
        report = _read(pods)  # type: ignore[list-item]
        assert (report.cause.kind, report.cause.exit_code) == (CauseKind.UNKNOWN, 1), report
        assert "deleted" in report.cause.note and report.executions[-1].error is None
    # another signal, or no deletion, or an earlier end: the exit stands as the application's
    for pod in (_pod(0, _ended(1, ASKED, TORCHRUN_TERMED.replace("signal: 15", "signal: 2"))),
                _pod(0, _ended(1, ASKED, TORCHRUN_TERMED), deleting=None),
                _pod(0, _ended(1, CRASHED, TORCHRUN_TERMED))):
        report = _read([pod])
        assert (report.cause.kind, report.cause.exit_code) == (CauseKind.NON_ZERO_EXIT, 1), \
            report.cause
