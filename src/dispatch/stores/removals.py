"""How many jobs were ever taken out of the store, and every job's row as /metrics keeps it
(schema version 7, issue 49).

A reader that keeps what it knows of every job (the /metrics totals: http/versions.py)
learns what was written from the change marks (stores/changes.py), but a job taken out
(``dispatch prune``, or a row deleted by hand) is never a change. So the database counts
removals itself: a trigger on the jobs table adds to ``removals.jobs`` in the very
statement that deletes a job, whoever runs it (SQLite: once per row; PostgreSQL: once per
statement, which may count a statement that deleted nothing: a reader then reads the
table whole for nothing, never misses one). A reader compares the count with the one it
saw last: one row read, where it counted the whole table before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dispatch.stores.base import RecordDamaged, RecordStore

if TYPE_CHECKING:
    from dispatch.stores.postgres import PostgresStore

SQLITE_V7 = [
    "CREATE TABLE removals (jobs INTEGER NOT NULL)",  # one row: jobs removed, ever
    "INSERT INTO removals (jobs) VALUES (0)",
    """CREATE TRIGGER jobs_removed AFTER DELETE ON jobs BEGIN
        UPDATE removals SET jobs = jobs + 1;
    END""",
]
PG_V7 = [
    "CREATE TABLE dispatch_removals (jobs bigint NOT NULL)",
    "INSERT INTO dispatch_removals (jobs) VALUES (0)",
    """CREATE FUNCTION dispatch_jobs_removed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE dispatch_removals SET jobs = jobs + 1;
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER dispatch_jobs_removed AFTER DELETE ON dispatch_jobs"
    " FOR EACH STATEMENT EXECUTE FUNCTION dispatch_jobs_removed()",
    "CREATE TRIGGER dispatch_jobs_truncated AFTER TRUNCATE ON dispatch_jobs"
    " FOR EACH STATEMENT EXECUTE FUNCTION dispatch_jobs_removed()",
]

SQLITE_COUNT = "SELECT jobs FROM removals"
PG_COUNT = "SELECT jobs FROM dispatch_removals"
# The mark a look that reads every job passes to its next ``changes``, taken before it reads
# them (stores/changes.py): SQLite's highest mark, PostgreSQL's oldest running transaction.
SQLITE_MARK = "SELECT coalesce(max(changed), 0) FROM jobs"
# (job_id, version, terminal, outcome) of every job: what /metrics keeps of each.
SQLITE_EVERY_JOB = "SELECT job_id, version, terminal, outcome FROM jobs"
PG_EVERY_JOB = "SELECT job_id, version, terminal, outcome FROM dispatch_jobs"


def _count(where: str, rows: list[tuple[object, ...]]) -> int:
    if len(rows) != 1 or isinstance(rows[0][0], bool) or not isinstance(rows[0][0], int):
        raise RecordDamaged(where, "(every job)", None,
                            f"the removals table holds {rows!r}, not one count")
    return rows[0][0]


def removed(store: RecordStore) -> int:
    """How many jobs were ever removed from ``store``."""
    from dispatch.stores.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        with store._guard("count the jobs removed") as conn:
            return _count(store.describe(), conn.execute(SQLITE_COUNT).fetchall())
    return _count(store.describe(), _postgres(store)._query("count the jobs removed",
                                                            PG_COUNT))


def _postgres(store: RecordStore) -> PostgresStore:
    """The store as PostgreSQL: the only kind besides SQLite."""
    from dispatch.stores.postgres import PostgresStore

    if not isinstance(store, PostgresStore):
        raise TypeError(f"no such store kind: {type(store).__name__}")
    return store


JobColumns = tuple[str, int, bool | int, str | None]  # job, version, finished, outcome


def every_job(store: RecordStore) -> tuple[list[JobColumns], int]:
    """Every job's (id, version, finished, outcome column), one scan and no record read,
    and the mark to pass to the next ``changes`` (taken before the scan: nothing written
    after it is missed). ``changes(None)`` gives a mark too, but lists every live job to
    give it."""
    from dispatch.stores.changes import PG_LOOK_MARK
    from dispatch.stores.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        with store._guard("list every job") as conn:
            mark = int(conn.execute(SQLITE_MARK).fetchone()[0])
            rows = conn.execute(SQLITE_EVERY_JOB).fetchall()
    else:
        pg = _postgres(store)
        mark = int(pg._query("look for changed jobs", PG_LOOK_MARK)[0][0])
        rows = pg._query("list every job", PG_EVERY_JOB)
    for job_id, version, _, _ in rows:  # both drivers give str and int for these columns
        if type(version) is not int:
            raise RecordDamaged(store.describe(), str(job_id),
                                None, f"the job's version is {version!r}")
    return rows, mark


__all__ = ["PG_V7", "SQLITE_V7", "JobColumns", "every_job", "removed"]
