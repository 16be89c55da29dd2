"""The PostgreSQL store's tables: created on first use, migrated step by step to
SCHEMA_VERSION (1 -> 2: the supersedes column and its unique index; 2 -> 3: scopes and
leases; 3 -> 4: change marks and snapshots; 4 -> 5: the mark of a job whose events
were edited in place, and its triggers; 5 -> 6: the causes each job's history holds
and the submit attempts never resolved; 6 -> 7: the cached /metrics parts and the count of
jobs removed),
inside one transaction under an advisory lock (re-checked inside it) so that two processes
starting at once never both create or migrate, and neither refuses what the other made. The
statements themselves are in stores/schema.py."""

from __future__ import annotations

from typing import Any

import psycopg

from dispatch.stores import attempts, causes, schema
from dispatch.stores.base import SCHEMA_VERSION

SCHEMA_LOCK = 0x6469737061746368  # pg_advisory_lock key ("dispatch"): schema setup only


def _present(conn: psycopg.Connection[Any], tables: tuple[str, ...]) -> list[str]:
    return [t for t in tables if conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (t,)).fetchone() == (True,)]


def set_up(conn: psycopg.Connection[Any], where: str) -> None:
    """Create or migrate the tables; StoreError-typed refusals come from stores/schema.py
    (a newer schema, a half-made one), psycopg errors are the caller's to word.

    ``conn`` is in autocommit mode. The setup lock is the session's, taken between two
    transactions: the one that re-checks and sets up starts once the lock is ours, and a
    transaction's start is where a session reads what other sessions changed in the
    catalogs. Under a transaction-scoped lock the re-check ran in the transaction of the
    first look, whose cached "no dispatch_schema" outlived the other process's commit:
    the waiter then found the other tables and refused the store as half-made (issue 45
    item 15)."""
    with conn.transaction():
        found = schema_version(conn, where)
        if found is not None and found >= SCHEMA_VERSION:
            schema.check_tables(where, _present(conn, schema.PG_TABLES_NOW),
                                schema.PG_TABLES_NOW)
            return
    # Serialise creation and migration between processes; not for appends.
    conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
    try:
        with conn.transaction():
            found = schema_version(conn, where)  # again, under the lock
            if found is None:
                schema.check_fresh(where, _present(conn, schema.PG_TABLES_NOW))
                for stmt in schema.PG_V1:
                    conn.execute(stmt)
                conn.execute("INSERT INTO dispatch_schema (version) VALUES (1)")
                found = 1
            migrate(conn, where, found)
            schema.check_tables(where, _present(conn, schema.PG_TABLES_NOW),
                                schema.PG_TABLES_NOW)
    finally:
        if not (conn.broken or conn.closed):  # a lost session has let go of it already
            try:
                conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))
            except psycopg.Error:
                pass  # the session is going: the server lets go of its locks with it


def schema_version(conn: psycopg.Connection[Any], where: str) -> int | None:
    exists = conn.execute("SELECT to_regclass('dispatch_schema') IS NOT NULL").fetchone()
    if not (exists and exists[0]):
        return None
    row = conn.execute("SELECT max(version) FROM dispatch_schema").fetchone()
    return schema.check_version(where, row[0] if row else None)


def migrate(conn: psycopg.Connection[Any], where: str, found: int) -> None:
    """Steps found+1 .. SCHEMA_VERSION, inside the caller's transaction and lock."""
    if found < 2:
        schema.check_tables(where, _present(conn, schema.PG_TABLES), schema.PG_TABLES)
        conn.execute(schema.PG_V2_COLUMN)
        created = conn.execute(
            "SELECT j.job_id, j.created_us, e.body FROM dispatch_jobs j"
            " JOIN dispatch_events e ON e.job_id = j.job_id AND e.seq = 1").fetchall()

        def first_by(old: str) -> str | None:
            return schema.first_superseded(b for (b,) in conn.execute(
                "SELECT body FROM dispatch_events WHERE job_id = %s ORDER BY seq",
                (old,)).fetchall())

        with conn.cursor() as cur:
            cur.executemany(
                "UPDATE dispatch_jobs SET supersedes = %s WHERE job_id = %s",
                [(old, new) for new, old in schema.successor_links(created, first_by)])
        conn.execute(schema.PG_V2_INDEX)
    if found < 3:
        for stmt in schema.PG_V3:
            conn.execute(stmt)
    if found < 4:
        for stmt in schema.PG_V4:
            conn.execute(stmt)
    if found < 5:
        for stmt in schema.PG_V5:
            conn.execute(stmt)
    if found < 6:
        for stmt in schema.PG_V6:
            conn.execute(stmt)
        rows = causes.from_bodies(conn.execute(
            "SELECT job_id, body FROM dispatch_events ORDER BY job_id, seq"))
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO dispatch_job_causes (cause, job_id) VALUES (%s, %s)",
                            rows)
            cur.executemany("UPDATE dispatch_jobs SET name_key = %s WHERE job_id = %s",
                            schema.name_keys(conn.execute(
                                "SELECT job_id, name FROM dispatch_jobs").fetchall()))
            cur.executemany(attempts.PG_OPEN_ROW, attempts.from_bodies(conn.execute(
                attempts.fill_sql("dispatch_events", "%s"), attempts.FILL_TAGS)))
    if found < 7:
        for stmt in schema.PG_V7:
            conn.execute(stmt)
    if found < SCHEMA_VERSION:
        conn.execute("UPDATE dispatch_schema SET version = %s", (SCHEMA_VERSION,))
