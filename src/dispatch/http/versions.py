"""Every job's version and whether it is finished, kept between /metrics scrapes, so that a
scrape costs what changed and not what exists (issue 36).

The first look reads the jobs table whole; each later one asks the store which jobs were
written to since (``RecordStore.changes``: one indexed query). A job taken out of the store
(pruned) is never reported as a change, so each look also compares the store's count of
jobs (``stamp``) with the jobs it knows, and reads the table whole again when they differ.
"""

from __future__ import annotations

from dispatch.stores.base import RecordStore


class JobVersions:
    def __init__(self) -> None:
        self.mark: int | None = None
        self.rows: dict[str, tuple[int, bool]] = {}  # job -> (version, finished)

    def refresh(self, store: RecordStore) -> tuple[dict[str, tuple[int, bool]], set[str] | None]:
        """Every job's (version, finished), and the jobs the store reported written to since
        the last look (None: the table was read whole, any job may have changed or gone)."""
        if self.mark is not None:
            changes, mark = store.changes(self.mark)
            for c in changes:
                self.rows[c.job_id] = (c.version, c.terminal)
            self.mark = mark
            if store.stamp()[0] == len(self.rows):
                return self.rows, {c.job_id for c in changes}
        # The mark is taken before the table is read: nothing written after it is missed.
        _, mark = store.changes(None)
        self.rows = {r.job_id: (r.version, r.terminal) for r in store.list_jobs()}
        self.mark = mark
        return self.rows, None


__all__ = ["JobVersions"]
