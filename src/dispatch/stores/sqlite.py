"""The default record store: one SQLite file (WAL) on the supervisor's machine.

Several processes on one machine may share the file (a CLI reading while a supervisor
writes, or two supervisors): appends take SQLite's write lock with BEGIN IMMEDIATE, then
check the version, so the second writer sees the first one's commit and gets ConflictError.
WAL needs a local filesystem (not NFS); supervisors on different machines use PostgreSQL.

Every sqlite3 error (a damaged file, a full disk, a read-only file) becomes a StoreError
naming the file; a write that fails is rolled back, so a failure never leaves half of it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from dispatch.core.codec import encode_event
from dispatch.core.events import Event, JobCreated, Superseded
from dispatch.core.record import Job
from dispatch.stores import attempts, causes, schema
from dispatch.stores import snapshot_sql as snap
from dispatch.stores.base import (
    MIN_PREFIX,
    SCHEMA_VERSION,
    AlreadySuperseded,
    Change,
    ConflictError,
    Encoder,
    Fence,
    JobExists,
    JobMatch,
    JobNotFound,
    JobRow,
    RecordDamaged,
    RecordStore,
    StoreError,
    check_batch,
    check_created,
    check_successor,
    created_columns,
    match_row,
    outcome_of,
)
from dispatch.stores.batch import Append, Outcome, checked, in_lock_order
from dispatch.stores.changes import (
    SQLITE_NEXT_MARK,
    SQLITE_READ_AFTER,
    change_rows,
    changes_sql,
    decode_tails,
)
from dispatch.stores.lease import SQLiteLeases, check_fence_sqlite
from dispatch.stores.prune import sqlite_prune
from dispatch.stores.query import JobQuery, count_rows, count_sql, matches_sql, query_sql, stamp_sql
from dispatch.stores.reading import decode_rows, job_row
from dispatch.stores.snapshot_sql import Stored, stored_rows
from dispatch.stores.sqlite_file import default_path as default_path  # re-exported
from dispatch.stores.sqlite_file import prepare_file, words

BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for another process's write lock before giving up (StoreError).
Appends are short, so waiting this long only happens when something is badly stuck."""

# Durability: in WAL mode, synchronous=NORMAL survives a process crash but may lose the last
# commits on power loss or an OS crash (the WAL is only synced at checkpoints). A record entry
# is a decision the supervisor is about to act on (intent before action), so losing a
# committed one could mean a duplicate submission or a forgotten outcome: we use FULL, which
# syncs the WAL at every commit. bench/bench_store.py measures the cost (bench/RESULTS.md).
SYNCHRONOUS = "FULL"

class SQLiteStore(RecordStore):
    def __init__(self, path: str | os.PathLike[str], *, create_parent: bool = False) -> None:
        """Open (creating when missing) the store file at ``path``. Its directory must exist
        unless ``create_parent`` (the default location only): a typo is refused, not made."""
        self.path = Path(path)
        self._lock = threading.RLock()
        prepare_file(self.path, self.describe(), create_parent)
        try:
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

    @contextmanager
    def _guard(self, what: str) -> Iterator[sqlite3.Connection]:
        """Run ``what`` holding the lock; any sqlite3 error rolls back and becomes a
        StoreError naming the store (so nothing half-written stays, and no raw error)."""
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as err:
                self._rollback()
                raise StoreError(
                    f"{self.describe()}: {what}: {words(err, self.path.parent)}") from None
            except UnicodeDecodeError as err:
                # sqlite3 decodes TEXT as UTF-8 itself: a damaged page fails here, not in SQLite.
                self._rollback()
                raise StoreError(f"{self.describe()}: {what}: stored text is not UTF-8 "
                                 f"({err.reason} at byte {err.start}; the file is damaged)"
                                 ) from None
            except BaseException:
                self._rollback()
                raise

    def _open(self) -> None:
        with self._guard("cannot use the record store") as c:
            c.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            # Refuse a newer (or unusable) schema before changing anything in the file.
            found = self._schema_version()
            mode = c.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.describe()}: cannot switch to WAL (journal_mode {mode})")
            c.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
            c.execute("PRAGMA foreign_keys = ON")
            if found is None or found < SCHEMA_VERSION:
                self._begin("set up the schema")
                found = self._schema_version()  # again, under the write lock
                if found is None:
                    schema.check_fresh(self.describe(), [r[0] for r in c.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table'"
                        " AND name NOT LIKE 'sqlite_%'")])
                    for stmt in schema.SQLITE_V1:
                        c.execute(stmt)
                    c.execute("INSERT INTO schema (version) VALUES (1)")
                    found = 1
                self._migrate(found)
                c.execute("COMMIT")
            tables = [r[0] for r in c.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            schema.check_tables(self.describe(), tables, schema.SQLITE_TABLES_NOW)

    def _schema_version(self) -> int | None:
        c = self._conn
        exists = c.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema'"
        ).fetchone()
        if exists is None:
            return None
        row = c.execute("SELECT max(version) FROM schema").fetchone()
        return schema.check_version(self.describe(), row[0] if row else None)

    def _migrate(self, found: int) -> None:
        """Steps found+1 .. SCHEMA_VERSION, inside the caller's write transaction."""
        c = self._conn
        if found < 2:
            tables = [r[0] for r in c.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            schema.check_tables(self.describe(), tables, schema.SQLITE_TABLES)
            c.execute(schema.SQLITE_V2_COLUMN)
            created = c.execute(
                "SELECT j.job_id, j.created_us, e.body FROM jobs j"
                " JOIN events e ON e.job_id = j.job_id AND e.seq = 1").fetchall()

            def first_by(old: str) -> str | None:
                return schema.first_superseded(b for (b,) in c.execute(
                    "SELECT body FROM events WHERE job_id = ? ORDER BY seq", (old,)))

            c.executemany("UPDATE jobs SET supersedes = ? WHERE job_id = ?",
                          [(old, new) for new, old in schema.successor_links(created, first_by)])
            c.execute(schema.SQLITE_V2_INDEX)
        if found < 3:
            for stmt in schema.SQLITE_V3:
                c.execute(stmt)
        if found < 4:
            for stmt in schema.SQLITE_V4:
                c.execute(stmt)
        if found < 5:
            for stmt in schema.SQLITE_V5:
                c.execute(stmt)
        if found < 6:
            for stmt in schema.SQLITE_V6:
                c.execute(stmt)
            c.executemany(causes.SQLITE_INSERT, causes.from_bodies(c.execute(
                "SELECT job_id, body FROM events ORDER BY job_id, seq")))
            c.executemany("UPDATE jobs SET name_key = ? WHERE job_id = ?",
                          schema.name_keys(c.execute("SELECT job_id, name FROM jobs")))
            c.executemany(attempts.SQLITE_OPEN, attempts.from_bodies(c.execute(
                attempts.fill_sql("events", "?"), attempts.FILL_TAGS)))
        if found < 7:
            for stmt in schema.SQLITE_V7:
                c.execute(stmt)
        if found < SCHEMA_VERSION:
            c.execute("UPDATE schema SET version = ?", (SCHEMA_VERSION,))

    # -- writes ---------------------------------------------------------------------------

    def _insert_jobs(self, created: Sequence[JobCreated]) -> None:
        c = self._conn
        c.executemany(
            "INSERT INTO jobs"
            " (job_id, name, backend, created_at, created_us, version, supersedes, scope,"
            " changed, name_key) VALUES (?, ?, ?, ?, ?, 1, ?, ?, " + SQLITE_NEXT_MARK + ", ?)",
            [created_columns(e) for e in created],
        )
        c.executemany(
            "INSERT INTO events (job_id, seq, body) VALUES (?, 1, ?)",
            ((e.job_id, encode_event(e)) for e in created),
        )

    def _refused_insert(self, err: sqlite3.IntegrityError,
                        created: Sequence[JobCreated]) -> Exception:
        """What a unique key refused: a second successor, or a job id already taken."""
        self._rollback()
        if "supersedes" in str(err):
            olds = [e.supersedes for e in created if e.supersedes]
            row = self._conn.execute(
                "SELECT supersedes, job_id FROM jobs"
                " WHERE supersedes IN (SELECT value FROM json_each(?)) LIMIT 1",
                (json.dumps(olds),)).fetchone()
            return AlreadySuperseded(row[0], row[1]) if row else AlreadySuperseded(
                olds[0] if olds else "?", None)
        return JobExists(self._existing([e.job_id for e in created]))

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
        with self._guard(f"create job {', '.join(ids[:3])}{' ...' if len(ids) > 3 else ''}"):
            self._begin("create")
            try:
                self._insert_jobs(created)
            except sqlite3.IntegrityError as err:
                raise self._refused_insert(err, created) from None
            self._conn.execute("COMMIT")

    def create_successor(self, created: JobCreated, superseded: Superseded,
                         expected_version: int) -> int:
        old = check_successor(created, superseded, expected_version)
        with self._guard(f"supersede job {old} with {created.job_id}") as c:
            self._begin("supersede")
            row = c.execute("SELECT version FROM jobs WHERE job_id = ?", (old,)).fetchone()
            if row is None:
                raise JobNotFound(old)
            by = c.execute("SELECT job_id FROM jobs WHERE supersedes = ?", (old,)).fetchone()
            if by is not None:
                raise AlreadySuperseded(old, by[0])
            if row[0] != expected_version:
                raise ConflictError(old, expected_version, row[0])
            try:
                self._insert_jobs([created])
            except sqlite3.IntegrityError as err:
                raise self._refused_insert(err, [created]) from None
            c.execute("INSERT INTO events (job_id, seq, body) VALUES (?, ?, ?)",
                      (old, superseded.seq, encode_event(superseded)))
            c.execute("UPDATE jobs SET version = ?, changed = " + SQLITE_NEXT_MARK +
                      " WHERE job_id = ?", (superseded.seq, old))
            c.execute("COMMIT")
        return superseded.seq

    def _existing(self, ids: Sequence[str]) -> list[str]:
        rows = self._conn.execute(
            "SELECT job_id FROM jobs WHERE job_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(ids)),),
        ).fetchall()
        found = {r[0] for r in rows}
        return [i for i in ids if i in found] or list(ids)

    def _begin(self, what: str) -> None:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise StoreError(f"{self.describe()}: cannot start a write ({what}): "
                             f"{words(err, self.path.parent)}") from None

    def _rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite rolled back already (a full disk, an I/O error): nothing is kept

    def append(self, job_id: str, events: Sequence[Event], expected_version: int, *,
               fence: Fence | None = None) -> int:
        terminal = check_batch(job_id, events, expected_version)
        with self._guard(f"append to job {job_id}") as c:
            self._begin("append")  # the write lock: a concurrent writer waits, then sees ours
            version = self._append_rows(c, job_id, events, expected_version, terminal, fence)
            c.execute("COMMIT")
        return version

    def append_many(self, appends: Sequence[Append], *, fence: Fence | None = None
                    ) -> list[Outcome]:
        ok = checked(appends)
        out: list[Outcome] = [r if isinstance(r, Exception) else 0 for r in ok]
        todo = in_lock_order(appends, ok)
        if not todo:
            return out
        with self._guard(f"append to {len(todo)} jobs ({appends[todo[0]].job_id} ...)") as c:
            self._begin("append")
            for i in todo:
                a = appends[i]
                c.execute("SAVEPOINT job")  # this job's conflict undoes this job's rows only
                try:
                    out[i] = self._append_rows(c, a.job_id, a.events, a.expected_version,
                                               ok[i] is True, fence)
                except (ConflictError, JobNotFound) as err:
                    c.execute("ROLLBACK TO job")
                    out[i] = err
                c.execute("RELEASE job")
            c.execute("COMMIT")  # one commit, one fsync for every job of the batch
        return out

    def _append_rows(self, c: sqlite3.Connection, job_id: str, events: Sequence[Event],
                     expected_version: int, terminal: bool, fence: Fence | None) -> int:
        """One job's append inside the caller's write transaction; its new version."""
        new_version = expected_version + len(events)
        # Encoded lazily, inside the transaction: nothing is visible until COMMIT.
        rows: Iterator[tuple[str, int, bytes]] = (
            (job_id, e.seq, encode_event(e)) for e in events
        )
        row = c.execute("SELECT version, scope FROM jobs WHERE job_id = ?",
                        (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        if fence is not None:  # under the write lock: no takeover can slip in
            check_fence_sqlite(c, job_id, row[1], fence)
        if row[0] != expected_version:
            raise ConflictError(job_id, expected_version, row[0])
        try:
            c.executemany("INSERT INTO events (job_id, seq, body) VALUES (?, ?, ?)", rows)
        except sqlite3.IntegrityError:
            # The unique (job_id, seq) key caught a writer the version check did not.
            raise ConflictError(job_id, expected_version, None) from None
        c.execute(
            "UPDATE jobs SET version = ?, terminal = max(terminal, ?), changed = "
            + SQLITE_NEXT_MARK + ", outcome = coalesce(outcome, ?) WHERE job_id = ?",
            (new_version, int(terminal), outcome_of(events) if terminal else None, job_id),
        )
        c.executemany(causes.SQLITE_INSERT,
                      [(kind, job_id) for kind in causes.history_causes(events)])
        opened, resolved = attempts.changes(events)
        c.executemany(attempts.SQLITE_OPEN, [(job_id, *r) for r in opened])
        c.executemany(attempts.SQLITE_RESOLVE, [(job_id, n) for n in resolved])
        return new_version

    # -- reads ----------------------------------------------------------------------------

    def read(self, job_id: str) -> list[Event]:
        # One statement, one snapshot: the version and the events agree unless damaged.
        with self._guard(f"read job {job_id}") as c:
            rows = c.execute(
                "SELECT j.job_id, j.version, e.seq, e.body FROM jobs j"
                " LEFT JOIN events e ON e.job_id = j.job_id WHERE j.job_id = ? ORDER BY e.seq",
                (job_id,)).fetchall()
        if not rows:
            raise JobNotFound(job_id)
        out: dict[str, list[Event]] = {}
        decode_rows(self.describe(), rows, out)
        return out[job_id]

    def version(self, job_id: str) -> int:
        with self._guard(f"read job {job_id}") as c:
            row = c.execute("SELECT version FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        if isinstance(row[0], bool) or not isinstance(row[0], int):
            raise RecordDamaged(self.describe(), job_id, None, f"the job's version is {row[0]!r}")
        return row[0]

    def query_jobs(self, query: JobQuery) -> list[JobRow]:
        sql, params = query_sql(query, "jobs", "?")
        with self._guard("list jobs") as c:
            rows = c.execute(sql, params).fetchall()
        return [job_row(self.describe(), r) for r in rows]

    def count_jobs(self, query: JobQuery) -> dict[str | None, int]:
        with self._guard("count jobs") as c:
            return count_rows(c.execute(*count_sql(query, "jobs", "?")).fetchall())

    def prune(self, before_us: int, *, act: bool = False) -> list[str]:
        with self._guard("prune finished jobs") as c:
            if not act:
                return sqlite_prune(c, before_us, act=False)
            self._begin("prune")
            ids = sqlite_prune(c, before_us, act=True)
            c.execute("COMMIT")
        return ids

    def stamp(self) -> tuple[int, int]:
        with self._guard("look for changes") as c:
            count, versions = c.execute(stamp_sql("jobs")).fetchone()
        return int(count), int(versions)

    def read_many(self, job_ids: Sequence[str]) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = {i: [] for i in job_ids}
        if not out:
            return out
        # One query for the whole tick; the ids travel as one JSON array parameter.
        with self._guard(f"read {len(out)} jobs") as c:
            rows = c.execute(
                "SELECT j.job_id, j.version, e.seq, e.body FROM jobs j"
                " LEFT JOIN events e ON e.job_id = j.job_id"
                " WHERE j.job_id IN (SELECT value FROM json_each(?)) ORDER BY j.job_id, e.seq",
                (json.dumps(list(out)),),
            ).fetchall()
        decode_rows(self.describe(), rows, out)
        missing = [i for i, evs in out.items() if not evs]
        if missing:
            raise JobNotFound(missing)
        return out

    def changes(self, since: int | None, *, scope: str | None = None
                ) -> tuple[list[Change], int | None]:
        sql, params = changes_sql(since, scope, "jobs", "?", pg=False)
        with self._guard("look for changed jobs") as c:
            rows = c.execute(sql, params).fetchall()
            if since is None:  # the first look: its mark is the store's current one
                top = c.execute("SELECT coalesce(max(changed), 0) FROM jobs").fetchone()[0]
        changes, seen = change_rows(self.describe(), rows, since)
        return changes, (max(seen, int(top)) if since is None else seen)

    def watched(self, scope: str | None, since_us: int, host: str | None = None,
                boot_id: str | None = None) -> list[str]:
        sql, params = attempts.watched_sql(scope, since_us, host, boot_id, pg=False)
        with self._guard("find finished jobs to watch") as c:
            return [str(r[0]) for r in c.execute(sql, params)]

    def read_after(self, versions: dict[str, int]) -> dict[str, list[Event]]:
        if not versions:
            return {}
        with self._guard(f"read {len(versions)} jobs") as c:
            rows = c.execute(SQLITE_READ_AFTER, (json.dumps(versions),)).fetchall()
        return decode_tails(self.describe(), rows, versions)

    def read_snapshots(self, job_ids: Sequence[str]) -> list[Stored]:
        with self._guard("read snapshots") as c:
            return stored_rows(c.execute(snap.SQLITE_READ, (json.dumps(list(job_ids)),))
                               .fetchall())

    def write_snapshot(self, job: Job, format: int, encode: Encoder) -> None:
        with self._guard(f"write the snapshot of job {job.id}") as c:
            self._begin("snapshot")
            row = c.execute(snap.SQLITE_EVENT, (job.id, job.version)).fetchone()
            if row is not None and not row[1]:
                body, digest = encode(job, snap.as_bytes(row[0]))
                c.execute(snap.SQLITE_WRITE, (job.id, job.version, format, body, digest))
            c.execute("COMMIT")

    def drop_snapshot(self, job_id: str) -> None:
        with self._guard(f"drop the snapshot of job {job_id}") as c:
            c.execute(snap.SQLITE_DROP, (job_id,))

    def matches(self, ref: str, limit: int = 21) -> list[JobMatch]:
        sql, params = matches_sql("jobs", "?", ref, limit, MIN_PREFIX)
        with self._guard(f"find {ref!r}") as c:
            rows = c.execute(sql, params).fetchall()
        return [match_row(self.describe(), r) for r in rows]

    def leases(self) -> SQLiteLeases:
        return SQLiteLeases(self._conn, self._lock, self.describe())

    def close(self) -> None:
        with self._lock:
            try:
                self._conn.close()
            except sqlite3.Error as err:
                raise StoreError(f"{self.describe()}: close: {words(err)}") from None
