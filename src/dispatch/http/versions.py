"""Every job's version and whether it is finished, kept between /metrics scrapes, so that a
scrape costs what changed and not what exists (issue 36).

The first look reads the jobs table whole; each later one asks the store which jobs were
written to since (``RecordStore.changes``: one indexed query). A job taken out of the store
(pruned) is never reported as a change, so each look also counts the store's jobs and reads
the table whole again when that count differs from the jobs it knows. The count is the
store's counts by outcome (``count_jobs``, which /metrics shows as ``dispatch_jobs_stored``),
kept for the scrape to show: one count per scrape serves both (issue 49), where a stamp of
the whole table (``stamp``, its versions summed) was read besides.
"""

from __future__ import annotations

from dispatch.stores.base import RecordStore
from dispatch.stores.query import JobQuery

EVERY_JOB = JobQuery()


class JobVersions:
    def __init__(self) -> None:
        self.mark: int | None = None
        self.rows: dict[str, tuple[int, bool]] = {}  # job -> (version, finished)
        # the store's counts by outcome at the last look (RecordStore.count_jobs)
        self.counts: dict[str | None, int] = {}

    def refresh(self, store: RecordStore) -> tuple[dict[str, tuple[int, bool]], set[str] | None]:
        """Every job's (version, finished), and the jobs the store reported written to since
        the last look (None: the table was read whole, any job may have changed or gone).
        ``counts`` is then the store's counts by outcome, taken after the changes."""
        if self.mark is not None:
            changes, mark = store.changes(self.mark)
            for c in changes:
                self.rows[c.job_id] = (c.version, c.terminal)
            self.mark = mark
            # Every job is counted once, under its outcome or '' or None (count_jobs).
            self.counts = store.count_jobs(EVERY_JOB)
            if sum(self.counts.values()) == len(self.rows):
                return self.rows, {c.job_id for c in changes}
        # The mark is taken before the table is read: nothing written after it is missed.
        _, mark = store.changes(None)
        self.rows = {r.job_id: (r.version, r.terminal) for r in store.list_jobs()}
        self.mark = mark
        self.counts = store.count_jobs(EVERY_JOB)
        return self.rows, None


__all__ = ["EVERY_JOB", "JobVersions"]
