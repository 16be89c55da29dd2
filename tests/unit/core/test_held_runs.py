"""Issue 46: a person's hold of a running object (a TrainJob suspended with kubectl) ends its
running time in the record (core/held_runs.py): the end of the running execution, cause held,
not final; the run after the resume is a new execution; goodput counts the time between as
held, never as running. Driven tick by tick as the supervisor does (observe, then decide)."""

from __future__ import annotations

from datetime import timedelta

from tests.goodput_stories import run, sim_with, tick
from tests.strategies_core import T0, ended, obj

from dispatch.core import events as ev
from dispatch.core.goodput import Phase, job_time, split
from dispatch.core.held_runs import renumbered
from dispatch.core.model import Cause, CauseKind, Execution, Provenance, State


def _held(*executions: Execution, gated: bool = False, actor: str | None = None) -> object:
    return obj(1, State.HELD, cause_=Cause(
        kind=CauseKind.HELD, provenance=Provenance.ACTOR if actor else Provenance.SCHEDULER,
        actor=actor, detail="trainjob Suspended=True reason=Suspended",
        at=T0 + timedelta(seconds=40)), executions=executions, gated=gated)


def test_a_persons_hold_ends_the_run_and_the_resume_runs_a_new_execution() -> None:
    # queued 5 s, runs from 10 s, suspended at 40 s (held), resumed: runs from 70 s to 100 s
    sim = sim_with(2)
    tick(sim, 0, [])
    assert tick(sim, 12, [obj(1, State.RUNNING, executions=(run(0, 10, 2),))]) == [
        "RecordStart", "Bind"]
    # the pods being killed still show their start: no new start while held
    said = tick(sim, 45, [_held(Execution(index=0, nodes=("n0", "n1")))])
    assert said == ["RecordEnd"], said
    (end,) = [e for e in sim.record if isinstance(e, ev.ExecutionEnded)]
    assert (end.execution, end.cause.kind, end.final) == (0, CauseKind.HELD, False)
    assert end.cause.at == T0 + timedelta(seconds=40)
    assert tick(sim, 50, [_held(Execution(index=0))]) == []  # recorded once
    # resumed: the backend still numbers the run 0; the record's is 1
    assert tick(sim, 72, [obj(1, State.RUNNING, executions=(run(0, 70, 2),))]) == [
        "RecordStart"]
    start = [e for e in sim.record if isinstance(e, ev.ExecutionStarted)][-1]
    assert start.execution == 1 and start.started == T0 + timedelta(seconds=70)
    assert "Commit" in tick(sim, 101, [ended(1, CauseKind.NONE, executions=(
        Execution(index=0, started_at=T0 + timedelta(seconds=70), ended_at=T0 +
                  timedelta(seconds=100),
                  cause=Cause(kind=CauseKind.NONE, at=T0 + timedelta(seconds=100))),))])
    last = [e for e in sim.record if isinstance(e, ev.ExecutionEnded)][-1]
    assert (last.execution, last.final) == (1, True)
    # never a resubmission, a recovery or a budget: the person's to resolve
    assert not [e for e in sim.record if isinstance(
        e, ev.RecoveryStarted | ev.HoldPlaced | ev.StopRequested)]
    assert len([e for e in sim.record if isinstance(e, ev.SubmissionIntended)]) == 1
    s = split(job_time(sim.record, sim.now))
    assert s.parts[(Phase.RUNNING, CauseKind.NONE)] == timedelta(seconds=30 + 30)
    assert s.parts[(Phase.HELD, CauseKind.HELD)] == timedelta(seconds=30)
    assert s.node_parts.get((Phase.HELD, CauseKind.HELD)) == timedelta(0)


def test_our_own_gate_and_a_hold_before_any_run_record_nothing() -> None:
    sim = sim_with(1)
    tick(sim, 0, [])
    tick(sim, 5, [_held(Execution(index=0), gated=True, actor="dispatch")])
    tick(sim, 6, [_held(Execution(index=0))])  # a person's hold while still queued
    assert not [e for e in sim.record if isinstance(e, ev.ExecutionEnded)]


def test_a_start_dated_before_the_hold_runs_again_from_when_it_was_seen() -> None:
    # A Slurm suspend stops and continues the same processes: the scheduler's start is the
    # first one, before the hold; the held time is not counted as running.
    sim = sim_with(1)
    tick(sim, 0, [])
    tick(sim, 12, [obj(1, State.RUNNING, executions=(run(0, 10, 1),))])
    tick(sim, 45, [_held(Execution(index=0, started_at=T0 + timedelta(seconds=10)))])
    tick(sim, 70, [obj(1, State.RUNNING, executions=(run(0, 10, 1),))])
    s = split(job_time(sim.record, sim.now))
    assert s.parts[(Phase.HELD, CauseKind.HELD)] == timedelta(seconds=30)
    assert s.parts[(Phase.RUNNING, CauseKind.NONE)] == timedelta(seconds=30)


def test_renumbering_moves_every_execution_at_or_after_a_held_one() -> None:
    report = obj(1, State.RUNNING, executions=tuple(Execution(index=i) for i in range(4)))
    assert renumbered(report, ()) is report
    # the backend's 1 held (the record's 1), resumed as the record's 2 and held again:
    # the backend's 1 is now the record's 3
    assert [e.index for e in renumbered(report, (1, 2)).executions] == [0, 3, 4, 5]
    # the backend's 1 held (the record's 1, resumed as 2), then its 2 (the record's 3)
    assert [e.index for e in renumbered(report, (1, 3)).executions] == [0, 2, 4, 5]
    assert [e.index for e in renumbered(report, (0,)).executions] == [1, 2, 3, 4]
