"""Issue 27: next_due() is safe. Where decide() has nothing to do at t0, it has nothing to do
at any t in [t0, next_due) for the same job and objects, so the supervisor may skip it.

Drawn over arbitrary records (any events in any order that fold) and arbitrary looks at the
job's objects, with `now` near the recorded times so the leases, resends and node-loss
windows are crossed both ways.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tests.strategies_core import (
    JOB,
    T0,
    Sim,
    causes,
    datetimes,
    executions,
    later_event,
    obj,
    renumber,
)

from dispatch.core import events as ev
from dispatch.core.decide import ATTEMPT_LEASE, RESEND_AFTER, Takeover, decide
from dispatch.core.model import Cause, CauseKind, Discovery, ObjectReport, State, token_for
from dispatch.core.next_due import next_due
from dispatch.core.policy import Declarations, Plan
from dispatch.core.record import Job, RecordError, fold
from dispatch.core.status import plan_of

WINDOWS = st.sampled_from([timedelta(0), timedelta(seconds=60), timedelta(seconds=300)])


def _recorded_times(job: Job) -> list[datetime]:
    out: list[datetime] = []
    for s in job.submissions:
        out += [s.attempted_at, *(t for t in (s.stop_at, s.cancel_sent_at) if t is not None)]
    return out


@st.composite
def looks(draw: st.DrawFn, job: Job, near: datetime) -> Discovery | None:
    """Any look at the job's objects: by its tokens, by its bound refs, strays; lost nodes
    shortly before ``near`` or at any time."""
    if draw(st.integers(0, 9)) == 0:
        return None
    n = len(job.submissions) + 1
    refs = [s.ref for s in job.submissions if s.ref is not None] + ["stray", "r1"]
    lost = st.none() | st.integers(0, 900).map(lambda s: near - timedelta(seconds=s)) \
        | datetimes
    reports = [ObjectReport(
        ref=draw(st.sampled_from(refs)),
        token=draw(st.sampled_from([token_for(JOB, draw(st.integers(1, n))), "other.1", None])),
        state=draw(st.sampled_from(State)), cause=draw(causes),
        executions=tuple(draw(st.lists(executions, max_size=2))),
        lost_since=draw(lost), gated=draw(st.booleans()))
        for _ in range(draw(st.integers(0, 4)))]
    unique = {r.ref: r for r in reversed(reports)}  # a ref names one object on a scheduler
    return Discovery(at=near, objects=tuple(reversed(unique.values())),
                     complete=draw(st.booleans()))


def assert_quiet_until_due(job: Job, look: Discovery | None, plan: Plan, t0: datetime,
                           fractions: list[float], lease: timedelta = ATTEMPT_LEASE,
                           resend: timedelta = RESEND_AFTER,
                           takeover: Takeover | None = None) -> None:
    if decide(job, look, plan, t0, attempt_lease=lease, resend_after=resend,
              takeover=takeover):
        return
    due = next_due(job, look, plan, t0, attempt_lease=lease, resend_after=resend,
                   takeover=takeover)
    assert due is None or due > t0
    span = (due - t0) if due is not None else timedelta(days=400)
    samples = [t0 + span * f for f in fractions]
    if due is not None:
        samples.append(due - timedelta(microseconds=1))
    for t in samples:
        if t >= t0 and (due is None or t < due):
            assert decide(job, look, plan, t, attempt_lease=lease, resend_after=resend,
                          takeover=takeover) == [], \
                (t0, t, due)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.filter_too_much])
@given(extra=st.lists(later_event, max_size=20), window=WINDOWS, data=st.data(),
       fractions=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=6),
       lease=st.sampled_from([ATTEMPT_LEASE, timedelta(seconds=5)]),
       resend=st.sampled_from([RESEND_AFTER, timedelta(seconds=90)]))
def test_decide_stays_quiet_until_next_due(extra: list, window: timedelta,
                                           data: st.DataObject, fractions: list[float],
                                           lease: timedelta, resend: timedelta) -> None:
    decl = Declarations(backend="slurm", node_loss_window=window)
    sim = Sim(declarations=decl)
    try:
        job = fold([sim.record[0], *renumber(extra, 1)], sim.now)
    except RecordError:
        assume(False)
        return
    recorded = _recorded_times(job)
    base = data.draw(st.sampled_from(recorded) | datetimes if recorded else datetimes)
    t0 = base + timedelta(seconds=data.draw(st.integers(-120, 400)))
    look = data.draw(looks(job, t0))
    # Issue 39: under a takeover (before or after the recorded times) with a backend's bound.
    takeover = data.draw(st.none() | st.builds(
        Takeover, at=st.integers(-60, 60).map(lambda s: t0 - timedelta(seconds=s)),
        submit_in_flight=st.sampled_from([timedelta(0), timedelta(seconds=10)])))
    if takeover is not None and takeover.at > t0:
        takeover = None  # a supervisor decides only after it took the scope
    assert_quiet_until_due(job, look, plan_of(job), t0, fractions, lease, resend, takeover)


def test_each_kind_of_wait_is_due_when_decide_acts() -> None:
    """The three waits, one by one: the due time is the moment decide acts again."""
    # A submit whose claim is held: due when the lease expires (then it is retried).
    decl = Declarations(backend="slurm", node_loss_window=timedelta(seconds=60))
    sim = Sim(declarations=decl)
    sim.tick([])
    assert sim.tick([]) == []
    due = next_due(sim.job, sim.discovery([]), sim.plan, sim.now)
    assert due == T0 + ATTEMPT_LEASE
    assert decide(sim.job, sim.discovery([]), sim.plan, due) != []
    # A bound, running object on a lost node: due when the node-loss window ends.
    sim.later(31)
    sim.tick([obj(1, State.RUNNING)])
    lost = obj(1, State.RUNNING, CauseKind.NODE_LOST, lost_since=sim.now)
    assert sim.tick([lost]) == []
    due = next_due(sim.job, sim.discovery([lost]), sim.plan, sim.now)
    assert due == sim.now + timedelta(seconds=60)
    assert decide(sim.job, sim.discovery([lost]), sim.plan, due) != []
    # A stop sent and the object still alive: due when the stop is sent again.
    sim.inject(ev.StopRequested, submission=1, ref="r1", cause=Cause(kind=CauseKind.UNKNOWN))
    running = obj(1, State.RUNNING)
    assert sim.tick([running]) == []
    due = next_due(sim.job, sim.discovery([running]), sim.plan, sim.now)
    assert due == sim.now + RESEND_AFTER
    assert decide(sim.job, sim.discovery([running]), sim.plan, due) != []
