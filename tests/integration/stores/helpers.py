"""Helpers for the store contract suite: raw SQL on a store's database, child writers."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dispatch.core.codec import encode_event
from dispatch.core.events import Event, JobCreated, OutcomeCommitted
from dispatch.stores import schema
from dispatch.stores.base import sort_key_us
from dispatch.stores.url import parse_store_url

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("store_child.py")


class Backdoor:
    """Raw SQL on a store's database, for what the API must never do (corrupt a record)."""

    def __init__(self, url: str) -> None:
        self.target = parse_store_url(url)
        self.kind = self.target.kind

    def execute(self, sql_sqlite: str, sql_pg: str, params: tuple[Any, ...] = ()) -> None:
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.target.target, isolation_level=None)
            try:
                conn.execute(sql_sqlite, params)
            finally:
                conn.close()
        else:
            import psycopg

            with psycopg.connect(self.target.target, autocommit=True) as pg:
                pg.execute(sql_pg, params)

    def query(self, sql_sqlite: str, sql_pg: str, params: tuple[Any, ...] = ()) -> list[Any]:
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.target.target, isolation_level=None)
            try:
                return conn.execute(sql_sqlite, params).fetchall()
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(self.target.target, autocommit=True) as pg:
            return pg.execute(sql_pg, params).fetchall()

    def schema_version(self) -> int:
        rows = self.query("SELECT version FROM schema", "SELECT version FROM dispatch_schema")
        assert len(rows) == 1, rows
        return int(rows[0][0])

    def supersedes_column(self) -> dict[str, str | None]:
        rows = self.query("SELECT job_id, supersedes FROM jobs",
                          "SELECT job_id, supersedes FROM dispatch_jobs")
        return dict(rows)

    def insert_event(self, job_id: str, seq: int, body: str) -> None:
        self.execute("INSERT INTO events (job_id, seq, body) VALUES (?, ?, ?)",
                     "INSERT INTO dispatch_events (job_id, seq, body) VALUES (%s, %s, %s)",
                     (job_id, seq, body.encode() if self.kind == "sqlite" else body))
        self.execute("UPDATE jobs SET version = ? WHERE job_id = ?",
                     "UPDATE dispatch_jobs SET version = %s WHERE job_id = %s", (seq, job_id))

    def set_schema_version(self, version: int) -> None:
        self.execute("UPDATE schema SET version = ?", "UPDATE dispatch_schema SET version = %s",
                     (version,))


def build_v1_store(url: str, records: Mapping[str, Sequence[Event]]) -> None:
    """A store as schema version 1 wrote it (no supersedes column), holding ``records``."""
    bd = Backdoor(url)
    ddl = schema.SQLITE_V1 if bd.kind == "sqlite" else schema.PG_V1
    for stmt in ddl:
        bd.execute(stmt, stmt)
    bd.execute("INSERT INTO schema (version) VALUES (1)",
               "INSERT INTO dispatch_schema (version) VALUES (1)")
    for job_id, events in records.items():
        first = events[0]
        assert isinstance(first, JobCreated) and first.job_id == job_id
        terminal = any(isinstance(e, OutcomeCommitted) for e in events)
        bd.execute("INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?)",
                   "INSERT INTO dispatch_jobs VALUES (%s, %s, %s, %s, %s, %s, %s)",
                   (job_id, first.spec.name, first.spec.backend, first.at.isoformat(),
                    sort_key_us(first.at), len(events), terminal))
        for e in events:
            body = encode_event(e)
            bd.execute("INSERT INTO events VALUES (?, ?, ?)",
                       "INSERT INTO dispatch_events VALUES (%s, %s, %s)",
                       (job_id, e.seq, body if bd.kind == "sqlite" else body.decode()))


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    return env


def spawn_child(*args: str) -> subprocess.Popen[str]:
    """tests/integration/stores/store_child.py in a separate interpreter (a real process)."""
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=child_env(), cwd=ROOT,
    )
