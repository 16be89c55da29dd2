"""Issue 45 item 12: ``watch_until`` over drawn records and drawn findings of the holders.

A finished job with a never-resolved submit attempt is watched: while one of the attempt's
holders is found alive the watch is not over (whatever the time since the attempt); a
holder found gone keeps it for the backend's bound after it was found gone; a holder that
cannot be judged from here (none recorded, another host) keeps it WATCH_UNRESOLVED after
the attempt; and a job with every attempt resolved is not watched at all.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.strategies_core import JOB, T0, spec_with

from dispatch.core import events as ev
from dispatch.core.decide import WATCH_UNRESOLVED, Gone, watch_until
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.record import Job, fold

POOL = [ev.Holder(host="vm", boot_id="b1", pid=p, start_ticks=p * 10) for p in (11, 12, 13)]
HOLDERS = st.sampled_from([*POOL, None])
SECONDS = st.integers(min_value=0, max_value=4 * 3600)


@st.composite
def finished_jobs(draw: st.DrawFn) -> Job:
    """A job with 1-3 submissions, each attempted by 1-3 holders at drawn times and
    resolved (bound or rejected) or not, then a committed outcome."""
    events: list[ev.Event] = [ev.JobCreated(seq=1, at=T0, job_id=JOB, spec=spec_with([]),
                                            declarations=Declarations(backend="local"))]
    at = T0
    for n in range(1, draw(st.integers(1, 3)) + 1):
        at += timedelta(seconds=draw(SECONDS))
        events.append(ev.SubmissionIntended(seq=len(events) + 1, at=at, submission=n,
                                            token=f"t{n}", holder=draw(HOLDERS)))
        for h in draw(st.lists(HOLDERS, max_size=2)):
            at += timedelta(seconds=draw(SECONDS))
            events.append(ev.SubmissionAttempted(seq=len(events) + 1, at=at, submission=n,
                                                 holder=h))
        end = draw(st.sampled_from(["unresolved", "bound", "rejected"]))
        if end == "bound":
            events.append(ev.SubmissionBound(seq=len(events) + 1, at=at, submission=n,
                                             ref=f"r{n}"))
        elif end == "rejected":
            events.append(ev.SubmissionRejected(seq=len(events) + 1, at=at, submission=n,
                                                cause=Cause(kind=CauseKind.LAUNCH_FAILED)))
    at += timedelta(seconds=draw(SECONDS))
    events.append(ev.OutcomeCommitted(seq=len(events) + 1, at=at, state=State.CANCELLED,
                                      cause=Cause(kind=CauseKind.CANCELLED)))
    return fold(events, at)


@st.composite
def findings(draw: st.DrawFn) -> Gone:
    """Each holder of the pool found gone (at a drawn time), alive, or not judged."""
    fate = {h: draw(st.sampled_from(["gone", "alive", "unseen"])) for h in POOL}
    gone = frozenset(h for h, f in fate.items() if f == "gone")
    found = {h: T0 + timedelta(seconds=draw(st.integers(0, 20 * 3600))) for h in gone
             if draw(st.booleans())}
    return Gone(holders=gone, alive=frozenset(h for h, f in fate.items() if f == "alive"),
                found_at=found, submit_in_flight=timedelta(seconds=draw(st.sampled_from(
                    [0, 10, 30]))))


@settings(max_examples=400, deadline=None)
@given(finished_jobs(), findings(), st.integers(0, 30 * 3600))
def test_watch_until_keeps_every_holders_window(job: Job, gone: Gone, after: int) -> None:
    now: datetime = T0 + timedelta(seconds=after)
    until = watch_until(job, gone, now)
    open_ = [s for s in job.submissions if s.unresolved]
    if not open_:
        assert until is None
        return
    assert until is not None
    bound = gone.submit_in_flight
    for s in open_:
        for h in s.holders:
            if h is not None and h in gone.alive:
                assert not now > until, "a holder alive: the watch is not over"
                assert until >= s.attempted_at + bound
            elif h is not None and h in gone.holders:
                assert until >= gone.found_at.get(h, s.attempted_at) + bound
            else:
                assert until >= s.attempted_at + WATCH_UNRESOLVED
    if all(h is not None and h in gone.holders for s in open_ for h in s.holders):
        # Every holder gone: exactly the bound after the last was found gone (or attempted).
        assert until == max(max(s.attempted_at, gone.found_at.get(h, s.attempted_at))
                            for s in open_ for h in s.holders if h is not None) + bound
    # Without any finding, every attempt keeps the horizon after it, as before holders.
    assert watch_until(job, None, now) == max(s.attempted_at for s in open_) + WATCH_UNRESOLVED


@settings(max_examples=200, deadline=None)
@given(finished_jobs(), findings(), st.integers(0, 30 * 3600))
def test_a_holder_found_alive_never_ends_the_watch_sooner_than_found_gone(
        job: Job, gone: Gone, after: int) -> None:
    """Finding a gone holder alive instead (found gone no later than now) never makes the
    watch shorter: a live holder may still publish from any moment on."""
    now = T0 + timedelta(seconds=after)
    for h in gone.holders:
        if gone.found_at.get(h, now) > now:
            continue
        revived = Gone(holders=gone.holders - {h}, alive=gone.alive | {h},
                       found_at={k: v for k, v in gone.found_at.items() if k != h},
                       submit_in_flight=gone.submit_in_flight)
        before, after_ = watch_until(job, gone, now), watch_until(job, revived, now)
        assert (before is None) == (after_ is None)
        if before is not None and after_ is not None:
            assert after_ >= before
