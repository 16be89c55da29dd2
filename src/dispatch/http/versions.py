"""Every job's version and whether it is finished, kept between /metrics scrapes, so that a
scrape costs what changed and not what exists (issue 36).

The first look reads the jobs table whole; each later one asks the store which jobs were
written to since (``RecordStore.changes``: one indexed query). A job taken out of the store
(pruned) is never reported as a change, so each look also reads the store's count of jobs
ever removed (stores/removals.py, kept by a trigger: one row) and reads the table whole
again when it moved. The store's counts by outcome, which /metrics shows as
``dispatch_jobs_stored``, are kept from the same rows: each job's outcome column comes with
its change, so a scrape counts nothing (issue 49; before, it counted the whole table once
per scrape, about 10 ms of CPU at 101,000 jobs, which also caught a prune).
"""

from __future__ import annotations

from collections import Counter

from dispatch.stores.base import RecordStore
from dispatch.stores.query import JobQuery
from dispatch.stores.removals import every_job, removed

EVERY_JOB = JobQuery()


def _move(counts: Counter[str | None], terminal: bool, outcome: str | None,
          sign: int) -> None:
    """One job's share of ``RecordStore.count_jobs`` (stores/query.py ``count_rows``): its
    outcome column's group, and an unfinished job is '' rather than None."""
    counts[outcome] += sign
    if not terminal:
        counts[""] += sign
        counts[None] -= sign


class JobVersions:
    def __init__(self) -> None:
        self.mark: int | None = None
        self.rows: dict[str, tuple[int, bool]] = {}  # job -> (version, finished)
        self._outcomes: dict[str, str] = {}  # job -> its outcome column, where it has one
        self._tally: Counter[str | None] = Counter()  # count_jobs' groups, kept
        self._removed: int | None = None  # the store's count of removals at the last look

    @property
    def counts(self) -> dict[str | None, int]:
        """The store's counts by outcome at the last look, as ``count_jobs`` answers them."""
        return {k: n for k, n in self._tally.items() if n}

    def refresh(self, store: RecordStore) -> tuple[dict[str, tuple[int, bool]], set[str] | None]:
        """Every job's (version, finished), and the jobs the store reported written to since
        the last look (None: the table was read whole, any job may have changed or gone).
        ``counts`` is then the store's counts by outcome."""
        gone = removed(store)  # before the changes: a prune after it moves it for next time
        if self.mark is not None and gone == self._removed:
            changes, mark = store.changes(self.mark)
            for c in changes:
                old = self.rows.get(c.job_id)
                if old is not None:
                    _move(self._tally, old[1], self._outcomes.get(c.job_id), -1)
                self._keep(c.job_id, c.version, c.terminal, c.outcome)
            self.mark = mark
            return self.rows, {c.job_id for c in changes}
        # The mark is taken before the table is read: nothing written after it is missed.
        listed, mark = every_job(store)
        self.rows = {job_id: (version, bool(terminal))
                     for job_id, version, terminal, _ in listed}
        self._outcomes = {job_id: outcome for job_id, _, _, outcome in listed
                          if outcome is not None}
        self._tally = Counter(outcome for _, _, _, outcome in listed)
        live = sum(1 for _, _, terminal, _ in listed if not terminal)
        self._tally[""] += live
        self._tally[None] -= live
        self.mark, self._removed = mark, gone
        return self.rows, None

    def _keep(self, job_id: str, version: int, terminal: bool, outcome: str | None) -> None:
        self.rows[job_id] = (version, terminal)
        if outcome is None:
            self._outcomes.pop(job_id, None)
        else:
            self._outcomes[job_id] = outcome
        _move(self._tally, terminal, outcome, 1)


__all__ = ["EVERY_JOB", "JobVersions"]
