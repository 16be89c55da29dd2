"""Helpers for the store contract suite: raw SQL on a store's database, child writers."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

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

    def insert_event(self, job_id: str, seq: int, body: str) -> None:
        self.execute("INSERT INTO events (job_id, seq, body) VALUES (?, ?, ?)",
                     "INSERT INTO dispatch_events (job_id, seq, body) VALUES (%s, %s, %s)",
                     (job_id, seq, body.encode() if self.kind == "sqlite" else body))
        self.execute("UPDATE jobs SET version = ? WHERE job_id = ?",
                     "UPDATE dispatch_jobs SET version = %s WHERE job_id = %s", (seq, job_id))

    def set_schema_version(self, version: int) -> None:
        self.execute("UPDATE schema SET version = ?", "UPDATE dispatch_schema SET version = %s",
                     (version,))


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
