"""One job's append inside a PostgreSQL transaction (PostgresStore.append, and each job of
an append_many in a savepoint of its own, stores/batch.py).

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
