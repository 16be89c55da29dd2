"""Appends inside a PostgreSQL transaction: one job's (PostgresStore.append), and several
jobs' (append_many, stores/batch.py): in a few statements whatever their number, each job's
version checked on its own in the UPDATE's WHERE (append_set), or, when a statement fails,
job by job, each in a savepoint of its own (append_each).

Every statement is sent on its own (a Sync each): a client stopped between two of them
(SIGSTOP) is "idle in transaction" and the server ends its session after the store's
IDLE_IN_TXN_TIMEOUT_MS, freeing the lease row it holds FOR SHARE. An executemany (a
pipeline, one Sync at its end) stopped halfway left the session waiting for the rest with no
timeout armed, and no standby could take the scope over until it was continued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import errors as pg_errors

from dispatch.core.events import Event
from dispatch.stores import attempts, causes
from dispatch.stores.base import ConflictError, Fence, Fenced, JobNotFound, outcome_of
from dispatch.stores.batch import Append, Outcome
from dispatch.stores.changes import PG_MARK

# A writer the version check did not catch (the events' key), or one the server refused to
# order (a stricter isolation): a conflict, nothing written.
RETRYABLE = (pg_errors.UniqueViolation, pg_errors.SerializationFailure,
             pg_errors.DeadlockDetected)


def append_rows(cur: Any, job_id: str, events: Sequence[Event], bodies: Sequence[str],
                expected_version: int, terminal: bool, fence: Fence | None) -> int:
    """Write one job's ``events`` (encoded as ``bodies``) at ``expected_version``; its new
    version. The caller checked the fence's lease (check_fence_pg: the lease row FOR SHARE,
    held to the commit) in this transaction; the job's scope is checked here."""
    new_version = expected_version + len(events)
    cur.execute(
        "UPDATE dispatch_jobs SET version = %s, terminal = terminal OR %s, changed = "
        + PG_MARK + ", outcome = coalesce(outcome, %s)"
        " WHERE job_id = %s AND version = %s AND scope = coalesce(%s, scope)",
        (new_version, terminal, outcome_of(events) if terminal else None, job_id,
         expected_version, None if fence is None else fence.scope),
    )
    if cur.rowcount != 1:
        cur.execute("SELECT version, scope FROM dispatch_jobs WHERE job_id = %s", (job_id,))
        row = cur.fetchone()
        if row is None:
            raise JobNotFound(job_id)
        if fence is not None and row[1] != fence.scope:
            raise Fenced(job_id, fence, f"the job belongs to scope {row[1]}")
        raise ConflictError(job_id, expected_version, row[0])
    cur.execute(
        "INSERT INTO dispatch_events (job_id, seq, body)"
        " SELECT %s, s, b FROM unnest(%s::integer[], %s::text[]) AS t(s, b)",
        (job_id, [e.seq for e in events], list(bodies)))
    if kinds := causes.history_causes(events):
        cur.execute(causes.PG_INSERT, (job_id, kinds))
    attempts.pg_write(cur, job_id, events)
    return new_version


def append_each(cur: Any, appends: Sequence[Append], ok: Sequence[bool | Exception],
                todo: Sequence[int], bodies: dict[int, list[str]], fence: Fence | None,
                out: list[Outcome]) -> list[int]:
    """append_many's work, inside its transaction (its lease checked): the appends ``todo``
    in that order, each in a savepoint of its own, their outcomes set in ``out``; the
    indexes written."""
    written: list[int] = []
    for i in todo:
        a = appends[i]
        cur.execute("SAVEPOINT job")  # this job's conflict undoes this job's rows only
        try:
            out[i] = append_rows(cur, a.job_id, a.events, bodies[i], a.expected_version,
                                 ok[i] is True, fence)
            written.append(i)
        except (ConflictError, JobNotFound, *RETRYABLE) as err:
            cur.execute("ROLLBACK TO SAVEPOINT job")
            out[i] = err if isinstance(err, ConflictError | JobNotFound) else ConflictError(
                a.job_id, a.expected_version, None)
        cur.execute("RELEASE SAVEPOINT job")
    return written


_UPDATE_MANY = (
    "UPDATE dispatch_jobs j SET version = v.new_version, terminal = j.terminal OR v.terminal,"
    " changed = " + PG_MARK + ", outcome = coalesce(j.outcome, v.outcome)"
    " FROM unnest(%s::text[], %s::integer[], %s::integer[], %s::boolean[], %s::text[])"
    " AS v(job_id, expected, new_version, terminal, outcome)"
    " WHERE j.job_id = v.job_id AND j.version = v.expected AND j.scope = coalesce(%s, j.scope)"
    " RETURNING j.job_id")
_EVENTS_MANY = ("INSERT INTO dispatch_events (job_id, seq, body)"
                " SELECT * FROM unnest(%s::text[], %s::integer[], %s::text[])")
_CAUSES_MANY = ("INSERT INTO dispatch_job_causes (cause, job_id)"
                " SELECT * FROM unnest(%s::text[], %s::text[]) ON CONFLICT DO NOTHING")
_OPEN_MANY = ("INSERT INTO dispatch_open_attempts (job_id, submission, host, boot_id, attempted_us)"
              " SELECT * FROM unnest(%s::text[], %s::integer[], %s::text[], %s::text[],"
              " %s::bigint[]) ON CONFLICT (job_id, submission, host, boot_id) DO UPDATE SET"
              " attempted_us = greatest(dispatch_open_attempts.attempted_us,"
              " excluded.attempted_us)")
_RESOLVE_MANY = ("DELETE FROM dispatch_open_attempts WHERE (job_id, submission) IN"
                 " (SELECT * FROM unnest(%s::text[], %s::integer[]))")


def append_set(cur: Any, appends: Sequence[Append], ok: Sequence[bool | Exception],
               todo: Sequence[int], bodies: dict[int, list[str]], fence: Fence | None,
               out: list[Outcome]) -> list[int] | None:
    """append_many's work in a few statements whatever the batch's size, inside its
    transaction (its lease checked): each job's version is still checked on its own (in the
    UPDATE's WHERE: a job another writer moved on is not matched, and nothing of it is
    written). The indexes written, their outcomes set in ``out``; None when a statement
    failed (a writer the version check did not catch, a deadlock): nothing of it stays (its
    savepoint rolled back) and the caller writes job by job (append_each), so that one
    job's bad record never keeps the others out."""
    a = [appends[i] for i in todo]
    cur.execute("SAVEPOINT batch")
    try:
        cur.execute(_UPDATE_MANY, (
            [x.job_id for x in a], [x.expected_version for x in a],
            [x.expected_version + len(x.events) for x in a], [ok[i] is True for i in todo],
            [outcome_of(appends[i].events) if ok[i] is True else None for i in todo],
            None if fence is None else fence.scope))
        matched = {r[0] for r in cur.fetchall()}
        _refused([i for i in todo if appends[i].job_id not in matched], cur, appends, fence,
                 out)
        written = [i for i in todo if appends[i].job_id in matched]
        _rows_of(cur, [(appends[i].job_id, appends[i].events, bodies[i]) for i in written])
    except RETRYABLE:
        cur.execute("ROLLBACK TO SAVEPOINT batch")
        cur.execute("RELEASE SAVEPOINT batch")
        return None
    cur.execute("RELEASE SAVEPOINT batch")
    for i in written:
        out[i] = appends[i].expected_version + len(appends[i].events)
    return written


def _refused(refused: Sequence[int], cur: Any, appends: Sequence[Append],
             fence: Fence | None, out: list[Outcome]) -> None:
    """Why each job the UPDATE did not match was refused: JobNotFound, ConflictError, or
    Fenced (raised: another scope's job, the whole transaction refused)."""
    if not refused:
        return
    cur.execute("SELECT job_id, version, scope FROM dispatch_jobs WHERE job_id = ANY(%s)",
                ([appends[i].job_id for i in refused],))
    found = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
    for i in refused:
        x = appends[i]
        row = found.get(x.job_id)
        if row is None:
            out[i] = JobNotFound(x.job_id)
        elif fence is not None and row[1] != fence.scope:
            raise Fenced(x.job_id, fence, f"the job belongs to scope {row[1]}")
        else:
            out[i] = ConflictError(x.job_id, x.expected_version, row[0])


def _rows_of(cur: Any, jobs: Sequence[tuple[str, Sequence[Event], Sequence[str]]]) -> None:
    """The events, causes and attempts of the jobs matched, one statement each."""
    if not jobs:
        return
    rows = [(j, e.seq, b) for j, events, bodies in jobs
            for e, b in zip(events, bodies, strict=True)]
    cur.execute(_EVENTS_MANY, tuple(list(c) for c in zip(*rows, strict=True)))
    kinds = [(k, j) for j, events, _ in jobs for k in causes.history_causes(events)]
    if kinds:
        cur.execute(_CAUSES_MANY, tuple(list(c) for c in zip(*kinds, strict=True)))
    opened, resolved = [], []
    for j, events, _ in jobs:
        made, done = attempts.changes(events)
        opened += [(j, *r) for r in made]
        resolved += [(j, n) for n in done]
    if opened:
        cur.execute(_OPEN_MANY, tuple(list(c) for c in zip(*opened, strict=True)))
    if resolved:
        cur.execute(_RESOLVE_MANY, tuple(list(c) for c in zip(*resolved, strict=True)))
