"""The default record store: one SQLite file (WAL) on the supervisor's machine.

Several processes on one machine may share the file (a CLI reading while a supervisor
writes, or two supervisors): appends take SQLite's write lock with BEGIN IMMEDIATE, then
check the version, so the second writer sees the first one's commit and gets ConflictError.
WAL needs a local filesystem (not NFS); supervisors on different machines use PostgreSQL.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from dispatch.core.codec import decode_event, encode_event
from dispatch.core.events import Event, JobCreated
from dispatch.stores.base import (
    SCHEMA_VERSION,
    AmbiguousName,
    ConflictError,
    Fence,
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
from dispatch.stores.lease import SQLITE_DDL, SQLiteLeases, check_fence_sqlite

BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for another process's write lock before giving up (StoreError).
Appends are short, so waiting this long only happens when something is badly stuck."""

# Durability: in WAL mode, synchronous=NORMAL survives a process crash but may lose the last
# commits on power loss or an OS crash (the WAL is only synced at checkpoints). A record entry
# is a decision the supervisor is about to act on (intent before action), so losing a
# committed one could mean a duplicate submission or a forgotten outcome: we use FULL, which
# syncs the WAL at every commit. bench/bench_store.py measures the cost (bench/RESULTS.md).
SYNCHRONOUS = "FULL"

# Version 1 of the schema; a new file gets it, then every step of _MIGRATIONS, so a new file
# and a migrated one are the same by construction.
_SCHEMA = """
CREATE TABLE schema (version INTEGER NOT NULL);
CREATE TABLE jobs (
    job_id     TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    backend    TEXT NOT NULL,
    created_at TEXT NOT NULL,     -- as the JobCreated event says (ISO 8601)
    created_us INTEGER NOT NULL,  -- the same, as a sort key
    version    INTEGER NOT NULL,  -- the last seq
    terminal   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_created ON jobs (created_us, job_id);
CREATE INDEX jobs_by_name ON jobs (name);
CREATE TABLE events (
    job_id TEXT NOT NULL REFERENCES jobs (job_id),
    seq    INTEGER NOT NULL,
    body   BLOB NOT NULL,         -- codec.encode_event, decoded strictly on read
    PRIMARY KEY (job_id, seq)     -- the last line of defence against two writers
) WITHOUT ROWID;
"""


def _add_scopes_and_leases(c: sqlite3.Connection) -> None:
    """Schema 1 -> 2 (issue 16): each job's scope, and the supervisor leases."""
    c.execute("ALTER TABLE jobs ADD COLUMN scope TEXT")
    c.execute("UPDATE jobs SET scope = backend")  # a record without a scope: the backend's
    c.execute("CREATE INDEX jobs_by_scope ON jobs (scope, terminal)")
    c.execute(SQLITE_DDL)


_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    2: _add_scopes_and_leases,  # the version each step brings the file to
}


def default_path(env: Mapping[str, str] = os.environ) -> Path:
    """$XDG_STATE_HOME/dispatch/record.sqlite3, else ~/.local/state/dispatch/record.sqlite3.

    A relative XDG_STATE_HOME is ignored, as the XDG spec says.
    """
    state = env.get("XDG_STATE_HOME", "")
    if state and os.path.isabs(state):
        base = Path(state)
    else:
        home = env.get("HOME") or os.path.expanduser("~")
        base = Path(home) / ".local" / "state"
    return base / "dispatch" / "record.sqlite3"


def _ensure_file(path: Path) -> None:
    """Create the directory (0700) and the file (0600) when missing: records name commands,
    environments and hosts, which are nobody else's business. Existing ones are left as is."""
    parent = path.parent
    if not parent.exists():
        os.makedirs(parent, mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _row(r: tuple[str, str, str, int, int, str, str]) -> JobRow:
    return JobRow(
        job_id=r[0], name=r[1], backend=r[2], terminal=bool(r[3]), version=r[4],
        created_at=datetime.fromisoformat(r[5]), scope=r[6],
    )


class SQLiteStore(RecordStore):
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            _ensure_file(self.path)
            # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
        except (OSError, sqlite3.Error) as err:
            raise StoreError(f"cannot open record store {self.describe()}: {err}") from None
        try:
            self._open_retrying()
        except BaseException:
            self._conn.close()
            raise

    def _open_retrying(self) -> None:
        # Opening a WAL file while another connection recovers or checkpoints it on close
        # can answer SQLITE_BUSY without consulting the busy handler: retry, bounded.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self._open()
                return
            except StoreError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def describe(self) -> str:
        return f"sqlite://{self.path}" if self.path.is_absolute() else str(self.path)

    def _open(self) -> None:
        c = self._conn
        try:
            c.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            # Refuse a newer schema before changing anything in the file.
            self._check_schema()
            mode = c.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.describe()}: cannot switch to WAL (journal_mode {mode})")
            c.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
            c.execute("PRAGMA foreign_keys = ON")
            c.execute("BEGIN IMMEDIATE")
            try:
                found = self._check_schema()
                if found is None:
                    for stmt in _SCHEMA.split(";"):
                        if stmt.strip():
                            c.execute(stmt)
                    c.execute("INSERT INTO schema (version) VALUES (1)")
                    found = 1
                if found < SCHEMA_VERSION:
                    for version in range(found + 1, SCHEMA_VERSION + 1):
                        _MIGRATIONS[version](c)
                    c.execute("UPDATE schema SET version = ?", (SCHEMA_VERSION,))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as err:
            raise StoreError(f"cannot use record store {self.describe()}: {err}") from None

    def _check_schema(self) -> int | None:
        c = self._conn
        exists = c.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema'"
        ).fetchone()
        if exists is None:
            return None
        row = c.execute("SELECT max(version) FROM schema").fetchone()
        found = row[0] if row else None
        if found is None:
            raise StoreError(f"{self.describe()}: the schema table holds no version")
        if found > SCHEMA_VERSION:
            raise SchemaTooNew(self.describe(), found)
        return int(found)

    # -- writes ---------------------------------------------------------------------------

    def _insert_jobs(self, created: Sequence[JobCreated]) -> None:
        c = self._conn
        c.executemany(
            "INSERT INTO jobs (job_id, name, backend, created_at, created_us, version, scope)"
            " VALUES (?, ?, ?, ?, ?, 1, ?)",
            ((e.job_id, e.spec.name, e.spec.backend, e.at.isoformat(), sort_key_us(e.at),
              created_scope(e)) for e in created),
        )
        c.executemany(
            "INSERT INTO events (job_id, seq, body) VALUES (?, 1, ?)",
            ((e.job_id, encode_event(e)) for e in created),
        )

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
            c = self._conn
            self._begin()
            try:
                self._insert_jobs(created)
                c.execute("COMMIT")
            except sqlite3.IntegrityError:
                c.execute("ROLLBACK")
                raise JobExists(self._existing(ids)) from None
            except BaseException:
                self._rollback()
                raise

    def _existing(self, ids: Sequence[str]) -> list[str]:
        rows = self._conn.execute(
            "SELECT job_id FROM jobs WHERE job_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(ids)),),
        ).fetchall()
        found = {r[0] for r in rows}
        return [i for i in ids if i in found]

    def _begin(self) -> None:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as err:
            raise StoreError(f"{self.describe()}: cannot start a write: {err}") from None

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def append(self, job_id: str, events: Sequence[Event], expected_version: int, *,
               fence: Fence | None = None) -> int:
        terminal = check_batch(job_id, events, expected_version)
        new_version = expected_version + len(events)
        # Encoded lazily, inside the transaction: nothing is visible until COMMIT.
        rows: Iterator[tuple[str, int, bytes]] = (
            (job_id, e.seq, encode_event(e)) for e in events
        )
        with self._lock:
            c = self._conn
            self._begin()  # takes the write lock: a concurrent writer waits, then sees ours
            try:
                row = c.execute("SELECT version, scope FROM jobs WHERE job_id = ?",
                                (job_id,)).fetchone()
                if row is None:
                    raise JobNotFound(job_id)
                if fence is not None:  # under the write lock: no takeover can slip in
                    check_fence_sqlite(c, job_id, row[1], fence)
                if row[0] != expected_version:
                    raise ConflictError(job_id, expected_version, row[0])
                c.executemany("INSERT INTO events (job_id, seq, body) VALUES (?, ?, ?)", rows)
                c.execute(
                    "UPDATE jobs SET version = ?, terminal = max(terminal, ?) WHERE job_id = ?",
                    (new_version, int(terminal), job_id),
                )
                c.execute("COMMIT")
            except sqlite3.IntegrityError:
                # The unique (job_id, seq) key caught a writer the version check did not.
                self._rollback()
                raise ConflictError(job_id, expected_version, None) from None
            except sqlite3.OperationalError as err:
                self._rollback()
                raise StoreError(f"{self.describe()}: append to job {job_id}: {err}") from None
            except BaseException:
                self._rollback()
                raise
        return new_version

    # -- reads ----------------------------------------------------------------------------

    def read(self, job_id: str) -> list[Event]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, body FROM events WHERE job_id = ? ORDER BY seq", (job_id,)
            ).fetchall()
        if not rows:
            raise JobNotFound(job_id)
        return [decode_event(body, job_id=job_id, seq=seq) for seq, body in rows]

    def version(self, job_id: str) -> int:
        with self._lock:
            row = self._conn.execute(
                "SELECT version FROM jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return int(row[0])

    def list_jobs(self, *, live_only: bool = False, name: str | None = None,
                  scope: str | None = None) -> list[JobRow]:
        where, params = [], []
        if live_only:
            where.append("terminal = 0")
        if name is not None:
            where.append("name = ?")
            params.append(name)
        if scope is not None:
            where.append("scope = ?")
            params.append(scope)
        sql = "SELECT job_id, name, backend, terminal, version, created_at, scope FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_us, job_id"
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [_row(r) for r in rows]

    def read_many(self, job_ids: Sequence[str]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = {i: [] for i in job_ids}
        if not out:
            return out
        # One query for the whole tick; the ids travel as one JSON array parameter.
        with self._lock:
            rows = self._conn.execute(
                "SELECT job_id, seq, body FROM events"
                " WHERE job_id IN (SELECT value FROM json_each(?)) ORDER BY job_id, seq",
                (json.dumps(list(out)),),
            ).fetchall()
        for job_id, seq, body in rows:
            out[job_id].append(decode_event(body, job_id=job_id, seq=seq))
        missing = [i for i, evs in out.items() if not evs]
        if missing:
            raise JobNotFound(missing)
        return out

    def resolve(self, job_or_name: str) -> str:
        with self._lock:
            if self._conn.execute(
                "SELECT 1 FROM jobs WHERE job_id = ?", (job_or_name,)
            ).fetchone():
                return job_or_name
            rows = self._conn.execute(
                "SELECT job_id FROM jobs WHERE name = ? ORDER BY created_us, job_id LIMIT 20",
                (job_or_name,),
            ).fetchall()
        if not rows:
            raise JobNotFound(job_or_name)
        if len(rows) > 1:
            raise AmbiguousName(job_or_name, [r[0] for r in rows])
        return str(rows[0][0])

    def leases(self) -> SQLiteLeases:
        return SQLiteLeases(self._conn, self._lock, self.describe())

    def close(self) -> None:
        with self._lock:
            self._conn.close()
