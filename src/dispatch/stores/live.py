"""A supervisor's live jobs, kept folded between ticks: each tick reads only what changed.

The first look lists every live job of the scope and folds each whole record; every later
look asks the store which jobs were written to since (one indexed query, stores/changes.py)
and reads, for those only, the events after the version already folded (one query), which
``record.advance`` folds on: the same Job a whole fold gives (tests/property/
test_incremental_fold.py). A job that ends leaves the set; one whose record cannot be used
is set aside with its error, as ``reading.fold_records`` does, and read whole again next time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from dispatch.core.events import Event
from dispatch.core.record import Job, advance, fold
from dispatch.errors import DispatchError
from dispatch.stores.base import RecordStore
from dispatch.stores.reading import RECORD_ERRORS


class LiveFolds:
    """The live jobs of ``scope`` (None: every scope), folded at the version last read."""

    def __init__(self, store: RecordStore, scope: str | None = None) -> None:
        self.store = store
        self.scope = scope
        self.mark: int | None = None
        self.wanted: dict[str, int] = {}  # live job -> its version as the store last said
        self.folded: dict[str, Job] = {}
        self.unfolded: set[str] = set()  # live jobs whose record could not be used
        self.fresh: set[str] = set()  # the jobs read at the last refresh

    def refresh(self, now: datetime) -> tuple[list[Job], dict[str, DispatchError]]:
        """The live jobs, folded at their current versions (creation order), and the ones
        whose record cannot be used, each with its error."""
        changes, self.mark = self.store.changes(self.mark, scope=self.scope)
        # Only the jobs written to since, and those set aside last time, are read: a tick
        # costs what changed, not the live set (issue 49).
        stale = dict.fromkeys(self.unfolded & self.wanted.keys(), 0)
        for c in changes:
            if c.terminal:
                self.wanted.pop(c.job_id, None)
                self.folded.pop(c.job_id, None)
                stale.pop(c.job_id, None)
                continue
            self.wanted[c.job_id] = c.version
            held = self.folded.get(c.job_id)
            if held is None or held.version > c.version:
                stale[c.job_id] = 0
            elif held.version < c.version:
                stale[c.job_id] = held.version
        errors = self._catch_up(stale, now)
        self.fresh = set(stale)
        # set aside, or not caught up (nothing read): read whole at the next refresh
        self.unfolded = {j for j in stale if j not in self.folded
                         or self.folded[j].version < self.wanted.get(j, 0)}
        if len(self.folded) == len(self.wanted):  # every live job folded: in their order
            return list(self.folded.values()), errors
        return [self.folded[j] for j in self.wanted if j in self.folded], errors

    def _catch_up(self, stale: dict[str, int], now: datetime) -> dict[str, DispatchError]:
        errors: dict[str, DispatchError] = {}
        if not stale:
            return errors
        try:
            tails = self.store.read_after(stale)
        except RECORD_ERRORS:
            tails = {}
            for job_id, after in stale.items():  # one bad record never hides the others
                try:
                    tails.update(self.store.read_after({job_id: after}))
                except RECORD_ERRORS as err:
                    errors[job_id] = err
        for job_id in stale:  # in the order they were found (the live jobs' order)
            events = tails.get(job_id)
            if events is None:
                continue
            try:
                self.folded[job_id] = self._fold_on(job_id, stale[job_id], events, now)
            except RECORD_ERRORS as err:
                errors[job_id] = err
        for job_id in errors:
            self.folded.pop(job_id, None)  # read whole next time
        return errors

    def _fold_on(self, job_id: str, after: int, events: Sequence[Event], now: datetime
                 ) -> Job:
        if after == 0:
            from dispatch.core.record import check_record

            check_record(events, job_id)
            return fold(events, now, job_id=job_id)
        return advance(self.folded[job_id], events)
