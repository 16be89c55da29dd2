"""The record store for several supervisors, possibly on different machines: PostgreSQL.

Conflict detection is the database's, not a convention between clients:
``append`` runs, in one transaction, ``UPDATE dispatch_jobs SET version = new WHERE job_id = ..
AND version = expected``. The UPDATE takes the job row's lock, so a second writer waits for
the first to commit and then (READ COMMITTED re-checks the WHERE clause against the committed
row) matches nothing: ConflictError, and its transaction is rolled back. The primary key
(job_id, seq) of dispatch_events is the last line of defence; a unique violation, or a
serialization failure under a stricter default isolation, is a ConflictError too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from dispatch.core.codec import decode_event, encode_event
from dispatch.core.events import Event, JobCreated
from dispatch.stores.base import (
    SCHEMA_VERSION,
    AmbiguousName,
    ConflictError,
    Fence,
    Fenced,
    JobExists,
    JobNotFound,
    JobRow,
    RecordStore,
    SchemaTooNew,
    StoreError,
    check_batch,
    check_created,
    created_scope,
    sort_key_us,
)
from dispatch.stores.lease import PG_DDL, PostgresLeases, check_fence_pg
from dispatch.stores.url import mask_password

CONNECT_TIMEOUT_S = 10
IDLE_IN_TXN_TIMEOUT_MS = 2000
"""Our transactions are a few statements sent back to back; one idle this long belongs to a
client that stopped or lost the network (the longest a takeover can be held up by it)."""
ACQUIRE_LOCK_TIMEOUT_MS = 200
"""How long taking a lease waits for the row (a stale append's FOR SHARE) before it tries
again at the next poll, so a standby's loop never hangs on it."""
_SCHEMA_LOCK = 0x6469737061746368  # pg_advisory_xact_lock key ("dispatch"): schema setup only

# Version 1 of the schema; a new database gets it, then every step of _MIGRATIONS, so a new
# database and a migrated one are the same by construction.
_SCHEMA = [
    "CREATE TABLE dispatch_schema (version integer NOT NULL)",
    """CREATE TABLE dispatch_jobs (
        job_id     text PRIMARY KEY,
        name       text NOT NULL,
        backend    text NOT NULL,
        created_at text NOT NULL,
        created_us bigint NOT NULL,
        version    integer NOT NULL,
        terminal   boolean NOT NULL DEFAULT false
    )""",
    "CREATE INDEX dispatch_jobs_by_created ON dispatch_jobs (created_us, job_id)",
    "CREATE INDEX dispatch_jobs_by_name ON dispatch_jobs (name)",
    """CREATE TABLE dispatch_events (
        job_id text NOT NULL REFERENCES dispatch_jobs (job_id),
        seq    integer NOT NULL,
        body   text NOT NULL,
        PRIMARY KEY (job_id, seq)
    )""",
]

# Schema 1 -> 2 (issue 16): each job's scope (the backend's name for jobs recorded before
# scopes), and the supervisor leases.
_ADD_SCOPES_AND_LEASES = [
    "ALTER TABLE dispatch_jobs ADD COLUMN scope text",
    "UPDATE dispatch_jobs SET scope = backend",
    "CREATE INDEX dispatch_jobs_by_scope ON dispatch_jobs (scope, terminal)",
    PG_DDL,
]

_MIGRATIONS: dict[int, list[str]] = {
    2: _ADD_SCOPES_AND_LEASES,  # the version each step brings the database to
}

_RETRYABLE = (pg_errors.UniqueViolation, pg_errors.SerializationFailure,
              pg_errors.DeadlockDetected)


def _row(r: tuple[str, str, str, bool, int, str, str]) -> JobRow:
    return JobRow(
        job_id=r[0], name=r[1], backend=r[2], terminal=bool(r[3]), version=r[4],
        created_at=datetime.fromisoformat(r[5]), scope=r[6],
    )


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
        conn = self._db
        try:
            with conn.transaction():
                # Serialise first-time setup between processes; not used for appends.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                exists = conn.execute(
                    "SELECT to_regclass('dispatch_schema') IS NOT NULL"
                ).fetchone()
                if exists and exists[0]:
                    row = conn.execute(
                        "SELECT max(version) FROM dispatch_schema"
                    ).fetchone()
                    found = row[0] if row else None
                    if found is None:
                        raise StoreError(
                            f"{self.describe()}: dispatch_schema holds no version"
                        )
                    if found > SCHEMA_VERSION:
                        raise SchemaTooNew(self.describe(), found)
                else:
                    for stmt in _SCHEMA:
                        conn.execute(stmt)
                    conn.execute("INSERT INTO dispatch_schema (version) VALUES (1)")
                    found = 1
                if found < SCHEMA_VERSION:
                    for version in range(found + 1, SCHEMA_VERSION + 1):
                        for stmt in _MIGRATIONS[version]:
                            conn.execute(stmt)
                    conn.execute("UPDATE dispatch_schema SET version = %s", (SCHEMA_VERSION,))
        except psycopg.Error as err:
            raise StoreError(f"cannot set up {self.describe()}: {self._clean(err)}") from None

    def _fail(self, what: str, err: psycopg.Error) -> StoreError:
        return StoreError(f"{self.describe()}: {what}: {self._clean(err)}")

    # -- writes ---------------------------------------------------------------------------

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
        with self._lock:
            try:
                conn = self._db
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO dispatch_jobs"
                        " (job_id, name, backend, created_at, created_us, version, scope)"
                        " VALUES (%s, %s, %s, %s, %s, 1, %s)",
                        [(e.job_id, e.spec.name, e.spec.backend, e.at.isoformat(),
                          sort_key_us(e.at), created_scope(e)) for e in created],
                    )
                    cur.executemany(
                        "INSERT INTO dispatch_events (job_id, seq, body) VALUES (%s, 1, %s)",
                        [(e.job_id, encode_event(e).decode()) for e in created],
                    )
            except pg_errors.UniqueViolation:
                raise JobExists(self._existing(ids)) from None
            except psycopg.Error as err:
                raise self._fail("create", err) from None

    def _existing(self, ids: Sequence[str]) -> list[str]:
        rows = self._db.execute(
            "SELECT job_id FROM dispatch_jobs WHERE job_id = ANY(%s)", (list(ids),)
        ).fetchall()
        found = {r[0] for r in rows}
        return [i for i in ids if i in found] or list(ids)

    def append(self, job_id: str, events: Sequence[Event], expected_version: int, *,
               fence: Fence | None = None) -> int:
        terminal = check_batch(job_id, events, expected_version)
        new_version = expected_version + len(events)
        # Encoded lazily, inside the transaction: nothing is visible until COMMIT.
        rows: Iterator[tuple[str, int, str]] = (
            (job_id, e.seq, encode_event(e).decode()) for e in events
        )
        with self._lock:
            try:
                conn = self._db
                with conn.transaction(), conn.cursor() as cur:
                    if fence is not None:
                        check_fence_pg(cur, job_id, fence)
                    cur.execute(
                        "UPDATE dispatch_jobs SET version = %s, terminal = terminal OR %s"
                        " WHERE job_id = %s AND version = %s AND scope = coalesce(%s, scope)",
                        (new_version, terminal, job_id, expected_version,
                         None if fence is None else fence.scope),
                    )
                    if cur.rowcount != 1:
                        cur.execute(
                            "SELECT version, scope FROM dispatch_jobs WHERE job_id = %s",
                            (job_id,),
                        )
                        row = cur.fetchone()
                        if row is None:
                            raise JobNotFound(job_id)
                        if fence is not None and row[1] != fence.scope:
                            raise Fenced(job_id, fence, f"the job belongs to scope {row[1]}")
                        raise ConflictError(job_id, expected_version, row[0])
                    cur.executemany(
                        "INSERT INTO dispatch_events (job_id, seq, body) VALUES (%s, %s, %s)",
                        rows,
                    )
            except _RETRYABLE:
                raise ConflictError(job_id, expected_version, None) from None
            except psycopg.Error as err:
                raise self._fail(f"append to job {job_id}", err) from None
        return new_version

    # -- reads ----------------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any] | None = None) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except psycopg.Error as err:
                raise self._fail("read", err) from None

    def read(self, job_id: str) -> list[Event]:
        rows = self._query(
            "SELECT seq, body FROM dispatch_events WHERE job_id = %s ORDER BY seq", (job_id,)
        )
        if not rows:
            raise JobNotFound(job_id)
        return [decode_event(body, job_id=job_id, seq=seq) for seq, body in rows]

    def version(self, job_id: str) -> int:
        rows = self._query("SELECT version FROM dispatch_jobs WHERE job_id = %s", (job_id,))
        if not rows:
            raise JobNotFound(job_id)
        return int(rows[0][0])

    def list_jobs(self, *, live_only: bool = False, name: str | None = None,
                  scope: str | None = None) -> list[JobRow]:
        where, params = [], []
        if live_only:
            where.append("NOT terminal")
        if name is not None:
            where.append("name = %s")
            params.append(name)
        if scope is not None:
            where.append("scope = %s")
            params.append(scope)
        sql = ("SELECT job_id, name, backend, terminal, version, created_at, scope"
               " FROM dispatch_jobs")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_us, job_id"
        return [_row(r) for r in self._query(sql, params)]

    def read_many(self, job_ids: Sequence[str]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = {i: [] for i in job_ids}
        if not out:
            return out
        rows = self._query(
            "SELECT job_id, seq, body FROM dispatch_events WHERE job_id = ANY(%s)"
            " ORDER BY job_id, seq",
            (list(out),),
        )
        for job_id, seq, body in rows:
            out[job_id].append(decode_event(body, job_id=job_id, seq=seq))
        missing = [i for i, evs in out.items() if not evs]
        if missing:
            raise JobNotFound(missing)
        return out

    def resolve(self, job_or_name: str) -> str:
        rows = self._query("SELECT 1 FROM dispatch_jobs WHERE job_id = %s", (job_or_name,))
        if rows:
            return job_or_name
        rows = self._query(
            "SELECT job_id FROM dispatch_jobs WHERE name = %s"
            " ORDER BY created_us, job_id LIMIT 20",
            (job_or_name,),
        )
        if not rows:
            raise JobNotFound(job_or_name)
        if len(rows) > 1:
            raise AmbiguousName(job_or_name, [r[0] for r in rows])
        return str(rows[0][0])

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
