"""How long decide() waits before it repeats a send or a submit another may still be carrying
out (pure). A supervisor's own sends wait RESEND_AFTER; its own claims ATTEMPT_LEASE; after a
takeover, what the previous holder recorded waits only what the backend declares (issue 39).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from dispatch.core.record import Submission

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


@dataclass(frozen=True)
class Waits:
    """The waits decide() applies to sends and submits already recorded."""

    attempt_lease: timedelta
    resend_after: timedelta
    takeover: Takeover | None

    def resend(self, last: datetime | None, now: datetime) -> bool:
        """Send a stop or cancel (again): never sent, sent long enough ago, or recorded by
        another holder before the takeover (it may have died between the record and the
        send: issue 39; both are idempotent at every scheduler)."""
        return last is None or now - last >= self.resend_after or (
            self.takeover is not None and last < self.takeover.at)

    def claim_expired(self, s: Submission, now: datetime) -> bool:
        """A submit claimed at ``s.attempted_at`` can no longer be in flight: the attempt
        lease has passed, or the claim is another holder's from before the takeover and the
        backend's bound has passed since the takeover (the holder's lease had ended)."""
        t = self.takeover
        return now - s.attempted_at >= self.attempt_lease or (
            t is not None and s.attempted_at < t.at and now - t.at >= t.submit_in_flight)
