"""Each job's /metrics part kept beside its record (schema version 7, issue 49): a cache,
never the truth, as snapshots are (stores/snapshot.py).

A job's part (http/fleet_tally.py ``Part``) depends only on its committed events, so on its
version. The collector writes the parts it computed, after the fact, in a transaction of
its own (a failure is logged, never an append's). A cold collector reads them back and
uses a part only when all of these hold, checked in the read's one statement: its version
is the job's current version, its format is this build's, and the job's stored events were
never edited in place (``jobs.edited``, stores/schema.py version 5: an edit keeps the
version, so a part written before it would vouch for a record that is no longer what it
was). Its body must then decode strictly (http/part_codec.py). Anything else is ignored:
the job is read and folded as without a cache, and its part written again. A part is only
written for a job still at the version it was computed at and never edited. A prune
deletes a job's part with its row (a foreign key: no part outlives its job, so an id
reused later never meets an old part). Deleting every part is always safe.
Pure but for the two functions at the end, which run the statements on a store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dispatch.stores.base import RecordStore

SQLITE_DDL = """CREATE TABLE metric_parts (
        job_id  TEXT PRIMARY KEY REFERENCES jobs (job_id),
        version INTEGER NOT NULL,  -- the job's version the part was computed at
        format  INTEGER NOT NULL,  -- http/part_codec.FORMAT; another one is ignored
        body    BLOB NOT NULL      -- the part (msgspec JSON)
    ) WITHOUT ROWID"""
PG_DDL = """CREATE TABLE dispatch_metric_parts (
        job_id  text PRIMARY KEY REFERENCES dispatch_jobs (job_id),
        version integer NOT NULL,
        format  integer NOT NULL,
        body    text NOT NULL
    )"""

_READ = ("SELECT p.job_id, p.version, p.body FROM {parts} p"
         " JOIN {jobs} j ON j.job_id = p.job_id AND j.version = p.version"
         " WHERE p.format = {mark} AND j.edited = 0")
SQLITE_READ = _READ.format(parts="metric_parts", jobs="jobs", mark="?")
PG_READ = _READ.format(parts="dispatch_metric_parts", jobs="dispatch_jobs", mark="%s")

# (version, format, body, job_id, version): written only while the job is at that version
# and was never edited; a row of another version or format is replaced.
_WRITE = ("INSERT INTO {parts} (job_id, version, format, body)"
          " SELECT j.job_id, {m}, {m}, {m} FROM {jobs} j"
          " WHERE j.job_id = {m} AND j.version = {m} AND j.edited = 0"
          " ON CONFLICT (job_id) DO UPDATE SET version = excluded.version,"
          " format = excluded.format, body = excluded.body")
SQLITE_WRITE = _WRITE.format(parts="metric_parts", jobs="jobs", m="?")
PG_WRITE = _WRITE.format(parts="dispatch_metric_parts", jobs="dispatch_jobs", m="%s")

CHUNK = 1000  # parts written in one SQLite transaction
# A part to write: (job id, the version it was computed at, its body).
Written = tuple[str, int, bytes]


def read_parts(store: RecordStore, format: int) -> list[tuple[str, int, bytes | str]] | None:
    """Every job's cached part that may be used (see the module): (job, version, body) as
    the driver gives them; None for a store that keeps none."""
    from dispatch.stores.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        with store._guard("read the cached /metrics parts") as conn:
            return conn.execute(SQLITE_READ, (format,)).fetchall()
    from dispatch.stores.postgres import PostgresStore

    if isinstance(store, PostgresStore):
        return store._query("read the cached /metrics parts", PG_READ, (format,))
    return None


def write_parts(store: RecordStore, format: int, parts: Sequence[Written]) -> None:
    """Keep ``parts`` in one transaction of their own (StoreError when it fails: the caller
    logs it)."""
    if not parts:
        return
    from dispatch.stores.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        # SQLite has one writer at a time: a transaction per CHUNK parts, so that a
        # collector's first build (every job's part) never holds the store's writers up
        # for longer than a few milliseconds at a time
        for at in range(0, len(parts), CHUNK):
            with store._guard(f"write {len(parts)} cached /metrics parts") as conn:
                store._begin("cache /metrics parts")
                conn.executemany(SQLITE_WRITE, [(v, format, b, j, v)
                                                for j, v, b in parts[at: at + CHUNK]])
                conn.execute("COMMIT")
        return
    from dispatch.stores.postgres import PostgresStore

    if isinstance(store, PostgresStore):
        import psycopg

        what = f"write {len(parts)} cached /metrics parts"
        rows = [(v, format, b.decode(), j, v) for j, v, b in parts]

        def work(cur: Any) -> None:
            cur.executemany(PG_WRITE, rows)
        try:
            store._write(what, work, lambda cur: True)  # a cache: lost is as good as kept
        except psycopg.Error as err:
            raise store._fail(what, err) from None


def drop_all(store: RecordStore) -> None:
    """Forget every cached part (always safe); for tests and an operator's repair."""
    from dispatch.stores.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        with store._guard("drop the cached /metrics parts") as conn:
            conn.execute("DELETE FROM metric_parts")
        return
    from dispatch.stores.postgres import PostgresStore

    if isinstance(store, PostgresStore):
        store._query("drop the cached /metrics parts",
                     "DELETE FROM dispatch_metric_parts RETURNING 1")


__all__ = ["PG_DDL", "SQLITE_DDL", "Written", "drop_all", "read_parts", "write_parts"]
