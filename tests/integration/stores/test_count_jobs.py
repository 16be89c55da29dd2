"""Issue 48 item 9: the stores count the jobs a list's filters keep, by outcome, from the jobs
table's columns (stores/query.py count_sql: no record read), on SQLite and PostgreSQL: the
dashboard's counts per state and its "page 1 of 7 · 312 jobs"."""

from __future__ import annotations

from tests.fleet import fill
from tests.integration.stores.helpers import Backdoor

from dispatch.stores.base import RecordStore
from dispatch.stores.query import JobQuery


def test_counts_by_outcome_under_the_filters(store: RecordStore) -> None:
    fill(store)  # 12 succeeded (2 after a preemption), 1 failed, 1 unfinished
    assert store.count_jobs(JobQuery()) == {"succeeded": 12, "failed": 1, "": 1}
    assert store.count_jobs(JobQuery(name_glob="sweep-1*")) == {"succeeded": 3, "": 1}
    # a cause: the finished jobs whose history holds it, and every unfinished one (the
    # caller looks at those, as query_jobs's cause says)
    assert store.count_jobs(JobQuery(cause="preempted")) == {"succeeded": 2, "": 1}
    assert store.count_jobs(JobQuery(terminal=True, backend="local")) == {
        "succeeded": 12, "failed": 1}
    assert store.count_jobs(JobQuery(backend="slurm")) == {}
    # order, cursor and limit are a page's, not the count's
    assert store.count_jobs(JobQuery(limit=2, descending=True, after=(0, "x"))) == {
        "succeeded": 12, "failed": 1, "": 1}


def test_jobs_finished_before_outcomes_were_kept_are_counted_apart(
        store: RecordStore, backdoor: Backdoor) -> None:
    fill(store)
    backdoor.execute("UPDATE jobs SET outcome = NULL WHERE job_id = 'jsweep5'",
                     "UPDATE dispatch_jobs SET outcome = NULL WHERE job_id = 'jsweep5'")
    # None: finished, state not in the table (the caller reads those records)
    assert store.count_jobs(JobQuery()) == {"succeeded": 12, None: 1, "": 1}
