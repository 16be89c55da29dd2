"""Who serves a scope besides the lease's holder: each supervisor process's presence row.

The lease (lease.py) names the one active supervisor of a scope; a standby (a ``supervise``,
``serve`` or ``run`` waiting for the lease) leaves no trace there. So every supervisor keeps
one row per scope it serves: (scope, holder, role, started_at, since, seen_at, expires_at,
refusals). A standby writes its row each time it asks for the lease (every poll); the active
one each time it renews (a third of its period) and whenever the reads its scheduler refuses
change (``refusals``: core/refusals.py, JSON). A planned stop deletes the process's rows; a
killed one's row goes stale at ``expires_at`` (the writer says when: a few of its polls and
one lease period after ``seen_at``) and is then neither shown nor kept (each write deletes the
stale rows). Times are the store's clock, as the leases': PostgreSQL's ``now()``, SQLite's
machine clock. A row is a hint for people, never a lease: nothing is fenced by it.
"""

from __future__ import annotations

import abc
import contextlib
import math
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from dispatch.stores.base import StoreError

Role = Literal["active", "standby"]
ROLES: tuple[Role, ...] = ("active", "standby")

WRITE_WAIT_MS = 1000  # SQLite: how long a presence write waits for another's write lock

COLUMNS = "scope, holder, role, started_at, since, seen_at, expires_at, refusals"


@dataclass(frozen=True, slots=True)
class Presence:
    """One supervisor's row for one scope as the store's clock saw it at ``now``."""

    scope: str
    holder: str
    role: Role
    started_at: datetime  # when the process started serving (a reused pid is told apart)
    since: datetime  # when it took this role
    seen_at: datetime  # its last write
    expires_at: datetime  # stale from then on (not shown)
    refusals: str  # core/refusals.py's JSON: what its scheduler refuses it (active only)
    now: datetime


def _check(role: str, stale_after_s: float) -> None:
    if role not in ROLES:
        raise ValueError(f"a presence role is one of {', '.join(ROLES)}, got {role!r}")
    if not (math.isfinite(stale_after_s) and stale_after_s > 0):
        raise ValueError(f"stale_after_s must be a finite number of seconds above 0, got "
                         f"{stale_after_s!r}")


def _role(value: object) -> Role:
    for r in ROLES:
        if value == r:
            return r
    raise StoreError(f"a presence row holds the unknown role {value!r}")


class PresenceBook(abc.ABC):
    """The presence rows of one record store. Every method is one short transaction."""

    @abc.abstractmethod
    def announce(self, scope: str, holder: str, role: Role, *, started_at: datetime,
                 stale_after_s: float, refusals: str = "[]") -> None:
        """Write ``holder``'s row for ``scope`` (``since`` kept while the role is the same),
        stale ``stale_after_s`` from now; and delete every stale row."""

    @abc.abstractmethod
    def withdraw(self, holder: str, scope: str | None = None) -> None:
        """Delete ``holder``'s row for ``scope`` (None: all its rows)."""

    @abc.abstractmethod
    def current(self) -> list[Presence]:
        """The rows not stale, by scope, then role (active first), then since."""


# -- SQLite ------------------------------------------------------------------------------------

SQLITE_DDL = """CREATE TABLE supervisor_presence (
    scope      TEXT NOT NULL,
    holder     TEXT NOT NULL,
    role       TEXT NOT NULL,   -- active | standby
    started_at REAL NOT NULL,   -- seconds since the epoch, this machine's clock
    since      REAL NOT NULL,
    seen_at    REAL NOT NULL,
    expires_at REAL NOT NULL,
    refusals   TEXT NOT NULL DEFAULT '[]',  -- core/refusals.py
    PRIMARY KEY (scope, holder)
) WITHOUT ROWID"""


def _ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class SQLitePresence(PresenceBook):
    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock, where: str) -> None:
        self._conn = conn
        self._lock = lock
        self._where = where

    def _write(self, sql: list[tuple[str, tuple[Any, ...]]]) -> None:
        with self._lock:
            c = self._conn
            # A hint is not worth waiting for: another process holding the write lock (a
            # long append, one paused inside it) makes this write give up soon, and the
            # next poll writes again, rather than stall the loop that asks for the lease.
            waits: int | None = None
            try:
                waits = int(c.execute("PRAGMA busy_timeout").fetchone()[0])
                c.execute(f"PRAGMA busy_timeout = {WRITE_WAIT_MS}")
                c.execute("BEGIN IMMEDIATE")
                for stmt, params in sql:
                    c.execute(stmt, params)
                c.execute("COMMIT")
            except sqlite3.Error as err:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise StoreError(f"{self._where}: presence write: {err}") from None
            finally:
                if waits is not None:
                    with contextlib.suppress(sqlite3.Error):  # a closed connection
                        c.execute(f"PRAGMA busy_timeout = {waits}")

    def announce(self, scope: str, holder: str, role: Role, *, started_at: datetime,
                 stale_after_s: float, refusals: str = "[]") -> None:
        _check(role, stale_after_s)
        now = time.time()
        self._write([
            ("DELETE FROM supervisor_presence WHERE expires_at <= ?", (now,)),
            ("INSERT INTO supervisor_presence (scope, holder, role, started_at, since, seen_at,"
             " expires_at, refusals) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, holder)"
             " DO UPDATE SET since = CASE WHEN role = excluded.role THEN since"
             " ELSE excluded.since END, role = excluded.role,"
             " started_at = excluded.started_at, seen_at = excluded.seen_at,"
             " expires_at = excluded.expires_at, refusals = excluded.refusals",
             (scope, holder, role, started_at.timestamp(), now, now, now + stale_after_s,
              refusals)),
        ])

    def withdraw(self, holder: str, scope: str | None = None) -> None:
        if scope is None:
            self._write([("DELETE FROM supervisor_presence WHERE holder = ?", (holder,))])
        else:
            self._write([("DELETE FROM supervisor_presence WHERE holder = ? AND scope = ?",
                          (holder, scope))])

    def current(self) -> list[Presence]:
        now = time.time()
        try:
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT {COLUMNS} FROM supervisor_presence WHERE expires_at > ?"
                    " ORDER BY scope, role, since", (now,)).fetchall()
        except sqlite3.Error as err:
            raise StoreError(f"{self._where}: presence read: {err}") from None
        return [Presence(r[0], r[1], _role(r[2]), _ts(r[3]), _ts(r[4]), _ts(r[5]), _ts(r[6]),
                         r[7], _ts(now)) for r in rows]


# -- PostgreSQL --------------------------------------------------------------------------------

PG_DDL = """CREATE TABLE dispatch_supervisor_presence (
    scope      text NOT NULL,
    holder     text NOT NULL,
    role       text NOT NULL,
    started_at timestamptz NOT NULL,
    since      timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    refusals   text NOT NULL DEFAULT '[]',
    PRIMARY KEY (scope, holder)
)"""


class PostgresPresence(PresenceBook):
    def __init__(self, run: Any) -> None:
        self._run = run  # PostgresStore._statement: one statement, its own transaction

    def announce(self, scope: str, holder: str, role: Role, *, started_at: datetime,
                 stale_after_s: float, refusals: str = "[]") -> None:
        _check(role, stale_after_s)
        self._run("DELETE FROM dispatch_supervisor_presence WHERE expires_at <= now()", ())
        self._run(
            "INSERT INTO dispatch_supervisor_presence AS p (scope, holder, role, started_at,"
            " since, seen_at, expires_at, refusals) VALUES (%s, %s, %s, %s, now(), now(),"
            " now() + make_interval(secs => %s), %s) ON CONFLICT (scope, holder) DO UPDATE SET"
            " since = CASE WHEN p.role = excluded.role THEN p.since ELSE excluded.since END,"
            " role = excluded.role, started_at = excluded.started_at,"
            " seen_at = excluded.seen_at, expires_at = excluded.expires_at,"
            " refusals = excluded.refusals",
            (scope, holder, role, started_at, stale_after_s, refusals))

    def withdraw(self, holder: str, scope: str | None = None) -> None:
        if scope is None:
            self._run("DELETE FROM dispatch_supervisor_presence WHERE holder = %s", (holder,))
        else:
            self._run("DELETE FROM dispatch_supervisor_presence WHERE holder = %s"
                      " AND scope = %s", (holder, scope))

    def current(self) -> list[Presence]:
        rows = self._run(f"SELECT {COLUMNS}, now() FROM dispatch_supervisor_presence"
                         " WHERE expires_at > now() ORDER BY scope, role, since", ())
        return [Presence(r[0], r[1], _role(r[2]), r[3], r[4], r[5], r[6], r[7], r[8])
                for r in rows]
