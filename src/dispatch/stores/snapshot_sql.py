"""The snapshot table's statements for both stores, and its rows (stores/snapshot.py says
what a snapshot is and when it is trusted). Pure: SQL text and row shaping."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple


class Stored(NamedTuple):
    """A snapshot row, with the stored body of the event at its seq (None: no such event),
    the job's version as the same statement read it (None: no such job) and whether the
    job's stored events were ever edited in place (stores/schema.py, version 5). A tuple:
    one is made per job a list reads, so it is cheap to make."""

    job_id: str
    version: int
    format: int
    body: bytes
    digest: str
    event_body: bytes | None
    job_version: int | None = None
    edited: bool = False


def as_bytes(v: object) -> bytes:
    """A stored body as bytes (SQLite may hold a body as TEXT or BLOB; PostgreSQL text)."""
    return v if isinstance(v, bytes) else str(v).encode()


def stored_rows(rows: Sequence[tuple[Any, ...]]) -> list[Stored]:
    # Both drivers already give str and int for the text and integer columns.
    return [Stored(j, v, f, as_bytes(b), d, None if e is None else as_bytes(e), jv, bool(ed))
            for j, v, f, b, d, e, jv, ed in rows]


SQLITE_READ = (
    "SELECT s.job_id, s.version, s.format, s.body, s.digest, e.body, j.version, j.edited"
    " FROM snapshots s LEFT JOIN events e ON e.job_id = s.job_id AND e.seq = s.version"
    " LEFT JOIN jobs j ON j.job_id = s.job_id"
    " WHERE s.job_id IN (SELECT value FROM json_each(?))")
PG_READ = (
    "SELECT s.job_id, s.version, s.format, s.body, s.digest, e.body, j.version, j.edited"
    " FROM dispatch_snapshots s"
    " LEFT JOIN dispatch_events e ON e.job_id = s.job_id AND e.seq = s.version"
    " LEFT JOIN dispatch_jobs j ON j.job_id = s.job_id"
    " WHERE s.job_id = ANY(%s)")
# The body a new snapshot's digest covers, and whether the job was edited (then none is
# written: a job whose events were edited in place is read whole from then on).
SQLITE_EVENT = ("SELECT e.body, j.edited FROM events e JOIN jobs j ON j.job_id = e.job_id"
                " WHERE e.job_id = ? AND e.seq = ?")
PG_EVENT = ("SELECT e.body, j.edited FROM dispatch_events e"
            " JOIN dispatch_jobs j ON j.job_id = e.job_id WHERE e.job_id = %s AND e.seq = %s")
# A newer snapshot is never replaced by an older one (two readers writing at once).
SQLITE_WRITE = (
    "INSERT INTO snapshots (job_id, version, format, body, digest) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (job_id) DO UPDATE SET version = excluded.version, format = excluded.format,"
    " body = excluded.body, digest = excluded.digest WHERE excluded.version >= version")
PG_WRITE = (
    "INSERT INTO dispatch_snapshots (job_id, version, format, body, digest)"
    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (job_id) DO UPDATE SET"
    " version = excluded.version, format = excluded.format, body = excluded.body,"
    " digest = excluded.digest WHERE excluded.version >= dispatch_snapshots.version")
SQLITE_DROP = "DELETE FROM snapshots WHERE job_id = ?"
PG_DROP = "DELETE FROM dispatch_snapshots WHERE job_id = %s"
