"""The record store for several supervisors, possibly on different machines: PostgreSQL.

Conflict detection is the database's, not a convention between clients:
``append`` runs, in one transaction, ``UPDATE dispatch_jobs SET version = new WHERE job_id = ..
AND version = expected``. The UPDATE takes the job row's lock, so a second writer waits for
the first to commit and then (READ COMMITTED re-checks the WHERE clause against the committed
row) matches nothing: ConflictError, and its transaction is rolled back. The primary key
(job_id, seq) of dispatch_events is the last line of defence; a unique violation, or a
serialization failure under a stricter default isolation, is a ConflictError too.

Faults: every psycopg error becomes a StoreError naming the server (password masked). A
connection lost while COMMIT was on its way leaves the outcome unknown to the client: the
store reconnects and looks whether the write landed, so a write that reports failure has
written nothing, and one that landed is not reported as failed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from dispatch.core.codec import encode_event
from dispatch.core.events import Event, JobCreated, Superseded
from dispatch.core.record import Job
from dispatch.stores import attempts, schema
from dispatch.stores import snapshot_sql as snap
from dispatch.stores.base import (
    MIN_PREFIX,
    AlreadySuperseded,
    Change,
    ConflictError,
    Encoder,
    Fence,
    JobExists,
    JobMatch,
    JobNotFound,
    JobRow,
    RecordStore,
    StoreError,
    check_batch,
    check_created,
    check_successor,
    created_columns,
    match_row,
)
from dispatch.stores.batch import Append, Outcome, checked, in_lock_order
from dispatch.stores.changes import (
    PG_LOOK_MARK,
    PG_MARK,
    PG_READ_AFTER,
    change_rows,
    changes_sql,
    decode_tails,
)
from dispatch.stores.lease import PostgresLeases, check_fence_pg
from dispatch.stores.pg_append import RETRYABLE, append_each, append_rows, append_set
from dispatch.stores.postgres_schema import set_up
from dispatch.stores.prune import pg_prune_steps
from dispatch.stores.query import JobQuery, count_rows, count_sql, matches_sql, query_sql, stamp_sql
from dispatch.stores.reading import decode_rows, job_row
from dispatch.stores.snapshot_sql import Stored, stored_rows
from dispatch.stores.url import mask_password

CONNECT_TIMEOUT_S = 10
IDLE_IN_TXN_TIMEOUT_MS = 2000
"""Our transactions are a few statements sent back to back; one idle this long belongs to a
client that stopped or lost the network (the longest a takeover can be held up by it)."""
ACQUIRE_LOCK_TIMEOUT_MS = 200
"""How long taking a lease waits for the row (a stale append's FOR SHARE) before it tries
again at the next poll, so a standby's loop never hangs on it."""

T = TypeVar("T")
Cursor = psycopg.Cursor[Any]


def _hint(err: psycopg.Error) -> str:
    if isinstance(err, pg_errors.ReadOnlySqlTransaction):
        return (" (the database is read-only: default_transaction_read_only is on, or this is "
                "a standby; nothing was written)")
    if isinstance(err, pg_errors.UndefinedTable):
        return " (a table of the record store is missing)"
    return ""


class PostgresStore(RecordStore):
    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.RLock()
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as err:
            raise StoreError(f"bad PostgreSQL URL {self.describe()}: {self._clean(err)}") from None
        self._extra: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in params:
            self._extra["connect_timeout"] = CONNECT_TIMEOUT_S
        if "application_name" not in params:
            self._extra["application_name"] = "dispatch"
        self._closed = False
        self._conn = self._connect()
        try:
            self._setup()
        except BaseException:
            self._conn.close()
            raise

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(self._url, **self._extra)
            # A committed decision must survive a server crash, whatever the server default.
            conn.execute("SET synchronous_commit TO on")
            # A client stopped inside a transaction (SIGSTOP, a cut network) holds its locks,
            # among them the lease row an append reads FOR SHARE, which would keep a standby
            # from taking the scope over: the server ends such a session (rolling it back).
            conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TXN_TIMEOUT_MS}")
        except psycopg.Error as err:
            raise StoreError(
                f"cannot reach PostgreSQL at {self.describe()}: {self._clean(err)}"
            ) from None
        return conn

    @property
    def _db(self) -> psycopg.Connection[Any]:
        """The connection; a fresh one after the server dropped ours (a restart, a failover):
        the call that saw the drop failed with StoreError, the next one reconnects."""
        if self._closed:
            raise StoreError(f"{self.describe()}: the store is closed")
        if self._conn.closed or self._conn.broken:
            self._conn = self._connect()
        return self._conn

    def describe(self) -> str:
        return mask_password(self._url)

    def _clean(self, err: BaseException) -> str:
        """libpq's message, with the password masked should it ever echo it back."""
        text = str(err).strip()
        try:
            password = conninfo_to_dict(self._url).get("password")
        except psycopg.Error:
            password = None
        if password:
            text = text.replace(str(password), "***")
        return text

    def _setup(self) -> None:
        where = self.describe()
        try:
            set_up(self._db, where)
        except psycopg.Error as err:
            raise StoreError(f"cannot set up {where}: {self._clean(err)}{_hint(err)}") from None

    def _fail(self, what: str, err: psycopg.Error) -> StoreError:
        lost = " (the connection to the server was lost)" if self._conn.broken else ""
        return StoreError(f"{self.describe()}: {what}: {self._clean(err)}{_hint(err)}{lost}")

    # -- writes ---------------------------------------------------------------------------

    def _write(self, what: str, work: Callable[[Cursor], T],
               landed: Callable[[Cursor], bool]) -> T:
        """Run ``work`` in one transaction. When the connection is lost during COMMIT, the
        outcome is unknown here: reconnect and ask ``landed`` whether it was written."""
        with self._lock:
            try:
                conn = self._db
            except StoreError as err:
                raise StoreError(f"{err}; {what}: nothing was written") from None
            committing = False
            try:
                with conn.cursor() as cur:
                    cur.execute("BEGIN")
                    try:
                        result = work(cur)
                    except BaseException:
                        self._rollback(conn)
                        raise
                    committing = True
                    cur.execute("COMMIT")
                return result
            except psycopg.Error as err:
                if committing and (conn.broken or conn.closed):
                    return self._settle(what, err, landed, result)
                raise

    def _rollback(self, conn: psycopg.Connection[Any]) -> None:
        if not (conn.broken or conn.closed):
            try:
                conn.execute("ROLLBACK")
            except psycopg.Error:
                pass  # the connection went away: the server rolls back on its own

    def _settle(self, what: str, err: psycopg.Error, landed: Callable[[Cursor], bool],
                result: T) -> T:
        try:
            with self._db.cursor() as cur:
                written = landed(cur)
        except (StoreError, psycopg.Error) as again:
            raise StoreError(
                f"{self.describe()}: {what}: the connection was lost while committing "
                f"({self._clean(err)}) and the server cannot be asked whether it was written "
                f"({self._clean(again)}); read the record once the server is back") from None
        if written:
            return result
        raise StoreError(f"{self.describe()}: {what}: the connection was lost while "
                         f"committing ({self._clean(err)}); nothing was written") from None

    @staticmethod
    def _has_event(cur: Cursor, job_id: str, seq: int, body: str) -> bool:
        cur.execute("SELECT body FROM dispatch_events WHERE job_id = %s AND seq = %s",
                    (job_id, seq))
        row = cur.fetchone()
        return row is not None and row[0] == body

    def _insert_jobs(self, cur: Cursor, created: Sequence[JobCreated],
                     bodies: Sequence[str]) -> None:
        cur.executemany(
            "INSERT INTO dispatch_jobs"
            " (job_id, name, backend, created_at, created_us, version, supersedes, scope,"
            " changed, name_key) VALUES (%s, %s, %s, %s, %s, 1, %s, %s, " + PG_MARK + ", %s)",
            [created_columns(e) for e in created],
        )
        cur.executemany(
            "INSERT INTO dispatch_events (job_id, seq, body) VALUES (%s, 1, %s)",
            [(e.job_id, body) for e, body in zip(created, bodies, strict=True)],
        )

    def _refused_insert(self, err: pg_errors.UniqueViolation,
                        created: Sequence[JobCreated]) -> Exception:
        """What a unique key refused: a second successor, or a job id already taken."""
        try:
            if err.diag.constraint_name == schema.PG_SUPERSEDES_INDEX:
                olds = [e.supersedes for e in created if e.supersedes]
                row = self._db.execute(
                    "SELECT supersedes, job_id FROM dispatch_jobs WHERE supersedes = ANY(%s)"
                    " LIMIT 1", (olds,)).fetchone()
                return AlreadySuperseded(row[0], row[1]) if row else AlreadySuperseded(
                    olds[0] if olds else "?", None)
            ids = [e.job_id for e in created]
            rows = self._db.execute(
                "SELECT job_id FROM dispatch_jobs WHERE job_id = ANY(%s)", (ids,)).fetchall()
        except psycopg.Error as again:
            return self._fail("create", again)
        found = {r[0] for r in rows}
        return JobExists([i for i in ids if i in found] or ids)

    def create(self, created: JobCreated) -> None:
        self.create_many([created])

    def create_many(self, created: Sequence[JobCreated]) -> None:
        for e in created:
            check_created(e)
        ids = [e.job_id for e in created]
        if len(set(ids)) != len(ids):
            raise ValueError("create_many: the same job id appears twice")
        if not ids:
            return
        bodies = [encode_event(e).decode() for e in created]
        what = f"create job {', '.join(ids[:3])}{' ...' if len(ids) > 3 else ''}"

        def landed(cur: Cursor) -> bool:
            return self._has_event(cur, ids[0], 1, bodies[0])

        try:
            self._write(what, lambda cur: self._insert_jobs(cur, created, bodies), landed)
        except pg_errors.UniqueViolation as err:
            raise self._refused_insert(err, created) from None
        except psycopg.Error as err:
            raise self._fail(what, err) from None

    def create_successor(self, created: JobCreated, superseded: Superseded,
                         expected_version: int) -> int:
        old = check_successor(created, superseded, expected_version)
        bodies = [encode_event(created).decode()]
        old_body = encode_event(superseded).decode()
        what = f"supersede job {old} with {created.job_id}"

        def work(cur: Cursor) -> int:
            # The old job's row lock first: a concurrent supersede waits here, then conflicts.
            cur.execute("UPDATE dispatch_jobs SET version = %s, changed = " + PG_MARK +
                        " WHERE job_id = %s AND version = %s",
                        (superseded.seq, old, expected_version))
            matched = cur.rowcount == 1
            cur.execute("SELECT job_id FROM dispatch_jobs WHERE supersedes = %s", (old,))
            by = cur.fetchone()
            if by is not None:
                raise AlreadySuperseded(old, by[0])
            if not matched:
                cur.execute("SELECT version FROM dispatch_jobs WHERE job_id = %s", (old,))
                row = cur.fetchone()
                if row is None:
                    raise JobNotFound(old)
                raise ConflictError(old, expected_version, row[0])
            self._insert_jobs(cur, [created], bodies)
            cur.execute("INSERT INTO dispatch_events (job_id, seq, body) VALUES (%s, %s, %s)",
                        (old, superseded.seq, old_body))
            return superseded.seq

        def landed(cur: Cursor) -> bool:
            return self._has_event(cur, created.job_id, 1, bodies[0])

        try:
            return self._write(what, work, landed)
        except pg_errors.UniqueViolation as err:
            if err.diag.constraint_name == "dispatch_events_pkey":
                raise ConflictError(old, expected_version, None) from None
            raise self._refused_insert(err, [created]) from None
        except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected):
            raise ConflictError(old, expected_version, None) from None
        except psycopg.Error as err:
            raise self._fail(what, err) from None

    def append(self, job_id: str, events: Sequence[Event], expected_version: int, *,
               fence: Fence | None = None) -> int:
        terminal = check_batch(job_id, events, expected_version)
        # Encoded before the transaction: one statement each (stores/pg_append.py).
        bodies = [encode_event(e).decode() for e in events]

        def work(cur: Cursor) -> int:
            if fence is not None:
                check_fence_pg(cur, job_id, fence)
            return append_rows(cur, job_id, events, bodies, expected_version, terminal, fence)

        def landed(cur: Cursor) -> bool:
            return bool(bodies) and self._has_event(cur, job_id, expected_version + 1, bodies[0])

        what = f"append to job {job_id}"
        try:
            return self._write(what, work, landed)
        except RETRYABLE:
            raise ConflictError(job_id, expected_version, None) from None
        except psycopg.Error as err:
            raise self._fail(what, err) from None

    def append_many(self, appends: Sequence[Append], *, fence: Fence | None = None
                    ) -> list[Outcome]:
        ok = checked(appends)
        out: list[Outcome] = [r if isinstance(r, Exception) else 0 for r in ok]
        todo = in_lock_order(appends, ok)
        if not todo:
            return out
        bodies = {i: [encode_event(e).decode() for e in appends[i].events] for i in todo}
        written: list[int] = []

        def work(cur: Cursor) -> None:
            if fence is not None:  # the lease row FOR SHARE once, held to the commit
                check_fence_pg(cur, appends[todo[0]].job_id, fence)
            done = append_set(cur, appends, ok, todo, bodies, fence, out)
            written.extend(done if done is not None else append_each(
                cur, appends, ok, todo, bodies, fence, out))

        def landed(cur: Cursor) -> bool:  # all or nothing: one job's first event says
            return bool(written) and self._has_event(
                cur, appends[written[0]].job_id, appends[written[0]].expected_version + 1,
                bodies[written[0]][0])

        what = f"append to {len(todo)} jobs ({appends[todo[0]].job_id} ...)"
        try:
            self._write(what, work, landed)
        except RETRYABLE:  # at COMMIT (a stricter isolation): nothing written, each retried
            return [r if isinstance(r, Exception) else ConflictError(
                a.job_id, a.expected_version, None) for a, r in zip(appends, ok, strict=True)]
        except psycopg.Error as err:
            raise self._fail(what, err) from None
        return out

    # -- reads ----------------------------------------------------------------------------

    def _query(self, what: str, sql: str, params: Sequence[Any] | None = None) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except psycopg.Error as err:
                raise self._fail(what, err) from None

    def read(self, job_id: str) -> list[Event]:
        # One statement, one snapshot: the version and the events agree unless damaged.
        rows = self._query(
            f"read job {job_id}",
            "SELECT j.job_id, j.version, e.seq, e.body FROM dispatch_jobs j"
            " LEFT JOIN dispatch_events e ON e.job_id = j.job_id"
            " WHERE j.job_id = %s ORDER BY e.seq", (job_id,))
        if not rows:
            raise JobNotFound(job_id)
        out: dict[str, list[Event]] = {}
        decode_rows(self.describe(), rows, out)
        return out[job_id]

    def version(self, job_id: str) -> int:
        rows = self._query(f"read job {job_id}",
                           "SELECT version FROM dispatch_jobs WHERE job_id = %s", (job_id,))
        if not rows:
            raise JobNotFound(job_id)
        return int(rows[0][0])

    def query_jobs(self, query: JobQuery) -> list[JobRow]:
        sql, params = query_sql(query, "dispatch_jobs", "%s")
        return [job_row(self.describe(), r) for r in self._query("list jobs", sql, params)]

    def count_jobs(self, query: JobQuery) -> dict[str | None, int]:
        return count_rows(self._query("count jobs", *count_sql(query, "dispatch_jobs", "%s")))

    def prune(self, before_us: int, *, act: bool = False) -> list[str]:
        try:
            return self._write("prune", *pg_prune_steps(before_us, act))
        except psycopg.Error as err:
            raise self._fail("prune finished jobs", err) from None

    def stamp(self) -> tuple[int, int]:
        count, versions = self._query("look for changes", stamp_sql("dispatch_jobs"))[0]
        return int(count), int(versions)

    def read_many(self, job_ids: Sequence[str]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = {i: [] for i in job_ids}
        if not out:
            return out
        # The (distinct) ids joined as a table: with ``= ANY`` of a few hundred ids the
        # planner scanned the jobs table (issue 49: 40 ms a chunk of 250, against 3 ms).
        rows = self._query(
            f"read {len(out)} jobs", "SELECT j.job_id, j.version, e.seq, e.body FROM"
            " unnest(%s::text[]) AS w(job_id) JOIN dispatch_jobs j ON j.job_id = w.job_id"
            " LEFT JOIN dispatch_events e ON e.job_id = j.job_id ORDER BY j.job_id, e.seq",
            (list(out),))
        decode_rows(self.describe(), rows, out)
        missing = [i for i, evs in out.items() if not evs]
        if missing:
            raise JobNotFound(missing)
        return out

    def changes(self, since: int | None, *, scope: str | None = None
                ) -> tuple[list[Change], int | None]:
        # The next mark first: a transaction still running now is at or above it.
        mark = int(self._query("look for changed jobs", PG_LOOK_MARK)[0][0])
        sql, params = changes_sql(since, scope, "dispatch_jobs", "%s", pg=True)
        changes, _ = change_rows(self.describe(), self._query("look for changed jobs", sql,
                                                              params), since)
        return changes, mark

    def watched(self, scope: str | None, since_us: int, host: str | None = None,
                boot_id: str | None = None) -> list[str]:
        sql, params = attempts.watched_sql(scope, since_us, host, boot_id, pg=True)
        return [str(r[0]) for r in self._query("find finished jobs to watch", sql, params)]

    def read_after(self, versions: dict[str, int]) -> dict[str, list[Event]]:
        if not versions:
            return {}
        rows = self._query(f"read {len(versions)} jobs", PG_READ_AFTER,
                           (list(versions), list(versions.values())))
        return decode_tails(self.describe(), rows, versions)

    def read_snapshots(self, job_ids: Sequence[str]) -> list[Stored]:
        return stored_rows(self._query("read snapshots", snap.PG_READ, (list(job_ids),)))

    def write_snapshot(self, job: Job, format: int, encode: Encoder) -> None:
        def work(cur: Cursor) -> None:
            cur.execute(snap.PG_EVENT, (job.id, job.version))
            row = cur.fetchone()
            if row is not None and not row[1]:
                body, digest = encode(job, str(row[0]).encode())
                cur.execute(snap.PG_WRITE, (job.id, job.version, format, body.decode(), digest))
        try:
            self._write(f"snapshot of job {job.id}", work, lambda cur: True)
        except psycopg.Error as err:
            raise self._fail(f"snapshot of job {job.id}", err) from None

    def drop_snapshot(self, job_id: str) -> None:
        self._query(f"drop the snapshot of job {job_id}", snap.PG_DROP + " RETURNING 1", (job_id,))

    def matches(self, ref: str, limit: int = 21) -> list[JobMatch]:
        sql, params = matches_sql("dispatch_jobs", "%s", ref, limit, MIN_PREFIX)
        return [match_row(self.describe(), r) for r in self._query(f"find {ref!r}", sql, params)]

    def leases(self) -> PostgresLeases:
        return PostgresLeases(self._statement)

    def _statement(self, sql: str, params: Sequence[Any], *, wait_for_lock: bool = True
                   ) -> list[Any]:
        """One statement in its own transaction (a lease read or write); its rows, if it
        returns any. ``wait_for_lock`` False: give up on a locked row, returning []."""
        with self._lock:
            try:
                conn = self._db
                with conn.transaction():
                    if not wait_for_lock:
                        conn.execute(f"SET LOCAL lock_timeout = {ACQUIRE_LOCK_TIMEOUT_MS}")
                    cur = conn.execute(sql, params)
                    return cur.fetchall() if cur.description is not None else []
            except pg_errors.LockNotAvailable:
                return []
            except psycopg.Error as err:
                raise self._fail("lease", err) from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()
