"""G1-G4 on a story driven like the supervisor drives it (observe + decide), and the two new
events' codec (versioned; records written before them read as they did)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import msgspec
import pytest
from tests.goodput_stories import preempted_once, run, sim_with, tick
from tests.strategies_core import T0, Sim, ended, obj

from dispatch.core import events as ev
from dispatch.core.codec import DecodeError, decode_event, encode_event
from dispatch.core.goodput import ZERO, Phase, job_time, split
from dispatch.core.model import Cause, CauseKind, ObjectReport, State
from dispatch.core.record import fold


def test_g1_g3_g4_one_preemption_after_a_checkpoint() -> None:
    sim = preempted_once(1)
    jt = job_time(sim.record, T0 + timedelta(days=9))  # settled: ``now`` does not matter
    s = split(jt)
    sec = timedelta(seconds=1)
    assert jt.settled and s.wall == 200 * sec
    assert s.parts[(Phase.QUEUED, CauseKind.NONE)] == 5 * sec
    assert s.parts[(Phase.RUNNING, CauseKind.NONE)] == (95 + 80) * sec
    assert s.parts[(Phase.RECOVERING, CauseKind.PREEMPTED)] == 20 * sec
    # G3: the run since the checkpoint at 65 until the preemption at 100 is lost.
    assert s.lost == {CauseKind.PREEMPTED: 35 * sec}
    assert s.badput()[CauseKind.PREEMPTED] == (20 + 35) * sec
    assert s.goodput() == pytest.approx((175 - 35) / 200)


def test_g2_a_64_node_preemption_costs_64_times_a_1_node_one() -> None:
    one = split(job_time(preempted_once(1).record, T0))
    many = split(job_time(preempted_once(64).record, T0))
    assert many.badput()[CauseKind.PREEMPTED] == 64 * one.badput()[CauseKind.PREEMPTED]
    assert many.node_wall == 64 * one.node_wall and many.wall == one.wall
    assert many.goodput() == one.goodput()


def test_without_progress_reports_nothing_is_counted_lost() -> None:
    sim = sim_with(2)
    tick(sim, 0, [])
    tick(sim, 10, [obj(1, State.RUNNING, executions=(run(0, 5, 2),))])
    tick(sim, 100, [ended(1, CauseKind.PREEMPTED)])
    s = split(job_time(sim.record, T0 + timedelta(seconds=150)))
    assert s.lost == {} and s.wall == timedelta(seconds=150)
    # Not settled: recovering runs on to ``now``, and is not counted as closed.
    jt = job_time(sim.record, T0 + timedelta(seconds=150))
    assert jt.segments[-1].phase is Phase.RECOVERING and jt.closed == len(jt.segments) - 1


def test_a_fenced_end_charges_the_fence_wait_to_node_lost() -> None:
    sim = preempted_once(1)
    rec = list(sim.record)
    # Rewrite the preemption as a fenced node loss (window 60s for local, see LOCAL).
    window = rec[0].declarations.node_loss_window  # type: ignore[union-attr]
    for i, e in enumerate(rec):
        c = getattr(e, "cause", None)
        if c is not None and c.kind is CauseKind.PREEMPTED:
            rec[i] = msgspec.structs.replace(e, cause=msgspec.structs.replace(  # type: ignore[type-var]
                c, kind=CauseKind.NODE_LOST, note="fenced: still reported running"))
    s = split(job_time(rec, T0))
    assert s.parts[(Phase.RECOVERING, CauseKind.NODE_LOST)] == \
        timedelta(seconds=20) + min(window, timedelta(seconds=95))


@pytest.mark.parametrize("event", [
    ev.ExecutionStarted(seq=3, at=T0, submission=1, execution=0, started=T0, nodes=4),
    ev.CheckpointRecorded(seq=4, at=T0, submission=1, execution=0, step=9, written=T0),
])
def test_the_new_events_round_trip_and_a_later_format_is_refused(event: ev.Event) -> None:
    raw = encode_event(event)
    assert b"format" not in raw and decode_event(raw) == event
    doc = json.loads(raw)
    assert decode_event(json.dumps({**doc, "format": 1})) == event
    with pytest.raises(DecodeError, match="format"):
        decode_event(json.dumps({**doc, "format": 2}))


def test_a_record_without_the_new_events_still_splits() -> None:
    """Records written before starts were recorded: their time before an end is queued."""
    sim = preempted_once(1)
    old = [e for e in sim.record
           if not isinstance(e, ev.ExecutionStarted | ev.CheckpointRecorded)]
    old = [msgspec.structs.replace(e, seq=i) for i, e in enumerate(old, start=1)]
    fold(old, T0)
    s = split(job_time(old, T0))
    assert s.wall == timedelta(seconds=200) and s.lost == {}


def _cancel(sim: Sim, at: float) -> None:
    sim.now = T0 + timedelta(seconds=at)
    sim.inject(ev.CancelRequested, actor="someone")


def _never_created(sim: Sim) -> None:
    """Issue 47 item 7: the scheduler was never reached, then the job was cancelled."""
    tick(sim, 0, [])
    tick(sim, 5, None)  # unreachable: no object was ever made
    _cancel(sim, 10)
    tick(sim, 20, None)
    assert "Commit" in tick(sim, 32.7, [])  # still no object: cancelled


def _queued_then_cancelled(sim: Sim) -> None:
    tick(sim, 0, [])
    tick(sim, 5, [obj(1, State.PENDING)])
    _cancel(sim, 10)
    tick(sim, 12, [obj(1, State.PENDING)])
    assert "Commit" in tick(sim, 20, [ended(1, CauseKind.CANCELLED)])


def _ran_then_cancelled(sim: Sim) -> None:
    tick(sim, 0, [])
    tick(sim, 10, [obj(1, State.RUNNING, executions=(run(0, 5, 2),))])
    _cancel(sim, 30)
    tick(sim, 35, [obj(1, State.RUNNING, executions=(run(0, 5, 2),))])
    assert "Commit" in tick(sim, 40, [ended(1, CauseKind.CANCELLED)])


def _started_while_being_cancelled(sim: Sim) -> None:
    tick(sim, 0, [])
    tick(sim, 5, [obj(1, State.PENDING)])
    _cancel(sim, 10)
    tick(sim, 16, [obj(1, State.RUNNING, executions=(run(0, 12, 2),))])
    assert "Commit" in tick(sim, 20, [ended(1, CauseKind.CANCELLED)])


# (story, its wall time, allocated node-time: 2 nodes each)
CANCEL_STORIES = [
    (_never_created, 32.7, 0.0),
    (_queued_then_cancelled, 20.0, 0.0),
    (_ran_then_cancelled, 40.0, 2 * (40 - 5)),  # running from 5, stopping from 30 to 40
    (_started_while_being_cancelled, 20.0, 2 * (20 - 12)),  # held from its start at 12
]


@pytest.mark.parametrize(("story", "wall", "allocated"), CANCEL_STORIES,
                         ids=[s.__name__.strip("_") for s, _, _ in CANCEL_STORIES])
def test_a_cancel_allocates_only_the_nodes_a_run_held(story: Callable[[Sim], None], wall: float,
                                                     allocated: float) -> None:
    """Only a run holds nodes: a job cancelled before any ran (never created, or queued) is
    settling, allocated nothing, though its wait counts in time to result."""
    sim = sim_with(2)
    story(sim)
    jt = job_time(sim.record, T0 + timedelta(days=9))
    s = split(jt)
    assert jt.settled and s.wall == timedelta(seconds=wall)
    assert s.node_wall == 2 * s.wall
    assert s.allocated() == timedelta(seconds=allocated)
    # the wait for the cancel is shown: stopping while a run held nodes, else settling
    assert s.phase(Phase.STOPPING, nodes=False) + s.phase(Phase.SETTLING, nodes=False) > ZERO


def _ended_at(number: int, kind: CauseKind, seconds: float) -> ObjectReport:
    """An end the scheduler dates at T0 + ``seconds`` (seen later, at the tick)."""
    state = {CauseKind.NONE: State.SUCCEEDED}.get(kind, State.FAILED)
    return obj(number, state, cause_=Cause(kind=kind, at=T0 + timedelta(seconds=seconds),
                                           exit_code=0 if kind is CauseKind.NONE else 1))


def _ran_then(kind: CauseKind, *, rules: bool) -> Sim:
    """Queued 5s, runs on 2 nodes until 100s (the scheduler's time), seen and committed at
    130s."""
    sim = sim_with(2) if rules else Sim(job_id="j")
    if not rules:
        created = sim.record[0]
        assert isinstance(created, ev.JobCreated)
        sim.record[0] = msgspec.structs.replace(
            created, spec=msgspec.structs.replace(created.spec, nodes=2))
        sim.job = fold(sim.record, T0)
    tick(sim, 0, [])
    tick(sim, 10, [obj(1, State.RUNNING, executions=(run(0, 5, 2),))])
    assert "Commit" in tick(sim, 130, [_ended_at(1, kind, 100)])
    return sim


def test_an_end_no_rule_recovers_from_is_settling_not_recovering() -> None:
    # issue 48 (nan-6): "recovering · non-zero-exit" on a job that never recovered
    jt = job_time(_ran_then(CauseKind.NON_ZERO_EXIT, rules=False).record, T0)
    s = split(jt)
    sec = timedelta(seconds=1)
    assert not any(p is Phase.RECOVERING for p, _ in s.parts)
    assert s.parts[(Phase.SETTLING, CauseKind.NON_ZERO_EXIT)] == 30 * sec
    assert s.badput() == {} and s.allocated() == 95 * 2 * sec
    assert s.wall == 130 * sec  # G1: still every second of the wall time


def test_the_wait_for_the_commit_after_success_is_not_allocated() -> None:
    # issue 48: "stopping · none" 26 min between exit 0 and the commit counted as allocated
    s = split(job_time(_ran_then(CauseKind.NONE, rules=True).record, T0))
    sec = timedelta(seconds=1)
    assert s.parts[(Phase.SETTLING, CauseKind.NONE)] == 30 * sec
    assert (Phase.STOPPING, CauseKind.NONE) not in s.parts
    assert s.allocated() == 95 * 2 * sec  # running only
    assert s.node_wall == 130 * 2 * sec  # still time to result
    assert s.allocated_goodput() == 1.0


def test_held_time_is_time_to_result_but_no_node_time() -> None:
    # issue 48: 4.16 node-h of held time, 40 % of the fleet's node-time
    sim = sim_with(4)
    tick(sim, 0, [])
    tick(sim, 10, [obj(1, State.RUNNING, executions=(run(0, 5, 4),))])
    sim.append([ev.HoldPlaced(seq=sim.job.version + 1, at=T0 + timedelta(seconds=50),
                              cause=Cause(kind=CauseKind.HELD), recovery=False)])
    s = split(job_time(sim.record, T0 + timedelta(seconds=150)))
    sec = timedelta(seconds=1)
    assert s.parts[(Phase.HELD, CauseKind.HELD)] == 100 * sec
    assert s.node_parts[(Phase.HELD, CauseKind.HELD)] == timedelta(0)
    assert s.wall == 150 * sec and s.node_wall == (5 + 45) * 4 * sec
