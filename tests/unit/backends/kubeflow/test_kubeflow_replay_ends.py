"""How the recorded scenarios end, replayed (tests/fixtures/k8s-recorded/, the helpers of
test_kubeflow_replay.py): what an end that is not the application's carries, what a job that
never ran reads while its pods go after dispatch's cancel, and what a gang held back by one pod
says of the nodes its placed pods hold."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from test_kubeflow_replay import before_the_stop, kinds, recorded, replay

from dispatch.backends.kubeflow.mapping import report_gone, report_pods_left
from dispatch.core.model import CauseKind, State


def test_a_time_limit_end_carries_no_application_error() -> None:
    # The deadline's SIGTERM (exit 143, no message) is how Kubernetes ended the pods, not the
    # application's error: before, the end showed "killed by signal 15 (SIGTERM)" as its own.
    final = replay("time-limit")[-1]
    assert final is not None and final.cause.kind is CauseKind.TIME_LIMIT
    assert [e.error for e in final.executions] == [None] * len(final.executions), final
    # the pods did end by SIGTERM: the recording has it
    codes = {t["exitCode"] for t in terminations("time-limit")}
    assert 143 in codes, codes


def test_a_preempted_end_carries_no_application_error() -> None:
    final = replay("preempted")[-1]
    assert final is not None and final.cause.kind is CauseKind.PREEMPTED
    assert all(e.error is None for e in final.executions), final


def test_an_application_end_still_carries_its_error() -> None:
    final = replay("exit3-never")[-1]
    assert final is not None and final.executions[-1].error is not None


def terminations(scenario: str) -> list[dict[str, Any]]:
    return [
        cs["state"]["terminated"]
        for ln in recorded(scenario)
        if ln["kind"] == "Pod"
        for cs in (ln["object"].get("status") or {}).get("containerStatuses") or []
        if "terminated" in (cs.get("state") or {})
    ]


def after_the_stop(scenario: str) -> list[tuple[State, CauseKind] | None]:
    readings = replay(scenario)
    return kinds(readings[len(before_the_stop(scenario, readings)):])


def test_a_job_that_never_started_reads_pending_while_its_pods_go() -> None:
    # dispatch cancels a job whose image cannot be pulled: the TrainJob is gone at once, its
    # pod a moment later. It never ran, so it never reads running (before: running).
    seen = after_the_stop("image-pull")
    assert seen[-1] == (State.CANCELLED, CauseKind.CANCELLED), seen
    assert set(seen[:-1]) == {(State.PENDING, CauseKind.NONE)}, seen


def test_a_gang_held_back_reads_pending_until_its_placed_pods_are_gone() -> None:
    # Four of five pods ran on KWOK while the fifth was unschedulable; the job as a whole never
    # started, also after the unschedulable pod is deleted and the four remain.
    seen = after_the_stop("unschedulable")
    assert seen[-1] == (State.CANCELLED, CauseKind.CANCELLED), seen
    assert set(seen[:-1]) == {(State.PENDING, CauseKind.NONE)}, seen


def test_a_gang_held_back_says_which_nodes_its_placed_pods_hold() -> None:
    readings = replay("unschedulable")
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
