"""Supervisor leases: per scope exactly one active supervisor, the others hot standbys.

A lease is one row per scope in the record store: (scope, holder, epoch, period_s,
acquired_at, expires_at, last_tick_at, released_at). A supervisor becomes active on a scope by
taking the row when it is free (never taken, expired, or released), which bumps ``epoch``; it
stays active by renewing the row before ``expires_at``; a planned stop releases it
(``expires_at`` = now) so a standby takes it at its next poll.

Where the time comes from, and why there is no consensus of our own:

- PostgreSQL: every lease read or write is one conditional statement evaluated with the
  server's clock (``now()``), so supervisors on machines whose clocks disagree still agree on
  who holds a scope. Taking a lease is ``INSERT .. ON CONFLICT DO UPDATE .. WHERE
  expires_at <= now()``: the row lock makes two standbys racing for an expired lease take it
  one after the other, and the second sees the first's fresh expiry and gets nothing.
- SQLite (one machine): the same table in the record file, written under SQLite's write lock
  (BEGIN IMMEDIATE, an fcntl lock on the file) and timed with the machine's clock, which is the
  same clock for every process that can open the file.

Fencing: an append by an active supervisor carries a ``Fence`` (scope, holder, epoch); the
store checks it inside the append's own transaction (``check_fence_*`` below) and refuses the
whole append with Fenced unless the row still names that holder at that epoch, unexpired, and
the job belongs to that scope. On PostgreSQL the check reads the lease row FOR SHARE, so a
takeover's UPDATE waits for an append already past the check to commit, and an append that
starts after the takeover sees the new epoch: a supervisor paused past its lease (SIGSTOP)
commits nothing once it is resumed. A client stopped *inside* an append would hold that row
lock: the server ends its session after IDLE_IN_TXN_TIMEOUT_MS (stores/postgres.py, rolling
the append back; each statement of an append ends with a Sync, never a pipeline, so that
timer runs wherever the client stopped between statements), and a standby's attempt to
take the lease gives up on the lock after ACQUIRE_LOCK_TIMEOUT_MS and tries again at its
next poll. On SQLite a process stopped inside a write holds the file's write lock, so every
writer waits until it is continued or killed (then its transaction is rolled back); continued,
its append commits, which is safe (its fence was checked under that lock: nobody wrote in
between) and the next one is fenced. No bound but the pause: one more reason SQLite is for
one machine (docs/supervisors.md, Fencing).
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from dispatch.stores.base import StoreError
from dispatch.stores.fence import Fence, Fenced, Lease, LeaseBook
from dispatch.stores.presence import PostgresPresence, SQLitePresence
from dispatch.support.durations import LEASE_MAX_S

LEASE_COLUMNS = ("scope, holder, epoch, period_s, acquired_at, expires_at, last_tick_at, "
                 "released_at")


def _check_period(period_s: float) -> None:
    # Finite and at most LEASE_MAX_S whoever asks: a lease must never outlive its holder by
    # more than that (inf or 1e12 would keep a killed holder's scope for ever).
    if not (math.isfinite(period_s) and 0 < period_s <= LEASE_MAX_S):
        raise ValueError(f"a lease period must be a finite number of seconds above 0 and at "
                         f"most {LEASE_MAX_S:g}, got {period_s!r}")


# -- SQLite ------------------------------------------------------------------------------------

SQLITE_DDL = """CREATE TABLE leases (
    scope        TEXT PRIMARY KEY,
    holder       TEXT NOT NULL,
    epoch        INTEGER NOT NULL,
    period_s     REAL NOT NULL,
    acquired_at  REAL NOT NULL,   -- seconds since the epoch, this machine's clock
    expires_at   REAL NOT NULL,
    last_tick_at REAL,
    released_at  REAL
)"""


def _ts(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _sqlite_lease(row: tuple[Any, ...], now: float) -> Lease:
    acquired, expires = _ts(row[4]), _ts(row[5])
    assert acquired is not None and expires is not None
    return Lease(scope=row[0], holder=row[1], epoch=int(row[2]), period_s=float(row[3]),
                 acquired_at=acquired, expires_at=expires, last_tick_at=_ts(row[6]),
                 released_at=_ts(row[7]), now=datetime.fromtimestamp(now, UTC))


def check_fence_sqlite(conn: sqlite3.Connection, job_id: str, job_scope: str,
                       fence: Fence) -> None:
    """Inside an append's BEGIN IMMEDIATE: Fenced unless ``fence`` is current for the job."""
    if job_scope != fence.scope:
        raise Fenced(job_id, fence, f"the job belongs to scope {job_scope}")
    row = conn.execute("SELECT holder, epoch, expires_at FROM leases WHERE scope = ?",
                       (fence.scope,)).fetchone()
    _judge(job_id, fence, row, None if row is None else row[2] > time.time())


class SQLiteLeases(LeaseBook):
    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock, where: str) -> None:
        self._conn = conn
        self._lock = lock
        self._where = where

    def _write(self, fn: Callable[[float], Lease | None]) -> Lease | None:
        with self._lock:
            c = self._conn
            try:
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as err:
                raise StoreError(f"{self._where}: cannot start a lease write: {err}") from None
            try:
                result = fn(time.time())  # read inside the write lock: one clock, one order
                c.execute("COMMIT")
                return result
            except sqlite3.Error as err:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise StoreError(f"{self._where}: lease write: {err}") from None
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise

    def _row(self, scope: str) -> tuple[Any, ...] | None:
        row = self._conn.execute(f"SELECT {LEASE_COLUMNS} FROM leases WHERE scope = ?",
                                 (scope,)).fetchone()
        return None if row is None else tuple(row)

    def acquire(self, scope: str, holder: str, period_s: float) -> Lease | None:
        _check_period(period_s)
        with self._lock:  # a cheap look first: standbys poll, and most polls find it held
            row = self._row(scope)
        if row is not None and row[5] > time.time():
            return None

        def take(now: float) -> Lease | None:
            row = self._row(scope)
            if row is not None and row[5] > now:
                return None
            epoch = 1 if row is None else int(row[2]) + 1
            self._conn.execute(
                "INSERT INTO leases (scope, holder, epoch, period_s, acquired_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope) DO UPDATE SET"
                " holder = excluded.holder, epoch = excluded.epoch,"
                " period_s = excluded.period_s, acquired_at = excluded.acquired_at,"
                " expires_at = excluded.expires_at, last_tick_at = NULL, released_at = NULL",
                (scope, holder, epoch, period_s, now, now + period_s))
            return _sqlite_lease((scope, holder, epoch, period_s, now, now + period_s, None,
                                  None), now)
        return self._write(take)

    def _update(self, fence: Fence, sets: str,
                values: Callable[[float], tuple[Any, ...]]) -> Lease | None:
        def update(now: float) -> Lease | None:
            cur = self._conn.execute(
                f"UPDATE leases SET {sets} WHERE scope = ? AND holder = ? AND epoch = ?"
                " AND expires_at > ?",
                (*values(now), fence.scope, fence.holder, fence.epoch, now))
            if cur.rowcount != 1:
                return None
            row = self._row(fence.scope)
            return None if row is None else _sqlite_lease(row, now)
        return self._write(update)

    def renew(self, fence: Fence, period_s: float) -> Lease | None:
        _check_period(period_s)
        return self._update(fence, "expires_at = ?, period_s = ?",
                            lambda now: (now + period_s, period_s))

    def ticked(self, fence: Fence) -> bool:
        return self._update(fence, "last_tick_at = ?", lambda now: (now,)) is not None

    def release(self, fence: Fence) -> bool:
        return self._update(fence, "expires_at = ?, released_at = ?",
                            lambda now: (now, now)) is not None

    def presence(self) -> SQLitePresence:
        return SQLitePresence(self._conn, self._lock, self._where)

    def all(self) -> list[Lease]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {LEASE_COLUMNS} FROM leases ORDER BY scope").fetchall()
        now = time.time()
        return [_sqlite_lease(tuple(r), now) for r in rows]


# -- PostgreSQL --------------------------------------------------------------------------------

PG_DDL = """CREATE TABLE dispatch_leases (
    scope        text PRIMARY KEY,
    holder       text NOT NULL,
    epoch        bigint NOT NULL,
    period_s     double precision NOT NULL,
    acquired_at  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    last_tick_at timestamptz,
    released_at  timestamptz
)"""

_PG_RETURNING = f"RETURNING {LEASE_COLUMNS}, now()"


def _pg_lease(row: tuple[Any, ...]) -> Lease:
    return Lease(scope=row[0], holder=row[1], epoch=int(row[2]), period_s=float(row[3]),
                 acquired_at=row[4], expires_at=row[5], last_tick_at=row[6],
                 released_at=row[7], now=row[8])


def check_fence_pg(cur: Any, job_id: str, fence: Fence) -> None:
    """Inside an append's transaction, before the job row is touched: Fenced unless ``fence``
    is the current lease. FOR SHARE holds off a takeover until this append commits."""
    cur.execute("SELECT holder, epoch, expires_at > now() FROM dispatch_leases"
                " WHERE scope = %s FOR SHARE", (fence.scope,))
    row = cur.fetchone()
    _judge(job_id, fence, row, None if row is None else bool(row[2]))


def _judge(job_id: str, fence: Fence, row: Any, unexpired: bool | None) -> None:
    if row is None:
        raise Fenced(job_id, fence, "nobody holds that scope")
    holder, epoch = row[0], int(row[1])
    if holder != fence.holder or epoch != fence.epoch:
        raise Fenced(job_id, fence, f"{holder} holds it at epoch {epoch}")
    if not unexpired:
        raise Fenced(job_id, fence, "the lease has expired")


class PostgresLeases(LeaseBook):
    def __init__(self, run: Callable[..., list[Any]]) -> None:
        # run(sql, params, wait_for_lock=True): one statement in its own transaction, its
        # rows; StoreError when the server fails; [] when wait_for_lock=False met a lock.
        self._run = run

    def acquire(self, scope: str, holder: str, period_s: float) -> Lease | None:
        _check_period(period_s)
        # A cheap look first: standbys poll, and taking the row lock on every poll would
        # make the active supervisor's appends (FOR SHARE on the same row) wait for them.
        held = self._run("SELECT 1 FROM dispatch_leases WHERE scope = %s AND expires_at > now()",
                         (scope,))
        if held:
            return None
        rows = self._run(
            "INSERT INTO dispatch_leases AS l"
            " (scope, holder, epoch, period_s, acquired_at, expires_at)"
            " VALUES (%s, %s, 1, %s, now(), now() + make_interval(secs => %s))"
            " ON CONFLICT (scope) DO UPDATE SET holder = excluded.holder,"
            " epoch = l.epoch + 1, period_s = excluded.period_s, acquired_at = now(),"
            " expires_at = excluded.expires_at, last_tick_at = NULL, released_at = NULL"
            " WHERE l.expires_at <= now() " + _PG_RETURNING,
            (scope, holder, period_s, period_s), wait_for_lock=False)
        return _pg_lease(rows[0]) if rows else None

    def _update(self, fence: Fence, sets: str, params: tuple[Any, ...]) -> Lease | None:
        rows = self._run(
            f"UPDATE dispatch_leases SET {sets} WHERE scope = %s AND holder = %s"
            f" AND epoch = %s AND expires_at > now() {_PG_RETURNING}",
            (*params, fence.scope, fence.holder, fence.epoch))
        return _pg_lease(rows[0]) if rows else None

    def renew(self, fence: Fence, period_s: float) -> Lease | None:
        _check_period(period_s)
        return self._update(fence, "expires_at = now() + make_interval(secs => %s),"
                                   " period_s = %s", (period_s, period_s))

    def ticked(self, fence: Fence) -> bool:
        return self._update(fence, "last_tick_at = now()", ()) is not None

    def release(self, fence: Fence) -> bool:
        return self._update(fence, "expires_at = now(), released_at = now()", ()) is not None

    def presence(self) -> PostgresPresence:
        return PostgresPresence(self._run)

    def all(self) -> list[Lease]:
        rows = self._run(f"SELECT {LEASE_COLUMNS}, now() FROM dispatch_leases ORDER BY scope",
                         ())
        return [_pg_lease(tuple(r)) for r in rows]
