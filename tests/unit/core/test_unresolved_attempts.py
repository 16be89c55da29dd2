"""Issue 45 items 12 and 13 in the pure core: submit attempts that were never resolved.

Item 12: a job whose outcome is committed while a submit attempt of it was never resolved
(no object bound, no rejection) is still watched (``watch_until``), and an object that
attempt publishes late is stopped and recorded as a duplicate (S15), never bound.
Item 13: each attempt names its holder; a claim whose every holder is gone expires the
backend's submit bound after the attempt, not the attempt lease after it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.strategies_core import Sim, kinds_of, obj, rule

from dispatch.core import events as ev
from dispatch.core.codec import decode_event, encode_event
from dispatch.core.decide import (
    ATTEMPT_LEASE,
    WATCH_UNRESOLVED,
    Gone,
    StopDuplicate,
    decide,
    to_events,
    watch_until,
)
from dispatch.core.model import CauseKind, State
from dispatch.core.next_due import next_due
from dispatch.core.policy import Action
from dispatch.core.record import fold

K = CauseKind
LOST = rule([K.PREEMPTED, K.NODE_LOST], Action.RESUBMIT, 3)
CLI = ev.Holder(host="vm", boot_id="b1", pid=4242, start_ticks=100)
SUP = ev.Holder(host="vm", boot_id="b1", pid=77, start_ticks=5)
S = timedelta(seconds=1)


def _intended(holder: ev.Holder | None) -> Sim:
    """The first submission intended by ``holder``, its object never seen."""
    sim = Sim([LOST])
    decisions = decide(sim.job, sim.discovery([]), sim.plan, sim.now)
    assert kinds_of(decisions) == ["Submit"]
    sim.append(to_events(decisions, sim.job, sim.now, holder=holder))
    return sim


def test_the_attempt_names_its_holder_and_the_record_keeps_every_one() -> None:
    sim = _intended(CLI)
    assert sim.job.submissions[0].holders == (CLI,)
    sim.later(40)
    retry = decide(sim.job, sim.discovery([]), sim.plan, sim.now)
    assert kinds_of(retry) == ["RetrySubmit"]
    sim.append(to_events(retry, sim.job, sim.now, holder=SUP))
    sim.append(to_events(retry, sim.job, sim.now, holder=SUP))  # the same holder once
    assert sim.job.submissions[0].holders == (CLI, SUP)
    assert fold(sim.record, sim.now) == sim.job


def test_a_holder_is_an_additive_field_older_records_read_as_before() -> None:
    sim = _intended(None)
    event = sim.record[-1]
    assert b"holder" not in encode_event(event)  # absent, as every older record has it
    with_holder = ev.SubmissionIntended(seq=2, at=sim.now, submission=1, token="t",
                                        holder=CLI)
    assert decode_event(encode_event(with_holder)) == with_holder
    assert sim.job.submissions[0].holders == (None,)


def test_a_claim_whose_holder_is_gone_is_retried_within_the_backend_bound() -> None:
    sim = _intended(CLI)
    sim.later(1)
    gone = Gone(holders=frozenset({CLI}), submit_in_flight=timedelta(0))
    # Alive (not in gone): the attempt lease holds, as before.
    assert decide(sim.job, sim.discovery([]), sim.plan, sim.now) == []
    assert kinds_of(decide(sim.job, sim.discovery([]), sim.plan, sim.now, gone=gone)) \
        == ["RetrySubmit"]
    # A backend whose submit may land after its process is gone (sbatch: 30 s; here 10 s)
    # waits that bound after the attempt, and next_due says when.
    slow = Gone(holders=frozenset({CLI}), submit_in_flight=10 * S)
    assert decide(sim.job, sim.discovery([]), sim.plan, sim.now, gone=slow) == []
    due = next_due(sim.job, sim.discovery([]), sim.plan, sim.now, gone=slow)
    assert due == sim.job.submissions[0].attempted_at + 10 * S
    assert due < sim.job.submissions[0].attempted_at + ATTEMPT_LEASE
    assert kinds_of(decide(sim.job, sim.discovery([]), sim.plan, due, gone=slow)) \
        == ["RetrySubmit"]


def test_a_claim_with_a_holder_not_known_gone_waits_the_attempt_lease() -> None:
    gone = Gone(holders=frozenset({CLI}), submit_in_flight=timedelta(0))
    for holders in ((None,), (CLI, SUP), (SUP,)):
        sim = _intended(holders[0])
        for h in holders[1:]:
            sim.append([ev.SubmissionAttempted(seq=sim.job.version + 1, at=sim.now,
                                               submission=1, holder=h)])
        sim.later(1)
        assert decide(sim.job, sim.discovery([]), sim.plan, sim.now, gone=gone) == [], holders
        sim.later(ATTEMPT_LEASE.total_seconds())
        assert kinds_of(decide(sim.job, sim.discovery([]), sim.plan, sim.now, gone=gone)) \
            == ["RetrySubmit"], holders


def _cancelled_unresolved() -> Sim:
    """A person's cancel of a job whose submit was never resolved: committed cancelled
    once the claim expired, with no object bound (the issue's B)."""
    sim = _intended(CLI)
    sim.inject(ev.CancelRequested, actor="alice")
    assert sim.tick([]) == []  # a submit may be in flight
    sim.later(ATTEMPT_LEASE.total_seconds())
    assert kinds_of(sim.tick([])) == ["Commit"]
    assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED
    assert sim.job.submissions[0].unresolved
    return sim


def test_a_late_object_of_an_unresolved_attempt_is_stopped_as_a_duplicate() -> None:
    sim = _cancelled_unresolved()
    sim.later(11)
    late = obj(1, State.RUNNING)
    out = sim.tick([late])
    assert kinds_of(out) == ["StopDuplicate"]  # never bound to the finished job
    stop = out[0]
    assert isinstance(stop, StopDuplicate) and stop.ref == "r1"
    assert stop.cause.kind is K.DUPLICATE
    assert "never resolved before the job was cancelled" in stop.cause.detail
    assert isinstance(sim.record[-1], ev.DuplicateStopped)
    assert sim.job.submissions[0].ref is None
    assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED
    assert sim.tick([late]) == []  # recorded once; the stop is carried out by the shell


def test_a_finished_job_is_watched_while_an_attempt_may_still_publish() -> None:
    sim = _cancelled_unresolved()
    attempted = sim.job.submissions[0].attempted_at
    # Holders not known gone (alive, paused, or elsewhere): the horizon after the attempt.
    assert watch_until(sim.job, None, sim.now) == attempted + WATCH_UNRESOLVED
    # Every holder gone: the backend's bound after the attempt.
    gone = Gone(holders=frozenset({CLI}), submit_in_flight=10 * S)
    assert watch_until(sim.job, gone, sim.now) == attempted + 10 * S
    # A job without an unresolved attempt, or not finished, is not watched for it.
    assert watch_until(_intended(CLI).job, None, sim.now) is None
    bound = Sim([LOST])
    bound.tick([])
    bound.tick([obj(1, State.RUNNING)])
    bound.inject(ev.CancelRequested, actor="alice")
    bound.tick([obj(1, State.RUNNING)])
    bound.tick([obj(1, State.CANCELLED, K.CANCELLED)])
    assert bound.job.outcome is not None
    assert watch_until(bound.job, None, bound.now) is None


# ---- the watch while a holder lives (issue 45 item 12, the holder paused past 1 h) --------

H = timedelta(hours=1)


def _watch(sim: Sim, *, gone: frozenset[ev.Holder] = frozenset(),
           alive: frozenset[ev.Holder] = frozenset(),
           found_at: dict[ev.Holder, datetime] | None = None,
           bound: timedelta = 10 * S) -> datetime:
    until = watch_until(sim.job, Gone(holders=gone, alive=alive, found_at=found_at or {},
                                      submit_in_flight=bound), sim.now)
    assert until is not None
    return until


def test_a_holder_alive_keeps_the_watch_open_past_the_horizon() -> None:
    """The table: what each finding of the attempt's holders (CLI made the attempt, SUP the
    retry) gives, two hours after the last attempt."""
    sim = _cancelled_unresolved()
    sim.append([ev.SubmissionAttempted(seq=sim.job.version + 1, at=sim.now, submission=1,
                                       holder=SUP)])
    attempted = sim.job.submissions[0].attempted_at
    sim.later(2 * H.total_seconds())
    now = sim.now
    found = now - 30 * S  # SUP found gone half a minute ago
    rows: list[tuple[set[ev.Holder], set[ev.Holder], dict[ev.Holder, datetime], datetime,
                     bool]] = [
        # (gone, alive, found_at, until, still watched now)
        (set(), {CLI, SUP}, {}, now + 10 * S, True),  # both alive: asked again next look
        (set(), {CLI}, {}, now + 10 * S, True),  # SUP unseen (elsewhere): CLI keeps it open
        ({SUP}, {CLI}, {SUP: found}, now + 10 * S, True),
        ({CLI, SUP}, set(), {SUP: found}, found + 10 * S, False),  # the bound after found
        ({CLI, SUP}, set(), {}, attempted + 10 * S, False),  # none kept: at its attempt
        ({CLI}, set(), {CLI: now}, now + 10 * S, True),  # CLI just found gone, SUP unseen
        (set(), set(), {}, attempted + H, False),  # nobody seen: the horizon, long past
    ]
    for gone, alive, found_at, until, watched in rows:
        got = _watch(sim, gone=frozenset(gone), alive=frozenset(alive), found_at=found_at)
        assert got == until, (gone, alive, found_at)
        assert (not now > got) is watched, (gone, alive, found_at)


def test_a_watch_over_a_live_holder_is_never_over_at_a_zero_bound() -> None:
    """The local backend's bound is 0: a holder alive now is still not past (``now`` is
    not past ``now``); found gone, the next look after is."""
    sim = _cancelled_unresolved()
    sim.later(5 * H.total_seconds())
    until = _watch(sim, alive=frozenset({CLI}), bound=timedelta(0))
    assert until == sim.now and not sim.now > until
    found = sim.now
    sim.later(1)
    until = _watch(sim, gone=frozenset({CLI}), found_at={CLI: found}, bound=timedelta(0))
    assert until == found and sim.now > until


def test_an_attempt_without_a_holder_is_watched_for_the_horizon_only() -> None:
    sim = _intended(None)
    sim.inject(ev.CancelRequested, actor="alice")
    sim.later(ATTEMPT_LEASE.total_seconds())
    assert kinds_of(sim.tick([])) == ["Commit"]
    attempted = sim.job.submissions[0].attempted_at
    assert _watch(sim, alive=frozenset({CLI})) == attempted + H
