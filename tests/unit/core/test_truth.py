"""The reported state never lies (issue 12): the core's side of each rule, one test each.

1 only a committed outcome is terminal (the plan's verdict is a forecast until then);
2 an unreachable scheduler changes nothing (the record's state, never a guess);
6 dispatch's own words go in Cause.note, never in the scheduler's detail;
7 held, released, requeued and duplicate can be covered;
8 a cancel that reached the scheduler is final, even while our own stop is pending;
10 fold refuses a record it cannot trust.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from tests.strategies_core import SLURM, T0, Sim, ended, kinds_of, obj, rule

from dispatch.core import events as ev
from dispatch.core.codec import cause_json
from dispatch.core.decide import Commit, PlaceHold, StartRecovery, Stop, Submit, decide, to_events
from dispatch.core.model import Cause, CauseKind, Execution, Provenance, State
from dispatch.core.policy import Action, Declarations
from dispatch.core.record import RecordError, advance, fold
from dispatch.core.story import line
from dispatch.errors import EXIT_STORE, StoreUnusable

K = CauseKind
PREEMPT_OR_LOST = rule([K.PREEMPTED, K.NODE_LOST], Action.RESUBMIT, 3)


def running_first(sim: Sim) -> None:
    assert kinds_of(sim.tick([])) == ["Submit"]
    assert kinds_of(sim.tick([obj(1, State.RUNNING)])) == ["Bind"]


def only(decisions: list, cls: type) -> list:
    return [d for d in decisions if isinstance(d, cls)]


# --- 1. Only a committed outcome is terminal ---------------------------------------------


@pytest.mark.parametrize("kind, rules, committed", [
    pytest.param(K.NONE, [], State.SUCCEEDED, id="completed"),
    pytest.param(K.NON_ZERO_EXIT, [], State.FAILED, id="exit-no-rule"),
    pytest.param(K.CANCELLED, [PREEMPT_OR_LOST], State.CANCELLED, id="scancel"),
    pytest.param(K.PREEMPTED, [rule([K.PREEMPTED], Action.RESUBMIT, 0)], State.FAILED,
                 id="budget-spent"),
])
def test_an_end_not_yet_committed_is_a_forecast_never_the_state(
        kind: CauseKind, rules: list, committed: State) -> None:
    """"Only a committed outcome is terminal": between the object's end and the commit the
    job keeps its last committed state (running); the verdict is only the forecast, and
    the commit then agrees with it."""
    sim = Sim(rules)
    running_first(sim)
    gone = ended(1, kind, kind.value.upper())
    for view in ([gone], [gone, obj(1, State.RUNNING, ref="stray")]):
        status = sim.status(view)
        assert status.state is State.RUNNING and status.cause is None, status
        assert not status.settled and status.scheduler_seen
        assert status.forecast is not None and status.forecast.state is committed
        assert status.forecast.cause is not None and status.forecast.cause.kind is kind
    forecast = sim.status([gone]).forecast
    d = sim.tick([gone])
    assert only(d, Commit)[0].state is committed
    after = sim.status([gone])
    assert after.state is committed and after.settled and after.forecast is None
    assert forecast is not None and (after.state, after.cause) == (forecast.state,
                                                                   forecast.cause)


def test_a_completed_object_keeps_the_job_running_until_the_commit_even_unseen_running(
        ) -> None:
    """A job whose object ended COMPLETED before dispatch ever saw it run (bound while
    pending) still reads running, not succeeded and not pending, until the commit."""
    sim = Sim([])
    sim.tick([])
    sim.tick([obj(1, State.PENDING)])
    done = ended(1, K.NONE, "COMPLETED")
    status = sim.status([done])
    assert status.state is State.RUNNING
    assert status.forecast is not None and status.forecast.state is State.SUCCEEDED


def test_an_end_that_never_ran_keeps_the_record_state_not_pending() -> None:
    """An object that ended without running (cancelled while queued) before the commit:
    the record's state (the bound object is live as far as the record knows)."""
    sim = Sim([])
    sim.tick([])
    sim.tick([obj(1, State.PENDING)])
    status = sim.status([ended(1, K.CANCELLED, "CANCELLED by 1000")])
    assert status.state is State.RUNNING and not status.state.terminal
    assert status.forecast is not None and status.forecast.state is State.CANCELLED


def test_a_taken_back_job_whose_next_object_ended_unseen_running_stays_recovering() -> None:
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    sim.tick([ended(1, K.PREEMPTED)])
    sim.tick([ended(1, K.PREEMPTED), obj(2, State.PENDING)])
    status = sim.status([ended(1, K.PREEMPTED), ended(2, K.LAUNCH_FAILED, "BOOT_FAIL")])
    assert status.state is State.RECOVERING
    assert status.forecast is not None and status.forecast.state is State.FAILED


@pytest.mark.parametrize("who", ["cancel", "give-up"])
def test_a_person_after_a_success_forecast_does_not_turn_it_into_cancelled(who: str) -> None:
    """"A person's cancel that arrives after a success forecast but before the commit must
    not make the screen go succeeded -> cancelled": the scheduler said the job completed,
    so the cancel came too late; the state never showed succeeded before the commit, the
    forecast stays succeeded, and succeeded is what is committed."""
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    done = ended(1, K.NONE, "COMPLETED")
    shown = [sim.status([done])]
    if who == "cancel":
        sim.inject(ev.CancelRequested, actor="alice")
    else:
        sim.inject(ev.GiveUpRequested, actor="alice")
    shown.append(sim.status([done]))
    for status in shown:
        assert status.state is State.RUNNING
        assert status.forecast is not None and status.forecast.state is State.SUCCEEDED
    d = sim.tick([done])
    assert kinds_of(d) == ["RecordEnd", "Commit"]
    assert sim.job.outcome is not None and sim.job.outcome.state is State.SUCCEEDED
    assert sim.job.outcome.cause.kind is K.NONE and sim.job.escalations == ()
    assert sim.status([done]).state is State.SUCCEEDED


def test_a_person_cancel_racing_a_failure_still_cancels() -> None:
    """The other side of the race: an end that is not a success, with a person's cancel
    pending, commits the person's cancel (no recovery after a cancel was asked for)."""
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    sim.inject(ev.CancelRequested, actor="alice")
    status = sim.status([ended(1, K.PREEMPTED)])
    assert status.state is State.RUNNING
    assert status.forecast is not None and status.forecast.state is State.CANCELLED
    sim.tick([ended(1, K.PREEMPTED)])
    assert sim.job.outcome is not None and sim.job.outcome.cause.actor == "alice"


def test_an_end_recorded_whose_verdict_is_not_yet_committed_is_not_terminal() -> None:
    """A crash between two appends leaves the end recorded and no verdict: still running
    (nothing is committed), never pending, never terminal."""
    sim = Sim([])
    running_first(sim)
    d = decide(sim.job, sim.discovery([ended(1, K.NONE)]), sim.plan, sim.now)
    sim.append(to_events([x for x in d if not isinstance(x, Commit)], sim.job, sim.now))
    assert sim.job.awaiting is not None and sim.job.outcome is None
    for view in (None, [ended(1, K.NONE)]):
        assert sim.status(view).state is State.RUNNING


# --- 2. An unreachable scheduler is an error, never a state ---------------------------------


def test_a_running_job_reads_running_not_pending_while_the_scheduler_is_unreachable() -> None:
    """"While the backend cannot be reached, status shows the last committed state with
    scheduler: unreachable; nothing is replaced by a guess (a running job must not read
    pending)." """
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    assert sim.status([obj(1, State.RUNNING)]).scheduler_seen
    for view, complete in ((None, True), ([], False), ([obj(9, State.RUNNING)], False)):
        status = sim.status(view, complete=complete)
        assert status.state is State.RUNNING, (view, status)
        assert not status.scheduler_seen and status.forecast is None


def test_unreachable_keeps_recovering_held_and_outcomes_as_the_record_has_them() -> None:
    sim = Sim([PREEMPT_OR_LOST, rule([K.OUT_OF_MEMORY], Action.HOLD)])
    running_first(sim)
    sim.tick([ended(1, K.PREEMPTED)])
    sim.tick([ended(1, K.PREEMPTED), obj(2, State.RUNNING)])
    status = sim.status(None)
    assert (status.state, status.scheduler_seen) == (State.RECOVERING, False)
    assert status.cause is not None and status.cause.kind is K.PREEMPTED
    sim.tick([ended(1, K.PREEMPTED), ended(2, K.OUT_OF_MEMORY)])
    assert sim.status(None).state is State.HELD
    sim.inject(ev.CancelRequested, actor="alice")
    sim.tick([ended(2, K.OUT_OF_MEMORY)])
    status = sim.status(None)
    assert status.state is State.CANCELLED and status.settled and not status.scheduler_seen


def test_an_intended_submission_not_yet_bound_is_pending_while_unreachable() -> None:
    """Nothing says the scheduler accepted it: waiting, as the record has it."""
    sim = Sim([])
    sim.tick([])
    status = sim.status(None)
    assert (status.state, status.scheduler_seen) == (State.PENDING, False)
    assert sim.status([]).scheduler_seen


# --- 6. dispatch's words go in the note ------------------------------------------------------


def test_the_fence_keeps_the_schedulers_words_in_detail_and_its_own_in_note() -> None:
    sim = Sim([PREEMPT_OR_LOST], declarations=Declarations(backend="kubeflow",
                                                           node_loss_window=timedelta(0)))
    running_first(sim)
    words = "job j-0: job FailureTarget=True reason=PodFailurePolicy"
    d = sim.tick([obj(1, State.RUNNING, K.NODE_LOST, detail=words, lost_since=T0)])
    fence = only(d, Stop)[0].cause
    assert fence.detail == words
    assert fence.note == "fenced: still reported running 0s after the node was lost"
    recovered = only(d, StartRecovery)[0].cause
    assert (recovered.detail, recovered.note) == (words, fence.note)
    assert cause_json(fence) is not None and cause_json(fence)["note"] == fence.note  # type: ignore[index]
    stop_event = next(e for e in sim.record if isinstance(e, ev.StopRequested))
    said = line(stop_event)
    assert repr(words) in said and f"[dispatch: {fence.note}]" in said


def test_the_native_recovery_stop_keeps_the_schedulers_words_in_detail() -> None:
    sim = Sim([rule([K.PREEMPTED], Action.REQUEUE, 0)], declarations=SLURM)
    running_first(sim)
    requeued = obj(1, State.PENDING, executions=(Execution(index=0, cause=Cause(
        kind=K.PREEMPTED, detail="PREEMPTED; nodes=n1")),))
    stop = only(sim.tick([requeued]), Stop)[0].cause
    assert stop.detail == "PREEMPTED; nodes=n1"
    assert "ran the object again" in stop.note and "ran the object" not in stop.detail


def test_story_and_json_show_the_note_beside_the_detail() -> None:
    c = Cause(kind=K.NODE_LOST, detail="NODE_FAIL", note="fenced: still running")
    e = ev.ExecutionEnded(seq=5, at=T0, submission=1, ref="r1", execution=0, cause=c)
    text = line(e)
    assert "'NODE_FAIL'" in text and "fenced: still running" in text
    assert text.index("NODE_FAIL") < text.index("fenced")
    assert cause_json(c) == {"kind": "node-lost", "provenance": "scheduler", "actor": None,
                             "detail": "NODE_FAIL", "note": "fenced: still running",
                             "exit_code": None, "at": None}


# --- 7. held, released, requeued and duplicate can be covered --------------------------------


@pytest.mark.parametrize("kind", [K.HELD, K.RELEASED, K.REQUEUED])
def test_a_rule_on_held_released_or_requeued_is_applied(kind: CauseKind) -> None:
    """A rule that covers one of these kinds is applied like any other when an execution
    ends with it (budget spent, next submission)."""
    sim = Sim([rule([kind], Action.RESUBMIT, 1)])
    sim.plan.policy.validate()
    running_first(sim)
    d = sim.tick([ended(1, kind, "words")])
    assert kinds_of(d) == ["RecordEnd", "StartRecovery", "Submit"]
    assert sim.job.budget_used == (1,)


def test_a_rule_on_duplicate_never_spends_a_budget_nor_holds() -> None:
    """S15 holds even when a rule names duplicate: the job runs again, no budget spent."""
    sim = Sim([rule([K.DUPLICATE], Action.HOLD)])
    sim.plan.policy.validate()
    running_first(sim)
    d = sim.tick([obj(1, State.CANCELLED, K.DUPLICATE, detail="REVOKED")])
    assert kinds_of(d) == ["RecordEnd", "Submit"]
    assert not only(d, PlaceHold) and sim.job.hold is None


# --- 8. A cancel that reached the scheduler is final ------------------------------------------


def _stopped_past_native_budget(stop_by: str | None, *, marks_stops: bool = False) -> Sim:
    """A Slurm-like job requeued by the scheduler with no rule allowing it: stopped by us
    (the stop recorded with ``stop_by``), a hold rule waiting on the cause. ``marks_stops``:
    the backend marks its stops at the scheduler (the job's Comment on Slurm)."""
    declarations = msgspec.structs.replace(SLURM, marks_stops=marks_stops)
    sim = Sim([rule([K.PREEMPTED], Action.HOLD)], declarations=declarations)
    running_first(sim)
    requeued = obj(1, State.PENDING, executions=(Execution(index=0, cause=Cause(
        kind=K.PREEMPTED, detail="PREEMPTED")),))
    d = decide(sim.job, sim.discovery([requeued]), sim.plan, sim.now)
    assert kinds_of(d) == ["RecordEnd", "Stop"]
    sim.append(to_events(d, sim.job, sim.now, stop_by=stop_by))
    return sim


@pytest.mark.parametrize("actor", ["1000", "alice"])
def test_a_persons_cancel_during_our_stop_is_final_not_a_recovery_hold(actor: str) -> None:
    """"A cancel that reached the scheduler is final, whoever sent it, even while
    dispatch's own stop of that object is pending (today a foreign 'CANCELLED by <uid>'
    during our stop becomes a recovery hold)." """
    sim = _stopped_past_native_budget(stop_by="0")
    gone = obj(1, State.CANCELLED, cause_=Cause(
        kind=K.CANCELLED, provenance=Provenance.ACTOR, actor=actor,
        detail=f"CANCELLED by {actor}"))
    d = sim.tick([gone])
    assert not only(d, PlaceHold) and not only(d, Submit)
    assert sim.job.hold is None
    assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED
    assert sim.job.outcome.cause.actor == actor
    assert sim.job.outcome.cause.detail == f"CANCELLED by {actor}"


@pytest.mark.parametrize("actor, stop_by", [
    pytest.param("0", "0", id="scancel-by-our-uid"),
    pytest.param("dispatch", None, id="local-or-kubeflow-stop"),
    pytest.param(None, "0", id="no-actor-said"),
])
def test_our_own_stops_cancel_ends_with_the_stops_reason(actor: str | None,
                                                         stop_by: str | None) -> None:
    sim = _stopped_past_native_budget(stop_by=stop_by)
    gone = obj(1, State.CANCELLED, cause_=Cause(
        kind=K.CANCELLED, provenance=Provenance.ACTOR if actor else Provenance.SCHEDULER,
        actor=actor, detail="CANCELLED"))
    d = sim.tick([gone])
    assert kinds_of(d) == ["RecordEnd", "PlaceHold"]
    assert sim.job.hold is not None and sim.job.hold.cause.kind is K.PREEMPTED


def test_a_persons_cancel_from_the_supervisors_own_uid_is_final_when_stops_are_marked() -> None:
    """Issue 21 item 15: a backend that marks its own stops names "dispatch" for a cancel
    that carries the mark; a "CANCELLED by <our uid>" without it is a person's scancel run
    as the supervisor's user, during our stop: final, never our stop's recovery hold."""
    sim = _stopped_past_native_budget(stop_by="0", marks_stops=True)
    gone = obj(1, State.CANCELLED, cause_=Cause(
        kind=K.CANCELLED, provenance=Provenance.ACTOR, actor="0", detail="CANCELLED by 0"))
    d = sim.tick([gone])
    assert not only(d, PlaceHold) and not only(d, Submit)
    assert sim.job.hold is None
    assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED
    assert sim.job.outcome.cause.actor == "0"


@pytest.mark.parametrize("actor", [
    pytest.param("dispatch", id="the-cancel-carries-our-mark"),
    pytest.param(None, id="no-actor-said"),
])
def test_a_marked_stops_cancel_ends_with_the_stops_reason(actor: str | None) -> None:
    sim = _stopped_past_native_budget(stop_by="0", marks_stops=True)
    gone = obj(1, State.CANCELLED, cause_=Cause(
        kind=K.CANCELLED, provenance=Provenance.ACTOR if actor else Provenance.SCHEDULER,
        actor=actor, detail="CANCELLED by 0; Comment=dispatch-stop:j.1"))
    d = sim.tick([gone])
    assert kinds_of(d) == ["RecordEnd", "PlaceHold"]
    assert sim.job.hold is not None and sim.job.hold.cause.kind is K.PREEMPTED


def test_the_supervisor_records_who_its_stops_are_by() -> None:
    sim = _stopped_past_native_budget(stop_by="4242")
    stop = sim.record[-1]
    assert isinstance(stop, ev.StopRequested) and stop.by == "4242"
    assert sim.job.submissions[0].stop_by == "4242"


# --- 10. fold refuses a record it cannot trust -------------------------------------------------


def _record() -> list[ev.Event]:
    """created, intended, bound, ended, recovery-started, intended (seq 1..6)."""
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    sim.tick([ended(1, K.PREEMPTED)])
    assert [type(e).__name__ for e in sim.record] == [
        "JobCreated", "SubmissionIntended", "SubmissionBound", "ExecutionEnded",
        "RecoveryStarted", "SubmissionIntended"]
    return list(sim.record)


def _renumber(events: list[ev.Event], seqs: list[int]) -> list[ev.Event]:
    return [msgspec.structs.replace(e, seq=s) for e, s in zip(events, seqs, strict=True)]


@pytest.mark.parametrize("how, bad_seq", [
    pytest.param(lambda r: r[:4] + r[5:], 6, id="missing-recovery-started"),
    pytest.param(lambda r: [r[0], r[2], r[1], *r[3:]], 3, id="out-of-order"),
    pytest.param(lambda r: _renumber(r, [1, 2, 3, 4, 5, 5]), 5, id="repeated-seq"),
    pytest.param(lambda r: _renumber(r, [1, 2, 3, 4, 5, 7]), 7, id="gap-at-the-end"),
    pytest.param(lambda r: _renumber(r, [2, 3, 4, 5, 6, 7]), 2, id="not-starting-at-1"),
    pytest.param(lambda r: _renumber(r, [0, 1, 2, 3, 4, 5]), 0, id="starting-at-0"),
    pytest.param(lambda r: [*r, msgspec.structs.replace(r[0], seq=7)], 7,
                 id="second-created"),
    pytest.param(lambda r: r[1:], 2, id="no-created"),
])
def test_fold_refuses_a_record_it_cannot_trust(how: object, bad_seq: int) -> None:
    """"Events out of order, a gap in seq, a second created event, a missing middle event
    (e.g. a deleted recovery-started that would silently give a budget back) ... are
    refused with the store-unusable error (exit 5) naming the job and seq." """
    record = how(_record())  # type: ignore[operator]
    with pytest.raises(RecordError) as err:
        fold(record, T0, job_id="j")
    assert isinstance(err.value, StoreUnusable) and err.value.exit_code == EXIT_STORE
    assert err.value.job_id == "j" and err.value.seq == bad_seq
    assert "job j" in str(err.value) and f"seq {bad_seq}" in str(err.value)


def test_fold_refuses_a_version_ahead_of_the_events() -> None:
    record = _record()
    assert fold(record, T0, version=6).version == 6
    with pytest.raises(RecordError) as err:
        fold(record, T0, version=8)
    assert err.value.job_id == "j" and err.value.seq == 6 and "version is 8" in str(err.value)
    with pytest.raises(RecordError):
        fold(record[:5], T0, version=6)  # the last event lost


def test_advance_refuses_a_gap_too() -> None:
    record = _record()
    job = fold(record[:3], T0)
    with pytest.raises(RecordError) as err:
        advance(job, record[4:])
    assert err.value.seq == 5
    assert advance(job, record[3:]) == fold(record, T0)


def test_fold_names_the_job_it_was_asked_for() -> None:
    with pytest.raises(RecordError) as err:
        fold(_record(), T0, job_id="other")
    assert err.value.job_id == "other"
    with pytest.raises(RecordError) as err:
        fold([], T0, job_id="empty")
    assert "job empty" in str(err.value)
