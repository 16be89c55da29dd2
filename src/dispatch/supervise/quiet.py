"""A job decide() and observe() had nothing for, kept between ticks (supervise/loop.py): not
decided again while its record and objects stay the same and no time-based decision is due
(core/next_due.py).

Its objects are the same when they compare equal to the ones it was quiet on, or, without
comparing them, when its backend reports changes (Discovery.changes) and says none of them
changed since the look they were last seen in: then a steady tick compares no objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dispatch.core import events as ev
from dispatch.core.model import Changes, Discovery, ObjectReport
from dispatch.core.next_due import objects_seen
from dispatch.core.record import Job


@dataclass(slots=True)
class Quiet:
    """A job decide() had nothing for: at which version, on which objects (compared by
    value), whether the look was complete, and from when until when that stays so (due None:
    no time-based decision ahead; a clock set back is not trusted). ``look``: the number of
    the backend's look its objects were last seen unchanged in (a backend that reports
    changes: Discovery.changes), None when unknown."""

    at: datetime
    version: int
    objects: tuple[ObjectReport, ...] | None
    complete: bool
    due: datetime | None
    gone: frozenset[ev.Holder] = frozenset()  # the job's attempt holders known gone then
    look: int | None = None

    def holds(self, job: Job, discovery: Discovery | None, changes: Changes | None,
              complete: bool, gone: frozenset[ev.Holder], now: datetime) -> bool:
        """Still the same answer (nothing) for ``job`` at ``now``; when so, its objects are
        known to be as they are in ``discovery``'s look."""
        if not (self.version == job.version and self.complete == complete
                and self.gone == gone and self.at <= now
                and (self.due is None or now < self.due)):
            return False
        if not (changes is not None and self.look == changes.since
                and not (changes.keys and changes.touches(names(job)))) \
                and self.objects != objects_seen(job, discovery):
            return False
        self.look = look_of(discovery)
        return True


def look_of(discovery: Discovery | None) -> int | None:
    changes = discovery.changes if discovery is not None else None
    return changes.look if changes is not None else None


def names(job: Job) -> list[str]:
    """The tokens and refs of ``job``'s submissions: what a backend's changes name."""
    out = [s.token for s in job.submissions]
    out.extend(s.ref for s in job.submissions if s.ref is not None)
    return out
