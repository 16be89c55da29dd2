"""Forgetting old finished jobs (``dispatch prune``, issue 36; docs/semantics.md).

A job is pruned whole or not at all: its row, every event, its snapshot and its cached
/metrics part go in one transaction, with every other job pruned at the same time (all or
none); the store's count of removals moves with them (stores/removals.py). A supersede chain
is one unit: it is pruned only when every job of it is finished and was created before the
cutoff, so no kept job ever names a job that is gone (``supersedes``, ``superseded_by``).

The choice is pure (``chosen``) over the jobs table's rows; the stores run the SQL below in
their own transaction, choosing again inside it, so a job superseded or appended to between a
dry run and the act is judged as it is when it is removed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChainRow:
    """What the choice needs of a job: its predecessor (the job it supersedes), whether it
    is finished, and when it was created (base.sort_key_us)."""

    job_id: str
    supersedes: str | None
    terminal: bool
    created_us: int


def chosen(rows: Sequence[ChainRow], before_us: int) -> list[str]:
    """The jobs to prune, in ``rows``' order: those of every supersede chain whose jobs are
    all finished and created before ``before_us``."""
    by_id = {r.job_id: r for r in rows}

    def first(r: ChainRow) -> str:
        seen = {r.job_id}
        while r.supersedes is not None and r.supersedes in by_id \
                and r.supersedes not in seen:
            r = by_id[r.supersedes]
            seen.add(r.job_id)
        return r.job_id

    chain = {r.job_id: first(r) for r in rows}
    kept = {chain[r.job_id] for r in rows if not (r.terminal and r.created_us < before_us)}
    return [r.job_id for r in rows if chain[r.job_id] not in kept]


_CHAIN_COLUMNS = "job_id, supersedes, terminal, created_us"


def _rows(found: Sequence[Sequence[Any]]) -> list[ChainRow]:
    return [ChainRow(str(r[0]), None if r[1] is None else str(r[1]), bool(r[2]), int(r[3]))
            for r in found]


def sqlite_prune(conn: sqlite3.Connection, before_us: int, act: bool) -> list[str]:
    """The jobs pruned (``act``) or that would be: inside the caller's write transaction
    (BEGIN IMMEDIATE) when acting, so the choice and the removal see one state."""
    ids = chosen(_rows(conn.execute(f"SELECT {_CHAIN_COLUMNS} FROM jobs ORDER BY created_us, "
                                    "job_id").fetchall()), before_us)
    if act and ids:
        doc = json.dumps(ids)
        for table in ("events", "snapshots", "job_causes", "open_attempts", "metric_parts",
                      "jobs"):
            conn.execute(f"DELETE FROM {table} WHERE job_id IN "  # noqa: S608 (fixed names)
                         "(SELECT value FROM json_each(?))", (doc,))
    return ids


def pg_prune(cur: Any, before_us: int, act: bool) -> list[str]:
    """As ``sqlite_prune``, on a PostgreSQL cursor inside the caller's transaction; acting,
    it first locks the jobs table against writers (a supersede or an append waits for the
    prune's commit, then finds what it wrote to still there or gone whole)."""
    if act:
        cur.execute("LOCK TABLE dispatch_jobs IN SHARE ROW EXCLUSIVE MODE")
    cur.execute(f"SELECT {_CHAIN_COLUMNS} FROM dispatch_jobs ORDER BY created_us, job_id")
    ids = chosen(_rows(cur.fetchall()), before_us)
    if act and ids:
        for table in ("dispatch_events", "dispatch_snapshots", "dispatch_job_causes",
                      "dispatch_open_attempts", "dispatch_metric_parts", "dispatch_jobs"):
            cur.execute(f"DELETE FROM {table} WHERE job_id = ANY(%s)", (ids,))
    return ids


def pg_prune_steps(before_us: int, act: bool
                   ) -> tuple[Callable[[Any], list[str]], Callable[[Any], bool]]:
    """The PostgreSQL store's transaction body for ``prune``, and how it tells, after a
    lost COMMIT, whether the removal landed: none of the jobs it removed is left."""
    ids: list[str] = []

    def work(cur: Any) -> list[str]:
        ids[:] = pg_prune(cur, before_us, act)
        return list(ids)

    def gone(cur: Any) -> bool:
        cur.execute("SELECT 1 FROM dispatch_jobs WHERE job_id = ANY(%s)", (ids,))
        return not cur.fetchall()
    return work, gone
