"""next_due(): until when decide() stays quiet for a job whose record and objects stay as
they are (pure; `now` passed in).

decide() depends on `now` only through thresholds of the form "now >= a recorded time + a
fixed wait": a submit's claim expires (attempted_at + the attempt lease), a stop or cancel
is sent again (stop_at / cancel_sent_at / a duplicate's stop + the resend wait), a running
object on a lost node is fenced (lost_since + the node-loss window); after a takeover, a
claim of the previous holder's expires at the takeover + the backend's submit bound (a send
it recorded is sent again at once, which depends on no time ahead); a claim whose every
holder is gone expires at the attempt + that bound (which holders are gone is an input, like
the objects). Every other use of `now` (a cause's time, the attribution of an end to a
published exclusion) only shapes decisions that are made anyway.
Between two thresholds every one of these tests has the same answer, so an empty answer at
`now` stays empty until the earliest threshold after `now`. Holds, give-ups and segment
decisions wait for a person or the scheduler, never for time. A supervisor uses this to skip
decide() for jobs where nothing changed (supervise/loop.py; property:
tests/property/test_next_due.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dispatch.core.decide import ATTEMPT_LEASE, RESEND_AFTER, Gone, Takeover
from dispatch.core.model import Discovery, ObjectReport
from dispatch.core.policy import Plan
from dispatch.core.record import Job


def objects_seen(job: Job, discovery: Discovery | None) -> tuple[ObjectReport, ...] | None:
    """The objects of ``discovery`` that decide() and observe() read for ``job``: the ones
    carrying its tokens, then the ones its submissions are bound to (None: no look)."""
    if discovery is None:
        return None
    bound = tuple(o for s in job.submissions
                  if s.ref is not None and (o := discovery.get(s.ref)) is not None)
    return discovery.of_job(job.id) + bound


def next_due(job: Job, discovery: Discovery | None, plan: Plan, now: datetime, *,
             attempt_lease: timedelta = ATTEMPT_LEASE,
             resend_after: timedelta = RESEND_AFTER,
             takeover: Takeover | None = None, gone: Gone | None = None
             ) -> datetime | None:
    """The earliest time after ``now`` at which decide(job, discovery, plan, t) may differ
    from decide(job, discovery, plan, now) in whether it decides anything; None when no
    threshold lies ahead (only a change of the record or of the objects can change it).

    Every threshold decide() tests is listed, whether or not that branch is reached (an
    extra one only makes the answer earlier, which is always safe), except a claim on a
    submit that is already bound or ended: decide reads that claim only for the current
    submission with no object bound."""
    times: list[datetime] = []
    cur = job.current
    if cur is not None and cur.ref is None and not cur.ended:
        # The claim on a submit not yet bound (a quiet answer binds nothing this tick).
        times.append(cur.attempted_at + attempt_lease)
        if takeover is not None and cur.attempted_at < takeover.at:
            # Another holder's claim: it expires the backend's bound after the takeover.
            times.append(takeover.at + takeover.submit_in_flight)
        if gone is not None and gone.all_gone(cur):
            # Every holder gone: the claim expires the backend's bound after the attempt.
            times.append(cur.attempted_at + gone.submit_in_flight)
    for s in job.submissions:
        if s.stop_at is not None:
            times.append(s.stop_at + resend_after)
        if s.cancel_sent_at is not None:
            times.append(s.cancel_sent_at + resend_after)
    for _ref, stopped_at in job.duplicate_stops:
        times.append(stopped_at + resend_after)
    window = plan.declarations.node_loss_window
    for o in objects_seen(job, discovery) or ():
        if o.lost_since is not None:
            times.append(o.lost_since + window)
    return min((t for t in times if t > now), default=None)


__all__ = ["next_due", "objects_seen"]
