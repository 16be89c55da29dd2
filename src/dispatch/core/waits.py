"""How long decide() waits before it repeats a send or a submit another may still be carrying
out (pure). A supervisor's own sends wait RESEND_AFTER; its own claims ATTEMPT_LEASE; after a
takeover, what the previous holder recorded waits only what the backend declares (issue 39);
a claim whose every holder is gone waits only that bound too, and a finished job is watched
while a never-resolved attempt may still publish (issue 45).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dispatch.core.events import Holder
from dispatch.core.record import Job, Submission

# A submit call claimed by one supervisor is not retried by another for this long: it may
# still be in flight. A duplicate that slips through anyway is caught by S15. After a
# takeover (``Takeover``) a claim of the previous holder's waits only the backend's own bound.
ATTEMPT_LEASE = timedelta(seconds=30)
# A stop or cancel already sent is sent again after this long if the object still runs; one
# recorded before a takeover is sent again at once (the holder may have died before sending).
RESEND_AFTER = timedelta(seconds=30)


@dataclass(frozen=True)
class Takeover:
    """The acting supervisor took the job's scope over at ``at`` (its lease's epoch began
    then): every send or submit recorded before ``at`` is another holder's, whose lease had
    ended. ``submit_in_flight``: how long a submit call of a process that is gone can still
    land (the backend's declared bound, base.Backend.submit_in_flight)."""

    at: datetime
    submit_in_flight: timedelta


# A job whose outcome is committed while a submit attempt of it was never resolved (no object
# bound, no rejection) is still watched: an object that attempt publishes late is stopped
# and recorded as a duplicate (S15). A holder found alive (a paused supervisor) keeps the
# watch open while it lives; one found gone, for the backend's submit bound after it was
# found gone; one that cannot be judged from here (another host or boot, none recorded, this
# very process), for this long after the last attempt (watch_until).
WATCH_UNRESOLVED = timedelta(hours=1)


@dataclass(frozen=True)
class Gone:
    """What the shell found of the submit attempts' holders: those gone (on this very host
    and boot: their pid no longer the process that attempted) and when it first found each
    gone (``found_at``; one missing counts as found at its attempt), those alive (this host
    and boot, the pid still that process: running or paused), and the backend's submit
    bound: how long a submit call of a process that is gone can still land
    (base.Backend.submit_in_flight). A holder in neither set cannot be judged from here."""

    holders: frozenset[Holder]
    submit_in_flight: timedelta
    alive: frozenset[Holder] = frozenset()
    found_at: Mapping[Holder, datetime] = field(default_factory=dict)

    def all_gone(self, s: Submission) -> bool:
        """Every attempt of ``s`` names its holder, and each of them is gone."""
        return bool(s.holders) and all(h is not None and h in self.holders
                                       for h in s.holders)


def watch_until(job: Job, gone: Gone | None, now: datetime) -> datetime | None:
    """Until when a finished job must still be looked at for an object a never-resolved
    submit attempt may publish (None: nothing to watch for); the watch is over once ``now``
    is past it. Per holder of each unresolved attempt: found alive, ``now`` plus the submit
    bound (asked again at the next look, so the watch goes on while it lives); found gone,
    the bound after it was found gone (a child it started, such as sbatch, lands within it);
    else WATCH_UNRESOLVED after the attempt. Pure: the times are the record's and ``now``,
    the holders' fate the shell's finding."""
    if job.outcome is None:
        return None
    until: datetime | None = None
    for s in job.submissions:
        if not s.unresolved:
            continue
        ends = [_holder_watch(s, h, gone, now) for h in s.holders] or [
            s.attempted_at + WATCH_UNRESOLVED]
        t = max(ends)
        until = t if until is None else max(until, t)
    return until


def _holder_watch(s: Submission, h: Holder | None, gone: Gone | None,
                  now: datetime) -> datetime:
    """Until when the attempt ``s`` of holder ``h`` may still publish."""
    if gone is None or h is None:
        return s.attempted_at + WATCH_UNRESOLVED
    if h in gone.alive:
        return max(now, s.attempted_at) + gone.submit_in_flight
    if h in gone.holders:
        return max(s.attempted_at, gone.found_at.get(h, s.attempted_at)) + gone.submit_in_flight
    return s.attempted_at + WATCH_UNRESOLVED


@dataclass(frozen=True)
class Waits:
    """The waits decide() applies to sends and submits already recorded."""

    attempt_lease: timedelta
    resend_after: timedelta
    takeover: Takeover | None
    gone: Gone | None = None

    def resend(self, last: datetime | None, now: datetime) -> bool:
        """Send a stop or cancel (again): never sent, sent long enough ago, or recorded by
        another holder before the takeover (it may have died between the record and the
        send: issue 39; both are idempotent at every scheduler)."""
        return last is None or now - last >= self.resend_after or (
            self.takeover is not None and last < self.takeover.at)

    def claim_expired(self, s: Submission, now: datetime) -> bool:
        """A submit claimed at ``s.attempted_at`` can no longer be in flight: the attempt
        lease has passed, or the claim is another holder's from before the takeover and the
        backend's bound has passed since the takeover (the holder's lease had ended), or every
        process that attempted it is gone and the backend's bound has passed since the last
        attempt (a child such as sbatch, started after the attempt was recorded, gives up
        within that bound whatever happened to its parent)."""
        t, g = self.takeover, self.gone
        return now - s.attempted_at >= self.attempt_lease or (
            t is not None and s.attempted_at < t.at and now - t.at >= t.submit_in_flight) or (
            g is not None and g.all_gone(s) and now - s.attempted_at >= g.submit_in_flight)
