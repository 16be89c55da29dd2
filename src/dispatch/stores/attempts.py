"""The submit attempts never resolved (schema version 6, issue 45 item 12): one row per
(job, submission, holder's host and boot) whose attempt has no object bound, no rejection
and no end recorded, with the time of its last attempt. Written by the append that records
the attempt (SubmissionIntended, SubmissionAttempted) and deleted by the one that resolves
it (SubmissionBound, SubmissionRejected, a final ExecutionEnded), so it holds the submits
in flight and, rarely, those a finished job left unresolved (a supervisor stopped inside
its submit while another committed a person's cancel).

A supervisor that takes a scope over, or starts, asks ``watched``: the scope's finished
jobs with such an attempt made within WATCH_UNRESOLVED (1 h), or made by a process on its
own host in its own boot (only such a holder can be found alive, and the watch goes on while
it lives: core/waits.watch_until). So the watch of a finished job is kept by whichever
supervisor holds the scope, and the query reads a few index entries, never the finished
jobs' records. The bound: a holder elsewhere is watched for 1 h after its attempt, never
longer, and a holder of this host can only be alive in this boot; rows outside both are
left until the job is pruned (the fold decides, the index only narrows: a row for a
submission the fold has resolved, or for a job not watched any more, is read and dropped).
Pure: the rows a batch writes and deletes, the migration's fill, and the statements.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dispatch.core.codec import decode_event
from dispatch.core.events import (
    Event,
    ExecutionEnded,
    SubmissionAttempted,
    SubmissionBound,
    SubmissionIntended,
    SubmissionRejected,
)
from dispatch.stores.base import sort_key_us

# (submission, holder's host, holder's boot id, attempted_us): '' for an attempt naming no
# holder (written before holders were recorded).
Row = tuple[int, str, str, int]

SQLITE_V6 = [
    """CREATE TABLE open_attempts (
        job_id       TEXT NOT NULL REFERENCES jobs (job_id),
        submission   INTEGER NOT NULL,
        host         TEXT NOT NULL,     -- the holder's host ('' when none is recorded)
        boot_id      TEXT NOT NULL,     -- the holder's boot id ('' when none)
        attempted_us INTEGER NOT NULL,  -- its last attempt (base.sort_key_us)
        PRIMARY KEY (job_id, submission, host, boot_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX open_attempts_by_time ON open_attempts (attempted_us)",
    "CREATE INDEX open_attempts_by_holder ON open_attempts (host, boot_id)",
]
PG_V6 = [
    """CREATE TABLE dispatch_open_attempts (
        job_id       text NOT NULL REFERENCES dispatch_jobs (job_id),
        submission   integer NOT NULL,
        host         text NOT NULL,
        boot_id      text NOT NULL,
        attempted_us bigint NOT NULL,
        PRIMARY KEY (job_id, submission, host, boot_id)
    )""",
    "CREATE INDEX dispatch_open_attempts_by_time ON dispatch_open_attempts (attempted_us)",
    "CREATE INDEX dispatch_open_attempts_by_holder ON dispatch_open_attempts (host, boot_id)",
]

SQLITE_OPEN = ("INSERT INTO open_attempts (job_id, submission, host, boot_id, attempted_us)"
               " VALUES (?, ?, ?, ?, ?) ON CONFLICT (job_id, submission, host, boot_id)"
               " DO UPDATE SET attempted_us = max(attempted_us, excluded.attempted_us)")
SQLITE_RESOLVE = "DELETE FROM open_attempts WHERE job_id = ? AND submission = ?"
# One statement each (as the events' insert beside them: no pipeline a stopped client
# leaves halfway, postgres.py); the rows of one statement are distinct (``changes``).
PG_OPEN = ("INSERT INTO dispatch_open_attempts"
           " (job_id, submission, host, boot_id, attempted_us) SELECT %s, s, h, b, t"
           " FROM unnest(%s::integer[], %s::text[], %s::text[], %s::bigint[]) AS u(s, h, b, t)"
           " ON CONFLICT (job_id, submission, host, boot_id) DO UPDATE SET attempted_us ="
           " greatest(dispatch_open_attempts.attempted_us, excluded.attempted_us)")
PG_OPEN_ROW = ("INSERT INTO dispatch_open_attempts"  # one row: the migration's fill
               " (job_id, submission, host, boot_id, attempted_us)"
               " VALUES (%s, %s, %s, %s, %s)")
PG_RESOLVE = ("DELETE FROM dispatch_open_attempts WHERE job_id = %s"
              " AND submission = ANY(%s::integer[])")


def changes(events: Sequence[Event]) -> tuple[list[Row], list[int]]:
    """(rows to write, submissions resolved) by a batch. A submission resolved stays
    resolved in the fold (core/record.py: a bound ref or an end is never undone), so its
    rows are deleted and none is written for it, whatever the order within the batch."""
    opened: dict[tuple[int, str, str], int] = {}
    resolved: set[int] = set()
    for e in events:
        if isinstance(e, SubmissionIntended | SubmissionAttempted):
            h = e.holder
            key = (e.submission, h.host if h else "", h.boot_id if h else "")
            opened[key] = max(opened.get(key, 0), sort_key_us(e.at))
        elif isinstance(e, SubmissionBound | SubmissionRejected) or (
                isinstance(e, ExecutionEnded) and e.final):
            resolved.add(e.submission)
    rows = [(s, h, b, t) for (s, h, b), t in sorted(opened.items()) if s not in resolved]
    return rows, sorted(resolved)


def pg_write(cur: Any, job_id: str, events: Sequence[Event]) -> None:
    """The batch's ``changes`` on a PostgreSQL cursor, inside the append's transaction."""
    opened, resolved = changes(events)
    if opened:
        cur.execute(PG_OPEN, (job_id, *(list(c) for c in zip(*opened, strict=True))))
    if resolved:
        cur.execute(PG_RESOLVE, (job_id, resolved))


def from_bodies(rows: Iterable[tuple[str, object]]) -> list[tuple[str, int, str, str, int]]:
    """(job id, submission, host, boot id, attempted_us) rows for the table, from stored
    events ``(job_id, body)`` in (job, seq) order: the attempts each record leaves
    unresolved. A body that does not decode is left out (its record is refused when read)."""
    opened: dict[tuple[str, int, str, str], int] = {}
    resolved: set[tuple[str, int]] = set()
    for job_id, body in rows:
        try:
            event = decode_event(body if isinstance(body, str | bytes) else str(body))
        except (ValueError, TypeError):
            continue
        made, done = changes([event])
        resolved.update((job_id, s) for s in done)
        for s, h, b, t in made:
            opened[(job_id, s, h, b)] = max(opened.get((job_id, s, h, b), 0), t)
    return [(j, s, h, b, t) for (j, s, h, b), t in sorted(opened.items())
            if (j, s) not in resolved]


# The events a fill decodes: only bodies naming one of these tags can open or resolve one.
FILL_TAGS = ("submission-", "execution-ended")


def fill_sql(events: str, mark: str) -> str:
    """The migration's read: the bodies that may open or resolve an attempt, in order."""
    find = "instr(CAST(body AS TEXT), {})" if mark == "?" else "strpos(body, {})"
    where = " OR ".join(find.format(mark) + " > 0" for _ in FILL_TAGS)
    return f"SELECT job_id, body FROM {events} WHERE {where} ORDER BY job_id, seq"  # noqa: S608


def watched_sql(scope: str | None, since_us: int, host: str | None, boot_id: str | None,
                *, pg: bool) -> tuple[str, list[object]]:
    """The finished jobs (of ``scope``, None: every scope) with an attempt never resolved
    made at or after ``since_us`` or by a process on ``host`` in boot ``boot_id``: two
    indexed lookups of the attempts table, each joined to its job's row by key."""
    jobs, table, mark = (("dispatch_jobs", "dispatch_open_attempts", "%s") if pg
                         else ("jobs", "open_attempts", "?"))
    finished = "j.terminal" if pg else "j.terminal = 1"
    where_scope, scope_params = (f" AND j.scope = {mark}", [scope]) if scope is not None \
        else ("", [])
    base = (f"SELECT DISTINCT a.job_id FROM {table} a JOIN {jobs} j ON j.job_id = a.job_id"
            f" WHERE {finished}{where_scope}")
    sql = f"{base} AND a.attempted_us >= {mark}"
    params: list[object] = [*scope_params, since_us]
    if host and boot_id:
        sql += f" UNION {base} AND a.host = {mark} AND a.boot_id = {mark}"
        params += [*scope_params, host, boot_id]
    return sql + " ORDER BY 1", params
