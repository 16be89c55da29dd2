"""Which unfinished jobs may be held, from the store's tables alone (issue 49).

Placing a hold commits a ``HoldPlaced`` event, and the append that commits it writes its
cause kind to the job's history causes (stores/causes.py, schema version 6; filled from
the stored events by the migration). So every held job is an unfinished job with a row
there, or one whose stored events were edited in place (``jobs.edited``: its record may
now say anything). The answer narrows; each job's record then decides (service/held.py),
so a job with a cause and no hold is never shown held.
"""

from __future__ import annotations

from dispatch.stores.base import RecordStore

_SQL = ("SELECT j.job_id FROM {jobs} j WHERE {live} AND (j.edited > 0 OR EXISTS"
        " (SELECT 1 FROM {causes} c WHERE c.job_id = j.job_id)) ORDER BY j.job_id")
SQLITE = _SQL.format(jobs="jobs", causes="job_causes", live="j.terminal = 0")
PG = _SQL.format(jobs="dispatch_jobs", causes="dispatch_job_causes", live="NOT j.terminal")


def may_be_held(store: RecordStore) -> list[str] | None:
    """The unfinished jobs that may be held (a superset of the held ones); None for a store
    that cannot say, whose every live job is then folded."""
    from dispatch.stores.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        with store._guard("list the jobs that may be held") as conn:
            return [str(r[0]) for r in conn.execute(SQLITE).fetchall()]
    from dispatch.stores.postgres import PostgresStore

    if isinstance(store, PostgresStore):
        return [str(r[0]) for r in store._query("list the jobs that may be held", PG)]
    return None


__all__ = ["PG", "SQLITE", "may_be_held"]
