"""Issue 35, scenario 7': a person suspends a running TrainJob with kubectl, then resumes it,
replayed from the real controllers (tests/fixtures/k8s-recorded/suspend-resume*.jsonl,
recorded by tests/integration/k8s/record_fixtures.py; the live test is
tests/integration/k8s/test_kubeflow_suspend.py).

The chain as recorded: the person's `spec.suspend: true`; Trainer suspends the JobSet, the
JobSet controller the Job, Trainer says `Suspended=True reason=Suspended`; the Job controller
deletes the pod. The person's `spec.suspend: false`; Trainer's `Suspended=True` stays a moment,
then `Suspended=False reason=Resumed`; a new pod is made and runs to the end. `suspend-resume`
suspends as soon as the pod is Ready (as the live test does), `suspend-resume-late` 2 s after
dispatch's own status said running. In the first the killed pod turned `Failed` (terminated
`Error`) before it was deleted, in the second it was deleted while still `Running` (a race: a
second pair recorded had it the other way round).

Every reading is checked against where the recording stands at that event: held exactly while
the person's suspend is in force (asked and said), the scheduler's hold and not dispatch's
gate; a resume in progress until the new pod runs; never pending for capacity, never a lost
node, a failure or unknown; one TrainJob (one submission), one execution, succeeded."""

from __future__ import annotations

from typing import Any

import pytest
from test_kubeflow_replay import (
    Path_,
    kinds,
    recorded,
    replay,
    trainjobs_added,
)

from dispatch.core.model import CauseKind, ObjectReport, Provenance, State

SCENARIOS = ["suspend-resume", "suspend-resume-late"]


def stands(scenario: str) -> list[dict[str, Any]]:
    """Where the recording stands at each reading of ``replay(scenario)`` (the same events:
    from the TrainJob's creation on, the LISTs left out): the TrainJob as last seen, whether
    the person's suspend was asked (``spec.suspend``) and said (Trainer's ``Suspended=True``),
    whether the resume was asked already, and whether a pod made after it runs."""
    lines = recorded(scenario)
    first = next(i for i, ln in enumerate(lines)
                 if ln["kind"] == "TrainJob" and ln["type"] == "ADDED")
    tj: dict[str, Any] = {}
    suspended_once = resumed = False
    old_pods: set[str] = set()
    new_running = False
    out = []
    for ln in lines[first:]:
        if ln["type"] == "LISTED":
            continue
        obj = ln["object"]
        if ln["kind"] == "TrainJob":
            tj = obj
        asked = (tj.get("spec") or {}).get("suspend") is True
        suspended_once = suspended_once or asked
        resumed = resumed or (suspended_once and not asked)
        if ln["kind"] == "Pod":
            name = obj["metadata"]["name"]
            if not resumed:
                old_pods.add(name)
            elif name not in old_pods and (obj.get("status") or {}).get("phase") == "Running":
                new_running = True
        said = any(c["type"] == "Suspended" and c["status"] == "True"
                   for c in (tj.get("status") or {}).get("conditions", []))
        out.append({"seq": ln["seq"], "asked": asked, "said": said, "resumed": resumed,
                    "new_running": new_running})
    return out


def paired(scenario: str, path: Path_) -> list[tuple[dict[str, Any], ObjectReport]]:
    readings = replay(scenario, path)
    where = stands(scenario)
    assert len(readings) == len(where)
    assert all(r is not None for r in readings), kinds(readings)  # every look complete
    return [(w, r) for w, r in zip(where, readings, strict=True) if r is not None]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_held_exactly_while_the_persons_suspend_is_in_force_as_the_schedulers_hold(
        scenario: str, path: Path_) -> None:
    pairs = paired(scenario, path)
    held = [(w, r) for w, r in pairs if r.state is State.HELD]
    assert held, kinds([r for _, r in pairs])
    for w, r in pairs:
        in_force = w["asked"] and w["said"]
        assert (r.state is State.HELD) == in_force, (w, r.state, r.cause)
    for _, r in held:
        assert r.cause.kind is CauseKind.HELD, r.cause
        # the person's hold, not dispatch's own gate (S11): the scheduler's present state
        assert r.cause.provenance is Provenance.SCHEDULER and r.cause.actor is None, r.cause
        assert not r.gated
        assert "Suspended=True reason=Suspended" in r.cause.detail, r.cause.detail
        assert len(r.executions) == 1 and r.executions[-1].ended_at is None, r.executions
    # Asked but not yet said (Trainer's condition comes a moment after the patch): the pod
    # still runs, and the reading says running, never pending or ended.
    before = [r for w, r in pairs if w["asked"] and not w["said"]]
    assert before and {(r.state, r.cause.kind) for r in before} == {
        (State.RUNNING, CauseKind.NONE)}, kinds(before)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_resume_is_in_progress_until_the_new_pod_runs(scenario: str, path: Path_) -> None:
    # From the person's `suspend: false` until a pod made after it runs: nothing runs, so
    # the reading is a resume in progress (pending / released), never running on the evidence
    # of the pod the suspend killed, and never held again.
    pairs = paired(scenario, path)
    waiting = [(w, r) for w, r in pairs if w["resumed"] and not w["new_running"]]
    assert waiting
    seen = [(w["seq"], r.state, r.cause.kind, r.cause.note) for w, r in waiting]
    assert {(r.state, r.cause.kind) for _, r in waiting} == {
        (State.PENDING, CauseKind.RELEASED)}, seen
    # the controllers' words: Trainer's Suspended=True still, then its Resumed
    assert "Suspended=True" in waiting[0][1].cause.detail, seen
    assert "resume in progress" in waiting[0][1].cause.note, seen
    assert "reason=Resumed" in waiting[-1][1].cause.detail, seen
    after = [r for w, r in pairs if w["new_running"]]
    assert after and (after[0].state, after[0].cause.kind) == (State.RUNNING, CauseKind.NONE)
    assert {(r.state, r.cause.kind) for r in after} <= {
        (State.RUNNING, CauseKind.NONE), (State.SUCCEEDED, CauseKind.NONE)}, kinds(after)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_never_a_lost_node_a_failure_no_capacity_or_unknown(scenario: str, path: Path_) -> None:
    seen = kinds(replay(scenario, path))
    allowed = {
        (State.PENDING, CauseKind.NONE),  # before the pod first ran
        (State.RUNNING, CauseKind.NONE),
        (State.HELD, CauseKind.HELD),
        (State.PENDING, CauseKind.RELEASED),  # the resume in progress
        (State.SUCCEEDED, CauseKind.NONE),
    }
    assert {k for k in seen if k is not None} <= allowed, seen
    ran = seen.index((State.RUNNING, CauseKind.NONE))
    assert (State.PENDING, CauseKind.NONE) not in seen[ran:], seen


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_it_ends_succeeded_with_one_submission_and_one_execution(
        scenario: str, path: Path_) -> None:
    readings = replay(scenario, path)
    final = readings[-1]
    assert final is not None, kinds(readings)
    assert (final.state, final.cause.kind) == (State.SUCCEEDED, CauseKind.NONE), final.cause
    assert "Complete=True" in final.cause.detail or "Completed=True" in final.cause.detail
    # the person's suspend is not a restart: one execution, no past cause, no error
    assert len(final.executions) == 1, final.executions
    (run,) = final.executions
    assert run.ended_at is not None and run.error is None, run
    assert run.started_at is not None
    assert final.nodes and set(final.nodes) == set(run.nodes), final
    # never resubmitted: the one TrainJob dispatch made (no budget spent on it)
    assert len(trainjobs_added(scenario)) == 1
    deleted = [ln for ln in recorded(scenario) if ln["kind"] == "TrainJob"
               and ln["type"] == "DELETED"]
    assert not deleted
