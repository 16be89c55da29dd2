"""Issue 46, "Misreadings a held-out run found": a person's suspend of a running TrainJob must
be in the record. Before, execution 0 "ran" from its start to the job's end, so goodput counted
the suspended time as running. The suspend ends the running execution (cause held, not final:
no resubmission, no budget) and the run after the resume is a new execution
(core/held_runs.py); goodput counts the time between as held.

The recorded real chains (tests/fixtures/k8s-recorded/suspend-resume*.jsonl) are replayed
through the backend and then through the core as the supervisor's tick does (observe, decide,
the events appended); the mapping's reading of a held TrainJob and its resumed pods is checked
on objects shaped as the API server sends them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from test_kubeflow_mapping import job, jobset, pod, row, trainjob
from test_kubeflow_replay import Path_, recorded, replay
from tests.strategies_core import Sim, rule

from dispatch.backends.kubeflow.objects import TOKEN_LABEL
from dispatch.core import events as ev
from dispatch.core.decide import decide
from dispatch.core.decisions import to_events
from dispatch.core.goodput import Phase, job_time
from dispatch.core.model import CauseKind, ObjectReport, State
from dispatch.core.observe import observe
from dispatch.core.policy import Action, Declarations
from kube_fake import schemas
from kube_fake.trainer import cond

SCENARIOS = ["suspend-resume", "suspend-resume-late"]


def _timed(scenario: str, path: Path_) -> list[tuple[datetime, ObjectReport | None]]:
    """``replay``'s readings, each with the time of the event it followed."""
    lines = [ln for ln in recorded(scenario) if ln["type"] != "LISTED"]
    first = next(i for i, ln in enumerate(lines)
                 if ln["kind"] == "TrainJob" and ln["type"] == "ADDED")
    times = [datetime.fromisoformat(ln["at"]) for ln in lines[first:]]
    readings = replay(scenario, path)
    assert len(times) == len(readings)
    return list(zip(times, readings, strict=True))


def _supervised(scenario: str, path: Path_) -> Sim:
    timed = _timed(scenario, path)
    token = next(r.token for _, r in timed if r is not None and r.token)
    job_id = token.rpartition(".")[0]
    sim = Sim([rule([CauseKind.PREEMPTED, CauseKind.NODE_LOST], Action.RESUBMIT, 2)],
              declarations=Declarations(backend="kubeflow"), job_id=job_id,
              at=timed[0][0] - timedelta(seconds=1))
    sim.tick([])  # the submit
    for at, report in timed:
        sim.now = at
        found = sim.discovery([report] if report is not None else [],
                              complete=report is not None)
        decisions = observe(sim.job, found) + decide(sim.job, found, sim.plan, sim.now)
        sim.append(to_events(decisions, sim.job, sim.now))
    return sim


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_persons_suspend_ends_the_run_and_the_resume_starts_another(
        scenario: str, path: Path_) -> None:
    sim = _supervised(scenario, path)
    ends = [e for e in sim.record if isinstance(e, ev.ExecutionEnded)]
    starts = [e for e in sim.record if isinstance(e, ev.ExecutionStarted)]
    assert [(e.execution, e.cause.kind, e.final) for e in ends] == [
        (0, CauseKind.HELD, False), (1, CauseKind.NONE, True)], ends
    assert [s.execution for s in starts] == [0, 1], starts
    held = ends[0].cause
    assert "Suspended=True" in held.detail and held.actor != "dispatch", held
    # its time is Trainer's Suspended transition, after execution 0 started and before 1
    assert held.at is not None and starts[0].started is not None
    assert starts[1].started is not None
    assert starts[0].started <= held.at <= starts[1].started, (starts, held)
    # never resubmitted, no budget spent, no recovery: a person's hold, theirs to resolve
    assert not [e for e in sim.record if isinstance(e, ev.SubmissionIntended)][1:]
    assert not [e for e in sim.record if isinstance(e, ev.RecoveryStarted | ev.HoldPlaced)]
    assert sim.job.outcome is not None and sim.job.outcome.state is State.SUCCEEDED
    # goodput: running, held from the suspend until the new run, running again
    # (a zero-length first run, suspended in the second it started, is no piece)
    pieces = job_time(sim.record, sim.now).segments
    ran = [s.phase for s in pieces if s.phase in (Phase.RUNNING, Phase.HELD)]
    assert ran[-2:] == [Phase.HELD, Phase.RUNNING] and ran[:-2] in ([], [Phase.RUNNING]), ran
    (held_piece,) = [s for s in pieces if s.phase is Phase.HELD]
    assert held_piece.cause is CauseKind.HELD and held_piece.nodes == 0
    assert held_piece.start == held.at and held_piece.end == starts[1].started
    running = sum((s.end - s.start for s in pieces if s.phase is Phase.RUNNING), timedelta())
    end = ends[1].cause.at
    assert end is not None
    assert running == (held.at - starts[0].started) + (end - starts[1].started)


def _suspended(status: str, at: str) -> dict[str, Any]:
    return trainjob([cond("Suspended", status, "Suspended" if status == "True" else "Resumed",
                          "TrainJob is suspended" if status == "True" else "", at=at)],
                    suspend=status == "True", active=0 if status == "True" else 1)


def _made(p: dict[str, Any], at: str) -> dict[str, Any]:
    p["metadata"]["creationTimestamp"] = at
    schemas.validate("Pod", p)
    return p


def test_a_held_trainjob_reports_no_start_while_its_killed_pods_terminate() -> None:
    killed = _made(pod(0, deleting=True), "2026-03-01T10:00:00Z")
    report = row(_suspended("True", "2026-03-01T10:03:00Z"), jobset(), [job()], [killed])
    assert report.state is State.HELD and report.cause.kind is CauseKind.HELD
    assert report.executions[-1].started_at is None, report.executions


def test_a_resumed_trainjob_starts_from_its_new_pods_never_the_killed_ones() -> None:
    killed = _made(pod(0, phase="Failed", state={"terminated": {
        "reason": "Error", "exitCode": 143, "startedAt": "2026-03-01T10:00:00Z",
        "finishedAt": "2026-03-01T10:03:00Z"}}), "2026-03-01T10:00:00Z")
    new = _made(pod(1, state={"running": {"startedAt": "2026-03-01T10:06:02Z"}}),
                "2026-03-01T10:06:01Z")
    report = row(_suspended("False", "2026-03-01T10:06:00Z"), jobset(), [job()], [killed, new])
    assert report.state is State.RUNNING
    assert report.executions[-1].started_at == datetime.fromisoformat("2026-03-01T10:06:02+00:00")


def test_the_recording_is_a_person_suspending_a_run(path: Path_) -> None:
    # what the replay above rests on: a token of dispatch's, and a running pod before the
    # person's suspend
    lines = recorded("suspend-resume")
    assert any(ln["kind"] == "TrainJob" and TOKEN_LABEL in ln["object"]["metadata"]["labels"]
               for ln in lines)
    assert any(ln["kind"] == "TrainJob" and (ln["object"].get("spec") or {}).get("suspend")
               for ln in lines)
