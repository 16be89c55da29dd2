"""How the recorded scenarios end, replayed (tests/fixtures/k8s-recorded/, the helpers of
test_kubeflow_replay.py, through both ways discover() reads: lists and the informer): what an
end that is not the application's carries, what a job that never ran reads while its pods go
after dispatch's cancel, what a gang held back by one pod says of the nodes its placed pods
hold, and a pod the Job controller replaced."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from test_kubeflow_replay import Path_, before_the_stop, kinds, recorded, replay

from dispatch.backends.kubeflow.gone import report_gone, report_pods_left
from dispatch.backends.kubeflow.pod_evidence import evidence_of
from dispatch.backends.kubeflow.pods import replaced_pods
from dispatch.core.model import CauseKind, State


def test_a_time_limit_end_carries_no_application_error(path: Path_) -> None:
    # The deadline's kill is how Kubernetes ended the pods, not the application's error:
    # before, the end showed "killed by signal 15 (SIGTERM)" as its own.
    final = replay("time-limit", path)[-1]
    assert final is not None and final.cause.kind is CauseKind.TIME_LIMIT
    assert [e.error for e in final.executions] == [None] * len(final.executions), final
    # the pods did end by the kill: recorded on a real node, whose process (Python as PID 1,
    # no SIGTERM handler) ignored the SIGTERM and got the kubelet's SIGKILL at the grace's end
    # (137; KWOK, which recorded it before, always says 143)
    codes = {t["exitCode"] for t in terminations("time-limit")}
    assert 137 in codes, codes
    # and the end was read only once the pod had ended (issue 46): no look read the job
    # failed while the killed process still ran
    readings = replay("time-limit", path)
    first = next(i for i, r in enumerate(readings) if r is not None and r.state.terminal)
    assert all("not yet gone" not in (r.cause.note or "") for r in readings[first:]
               if r is not None)
    assert any(r is not None and "not yet gone" in r.cause.note for r in readings[:first])


def test_a_preempted_end_carries_no_application_error(path: Path_) -> None:
    final = replay("preempted", path)[-1]
    assert final is not None and final.cause.kind is CauseKind.PREEMPTED
    assert all(e.error is None for e in final.executions), final


def test_an_application_end_still_carries_its_error(path: Path_) -> None:
    final = replay("exit3-never", path)[-1]
    assert final is not None and final.executions[-1].error is not None


def terminations(scenario: str) -> list[dict[str, Any]]:
    return [
        cs["state"]["terminated"]
        for ln in recorded(scenario)
        if ln["kind"] == "Pod"
        for cs in (ln["object"].get("status") or {}).get("containerStatuses") or []
        if "terminated" in (cs.get("state") or {})
    ]


def after_the_stop(scenario: str, path: Path_) -> list[tuple[State, CauseKind] | None]:
    readings = replay(scenario, path)
    return kinds(readings[len(before_the_stop(scenario, readings)):])


def test_a_job_that_never_started_reads_pending_while_its_pods_go(path: Path_) -> None:
    # dispatch cancels a job whose image cannot be pulled: the TrainJob is gone at once, its
    # pod a moment later. It never ran, so it never reads running (before: running).
    seen = after_the_stop("image-pull", path)
    assert seen[-1] == (State.CANCELLED, CauseKind.CANCELLED), seen
    assert set(seen[:-1]) == {(State.PENDING, CauseKind.NONE)}, seen


def test_a_gang_held_back_reads_pending_until_its_placed_pods_are_gone(path: Path_) -> None:
    # Four of five pods ran on KWOK while the fifth was unschedulable; the job as a whole never
    # started, also after the unschedulable pod is deleted and the four remain.
    seen = after_the_stop("unschedulable", path)
    assert seen[-1] == (State.CANCELLED, CauseKind.CANCELLED), seen
    assert set(seen[:-1]) == {(State.PENDING, CauseKind.NONE)}, seen


def test_a_gang_held_back_says_which_nodes_its_placed_pods_hold(path: Path_) -> None:
    readings = replay("unschedulable", path)
    waiting = [r for r in before_the_stop("unschedulable", readings)
               if r is not None and r.cause.kind is CauseKind.NO_CAPACITY]
    assert waiting, kinds(readings)
    last = waiting[-1]
    assert last.state is State.PENDING
    assert ("4 of 5 pods placed, holding kwok-node-1, kwok-node-2, kwok-node-3, kwok-node-4"
            in last.cause.note), last.cause.note
    assert "JobSet does not schedule a job's pods as a gang" in last.cause.note
    assert "Unschedulable" in last.cause.detail  # the scheduler's words, untouched


def pods_in_phase(scenario: str, phase: str) -> list[dict[str, Any]]:
    """Each pod of the recording as it was last seen in ``phase``."""
    out: dict[str, dict[str, Any]] = {}
    for ln in recorded(scenario):
        if ln["kind"] == "Pod" and (ln["object"].get("status") or {}).get("phase") == phase:
            out[ln["object"]["metadata"]["name"]] = ln["object"]
    return list(out.values())


def test_a_process_that_never_saw_the_trainjob_reads_its_pods() -> None:
    # `dispatch status` in a fresh process: no earlier reading; pods that never left Pending
    # read pending, pods that ran read running (S11 either way: alive until gone).
    at = datetime.fromisoformat(recorded("image-pull")[-1]["at"])
    gone = report_gone("dispatch/x", "t", "dispatch", at)
    pulling = pods_in_phase("image-pull", "Pending")
    ran = pods_in_phase("success", "Running")
    assert pulling and ran
    assert report_pods_left(gone, pulling).state is State.PENDING
    assert report_pods_left(gone, ran).state is State.RUNNING
    # what this process saw of the job wins over the pods' phases
    assert report_pods_left(gone, ran, State.PENDING).state is State.PENDING
    assert report_pods_left(gone, pulling, State.RUNNING).state is State.RUNNING
    left = report_pods_left(gone, pulling)
    assert left.cause.kind is CauseKind.NONE and "not yet gone" in left.cause.note


def test_a_pod_the_job_controller_replaced_is_a_native_restart_in_the_record(path: Path_) -> None:
    # The stock runtime (backoffLimit 6): the taint manager evicts the pod from the lost node
    # and the Job controller starts a replacement on another node at once, while the old pod
    # is still Terminating there. Before, the replacement was not in the report at all.
    readings = replay("node-lost", path)
    live = [r for r in before_the_stop("node-lost", readings) if r is not None]
    both = [r for r in live if len(r.executions) == 2]
    assert both, [len(r.executions) for r in live]
    assert all(len(r.executions) == 1 for r in live[:live.index(both[0])])
    first, now = both[-1].executions
    assert first.cause is not None and first.cause.kind is CauseKind.NODE_LOST, first
    assert "DeletionByTaintManager" in first.cause.detail
    assert "a restart Kubernetes made" in first.cause.note and "not a dispatch rule" in (
        first.cause.note)
    assert first.nodes == ("kwok-node-1",) and first.ended_at == first.cause.at
    assert first.started_at is not None and now.started_at is not None
    assert first.started_at < first.ended_at <= now.started_at  # type: ignore[operator]
    assert now.nodes and "kwok-node-1" not in now.nodes, now
    # The old pod may still run on the lost node: the fence holds, node-lost until the stop.
    assert all((r.state, r.cause.kind) == (State.RUNNING, CauseKind.NODE_LOST) for r in both)
    assert "kwok-node-1" in both[-1].nodes


def test_a_replacement_that_has_not_started_is_no_restart_yet() -> None:
    lines = recorded("node-lost")
    started = [ln["object"] for ln in lines if ln["kind"] == "Pod"
               and ln["object"]["metadata"]["name"].endswith("xjfk2")]
    waiting = next(p for p in started if not p["status"].get("startTime"))
    running = next(p for p in started if p["status"].get("startTime"))
    old = next(ln["object"] for ln in lines if ln["kind"] == "Pod"
               and ln["object"]["metadata"]["name"].endswith("6p2tc")
               and ln["object"]["metadata"].get("deletionTimestamp"))
    jobs = [ln["object"] for ln in lines if ln["kind"] == "Job"
            and ln["object"]["metadata"]["uid"] == old["metadata"]["labels"][
                "batch.kubernetes.io/controller-uid"]]
    counted = [next(j for j in jobs if (j.get("status") or {}).get("failed") == 1)]
    assert replaced_pods([old, waiting], counted) == []
    assert replaced_pods([old, running], counted) == [(old, running)]
    # kept evidence of a pod that is gone is never the current pod of its slot
    ev = evidence_of(old)
    assert ev is not None and replaced_pods([ev], counted) == []
    assert replaced_pods([ev, running], counted) == [(ev, running)]
    # both gone (the Job's backoffLimit reached, its pods deleted): the restart stays in the
    # report, the newer evidence (by start) the current run's
    failed_too = json.loads(json.dumps(running))
    failed_too["status"]["containerStatuses"] = [{"name": "node", "restartCount": 0, "state": {
        "terminated": {"exitCode": 3, "reason": "Error"}}}]
    ev_new = evidence_of(failed_too)
    assert ev_new is not None
    assert replaced_pods([ev_new, ev], counted) == [(ev, ev_new)]


def test_a_pod_the_job_does_not_count_failed_was_not_replaced_after_a_failure() -> None:
    # A person's suspend deletes the pods and the resume makes new ones: the Job counts no
    # failure (status.failed unset), and that is no restart of Kubernetes' (the live suspend
    # test found it read as one, its history showing non-zero-exit).
    lines = recorded("node-lost")
    old = next(ln["object"] for ln in lines if ln["kind"] == "Pod"
               and ln["object"]["metadata"]["name"].endswith("6p2tc")
               and ln["object"]["metadata"].get("deletionTimestamp"))
    running = next(ln["object"] for ln in lines if ln["kind"] == "Pod"
                   and ln["object"]["metadata"]["name"].endswith("xjfk2")
                   and ln["object"]["status"].get("startTime"))
    uncounted = [next(ln["object"] for ln in lines if ln["kind"] == "Job"
                      and not (ln["object"].get("status") or {}).get("failed"))]
    assert replaced_pods([old, running], uncounted) == []
    assert replaced_pods([old, running], []) == []  # no Job seen: no restart claimed


def test_a_persons_delete_of_one_rank_is_the_deletions_end_never_the_applications(
        path: Path_) -> None:
    # Recorded on the real nodes (issue 46): a person deletes rank 0's pod of a 2-node job;
    # its process's SIGTERM handler exits 143 and the Job (backoffLimit 0) fails. Before,
    # the end read non-zero-exit, exit 143, the application's, and a rule resubmitted it.
    readings = replay("pod-deleted", path)
    final = readings[-1]
    assert final is not None and (final.state, final.cause.kind) == (
        State.FAILED, CauseKind.UNKNOWN), final
    assert final.cause.exit_code == 143 and "its pod was deleted" in final.cause.note
    assert all(e.error is None for e in final.executions), final
    assert not [k for k in kinds(readings) if k is not None and k[1] is CauseKind.NON_ZERO_EXIT]
    # the pods' last versions alone could not tell: the kubelet's last delete (grace 0) moved
    # their deletionTimestamp past the containers' end
    last = [ln["object"] for ln in recorded("pod-deleted")
            if ln["kind"] == "Pod" and ln["type"] == "DELETED"]
    assert len(last) == 2 and all(
        p["metadata"].get("deletionGracePeriodSeconds") == 0 for p in last), last
    assert {t["exitCode"] for p in last for t in (
        cs["state"].get("terminated") or {} for cs in p["status"]["containerStatuses"])} == {143}
