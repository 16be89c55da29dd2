"""Issue 35: the pure parts of what the real controllers leave behind. A pod's failure evidence
kept past its deletion (M2), and the Events that alone say a TrainJob's objects cannot be made
(M5)."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from dispatch.backends.kubeflow.events import creation_failure  # noqa: E402
from dispatch.backends.kubeflow.gone import report_gone, report_pods_left  # noqa: E402
from dispatch.backends.kubeflow.mapping import report_trainjob  # noqa: E402
from dispatch.backends.kubeflow.pod_evidence import evidence_of, with_evidence  # noqa: E402
from dispatch.backends.kubeflow.pods import is_evidence, pod_end_signals  # noqa: E402
from dispatch.core.model import CauseKind, State  # noqa: E402
from kube_fake import schemas  # noqa: E402
from kube_fake.trainer import T1, event  # noqa: E402

NS = "team"


def a_pod(uid: str, state: dict[str, Any], *, last: dict[str, Any] | None = None,
          restarts: int = 0, phase: str = "Running") -> dict[str, Any]:
    cs: dict[str, Any] = {"name": "node", "ready": False, "restartCount": restarts,
                          "image": "t:1", "imageID": "sha256:a", "state": state}
    if last is not None:
        cs["lastState"] = last
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"p-{uid}", "namespace": NS, "uid": uid,
                        "labels": {"jobset.sigs.k8s.io/jobset-name": "tj"}},
           "spec": {"nodeName": "n1"},
           "status": {"phase": phase, "containerStatuses": [cs]}}
    schemas.validate("Pod", obj)
    return obj


T1_DT = datetime.fromisoformat(T1.replace("Z", "+00:00"))

EXIT3 = {"terminated": {"reason": "Error", "exitCode": 3, "finishedAt": T1,
                        "message": "ValueError: bad lr"}}


def test_a_crash_looping_pods_last_termination_is_kept_as_an_ended_pod() -> None:
    looping = a_pod("u1", {"waiting": {"reason": "CrashLoopBackOff"}}, last=EXIT3, restarts=5)
    kept = evidence_of(looping)
    assert kept is not None and kept["status"]["phase"] == "Failed"
    (sig,) = pod_end_signals(kept)
    assert sig[2].kind is CauseKind.NON_ZERO_EXIT and sig[2].exit_code == 3
    assert "ValueError: bad lr" in sig[2].detail
    assert kept["metadata"]["labels"] == looping["metadata"]["labels"]


def test_kept_evidence_is_told_apart_from_a_pod_that_is_still_there() -> None:
    # The S11 fence after a background delete counts the pods still there, never the
    # evidence kept of deleted ones (else a cancelled job stays alive for ever).
    looping = a_pod("u1", {"waiting": {"reason": "CrashLoopBackOff"}}, last=EXIT3, restarts=5)
    kept = evidence_of(looping)
    assert kept is not None and is_evidence(kept) and not is_evidence(looping)
    gone = report_gone("ns/tj", "j.1", "dispatch", T1_DT)
    left = report_pods_left(gone, [looping])
    assert left.alive and looping["metadata"]["name"] in left.cause.note


def test_a_healthy_pod_leaves_no_evidence() -> None:
    assert evidence_of(a_pod("u1", {"running": {"startedAt": T1}})) is None
    done = {"terminated": {"reason": "Completed", "exitCode": 0, "finishedAt": T1}}
    assert evidence_of(a_pod("u2", done, phase="Succeeded")) is None


def test_evidence_outlives_the_pod_and_the_newest_look_wins() -> None:
    pod = a_pod("u1", EXIT3, phase="Failed")
    shown, kept = with_evidence([pod], {})
    assert shown == [pod] and set(kept) == {"u1"}
    shown, kept_after = with_evidence([], kept)  # the Job controller deleted it
    assert [p["metadata"]["uid"] for p in shown] == ["u1"] and kept_after == kept
    assert pod_end_signals(shown[0])[0][2].exit_code == 3


@settings(max_examples=60, deadline=None)
@given(codes=st.lists(st.integers(min_value=0, max_value=255), min_size=1, max_size=6),
       gone=st.sets(st.integers(min_value=0, max_value=5)))
def test_every_bad_exit_seen_once_is_still_mapped_after_its_pod_is_gone(
    codes: list[int], gone: set[int]
) -> None:
    pods = [a_pod(f"u{i}", {"terminated": {"reason": "Error", "exitCode": c, "finishedAt": T1}},
                  phase="Failed" if c else "Succeeded") for i, c in enumerate(codes)]
    _, kept = with_evidence(pods, {})
    left = [p for i, p in enumerate(pods) if i not in gone]
    shown, _ = with_evidence(left, kept)
    seen = sorted(s[2].exit_code for p in shown for s in pod_end_signals(p)
                  if s[2].exit_code is not None)
    assert seen == sorted(c for c in codes if c)


def trainjob(uid: str = "tj-uid") -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tj", "namespace": NS, "uid": uid},
            "spec": {"runtimeRef": {"name": "torch"}}, "status": {}}


def jobset(uid: str = "js-uid") -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "tj", "namespace": NS, "uid": uid}, "status": {}}


TJ_FAILED = "TrainJobResourcesCreationFailed"
JS_FAILED = "JobCreationFailed"


@pytest.mark.parametrize(("events", "js", "jobs", "expected"), [
    # the TrainJob's Event holds while it has no JobSet
    (lambda: [event(NS, trainjob(), TJ_FAILED, "webhook denied")], None, [], "webhook denied"),
    (lambda: [event(NS, trainjob(), TJ_FAILED, "webhook denied")], jobset(), [], None),
    # the JobSet's Event holds while it has no Job
    (lambda: [event(NS, jobset(), JS_FAILED, "quota exceeded")], jobset(), [], "quota exceeded"),
    (lambda: [event(NS, jobset(), JS_FAILED, "quota exceeded")], jobset(), [{"kind": "Job"}],
     None),
    # an Event about an earlier object of the same name (another uid) is not this one's
    (lambda: [event(NS, trainjob("old"), TJ_FAILED, "old words")], None, [], None),
    # other reasons are not read
    (lambda: [event(NS, trainjob(), "FailedScheduling", "0/2 nodes")], None, [], None),
    # the newest wins
    (lambda: [event(NS, trainjob(), TJ_FAILED, "first", at="2026-03-01T10:01:00Z"),
              {**event(NS, trainjob(), TJ_FAILED, "second", at="2026-03-01T10:02:00Z"),
               "metadata": {"name": "second", "namespace": NS}}], None, [], "second"),
])
def test_creation_failure_events(events, js, jobs, expected) -> None:  # type: ignore[no-untyped-def]
    cause = creation_failure(trainjob(), js, jobs, events())
    if expected is None:
        assert cause is None
    else:
        assert cause is not None and cause.kind is CauseKind.LAUNCH_FAILED
        assert expected in cause.detail


def test_a_creation_failure_event_makes_the_report_pending_launch_failed() -> None:
    from datetime import UTC, datetime
    evs = [event(NS, trainjob(), TJ_FAILED, "TrainJob resources reconciliation failed: boom")]
    report = report_trainjob(trainjob(), None, [], [], [], datetime(2026, 3, 1, tzinfo=UTC), evs)
    assert (report.state, report.cause.kind) == (State.PENDING, CauseKind.LAUNCH_FAILED)
    assert "boom" in report.cause.detail


@settings(max_examples=80, deadline=None)
@given(junk=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                         lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8),
                                                                              c, max_size=4),
                         max_leaves=12))
def test_malformed_events_and_pods_never_crash(junk: Any) -> None:
    # (keys of at most 8 characters: never an Event's involvedObject, never a guess from one)
    assert creation_failure(trainjob(), None, [], [junk]) is None
    kept = evidence_of(junk)
    assert kept is None or kept["status"]["phase"] == "Failed"
    shown, _ = with_evidence([junk], {})
    assert shown[0] is junk


def test_kept_evidence_says_the_pod_started_so_an_ended_run_still_names_its_node() -> None:
    # An ended execution names the nodes its pods started on (status.startTime); the Job
    # controller deletes a failed pod before the end is said, so its evidence carries it.
    looping = a_pod("u1", {"waiting": {"reason": "CrashLoopBackOff"}}, last=EXIT3, restarts=5)
    looping["status"]["startTime"] = T1
    kept = evidence_of(looping)
    assert kept is not None and kept["status"]["startTime"] == T1
