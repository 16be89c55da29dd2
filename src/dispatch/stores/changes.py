"""What changed since a reader's last look, and the events after what it already folded.

A supervisor keeps each live job folded (stores/live.py) and, each tick, asks the store two
things in one query each: which jobs were written to since its last look (an index on each
job's change mark), and the events after the version it holds for those jobs. So a tick
costs what changed, not what exists (issue 27).

The mark: SQLite serialises writers, so each write stamps its jobs with the store's highest
mark + 1 and marks grow in commit order; a reader's next mark is the highest it saw.
PostgreSQL commits concurrently, so each write stamps the writing transaction's id and a
reader's next mark is the oldest transaction still running when it looked (taken before the
rows are read): a transaction committing after the look, whatever its id, is at or above it.
Pure: SQL text and row shaping; the stores run it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dispatch.core.events import Event
from dispatch.stores.base import Change, JobNotFound, RecordDamaged
from dispatch.stores.bulk_decode import tail_events, tails_in_one_pass

SQLITE_NEXT_MARK = "(SELECT coalesce(max(changed), 0) + 1 FROM jobs)"
PG_MARK = "pg_current_xact_id()"
PG_LOOK_MARK = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"


def changes_sql(since: int | None, scope: str | None, table: str, mark: str,
                pg: bool) -> tuple[str, list[object]]:
    """(job_id, version, terminal, changed, outcome) of the jobs changed since ``since``
    (every live job when None), in ``scope`` when given."""
    where: list[str] = []
    params: list[object] = []
    if since is None:
        where.append("NOT terminal" if pg else "terminal = 0")
    elif pg:
        where.append(f"changed >= {mark}::text::xid8")
        params.append(str(since))
    else:
        where.append(f"changed > {mark}")
        params.append(since)
    if scope is not None:  # SQLite: '+' keeps the planner on the change-mark index
        where.append(f"{'' if pg or since is None else '+'}scope = {mark}")
        params.append(scope)
    changed = "0" if pg else "changed"
    # The first look in creation order; later ones unordered, so that the planner walks the
    # change-mark index and never the whole table in creation order.
    order = " ORDER BY created_us, job_id" if since is None else ""
    return (f"SELECT job_id, version, terminal, {changed}, outcome FROM {table} WHERE "
            + " AND ".join(where) + order, params)


def change_rows(where: str, rows: Sequence[tuple[Any, ...]], since: int | None
                ) -> tuple[list[Change], int]:
    """The rows as Changes, and SQLite's next mark (the highest seen)."""
    out: list[Change] = []
    top = since or 0
    for job_id, version, terminal, changed, outcome in rows:
        if isinstance(version, bool) or not isinstance(version, int):
            raise RecordDamaged(where, str(job_id), None, f"the job's version is {version!r}")
        out.append(Change(job_id=str(job_id), version=version, terminal=bool(terminal),
                          outcome=None if outcome is None else str(outcome)))
        if isinstance(changed, int) and changed > top:
            top = changed
    return out, top


# No ORDER BY: the rows are grouped by job in Python, and each job's events come by its
# primary key (job_id, seq), in seq order; bulk_decode.tail_events sorts a job's rows that
# do not. Sorting all rows by job (a temporary B-tree) cost about 0.19 s of CPU at 100,000
# live jobs, 400,000 events, of a first look's read (issue 49).
SQLITE_READ_AFTER = (
    "SELECT j.job_id, w.value, j.version, e.seq, e.body FROM json_each(?) w"
    " JOIN jobs j ON j.job_id = w.key"
    " LEFT JOIN events e ON e.job_id = j.job_id AND e.seq > w.value")
PG_READ_AFTER = (
    "SELECT j.job_id, w.after, j.version, e.seq, e.body"
    " FROM unnest(%s::text[], %s::int[]) AS w(job_id, after)"
    " JOIN dispatch_jobs j ON j.job_id = w.job_id"
    " LEFT JOIN dispatch_events e ON e.job_id = j.job_id AND e.seq > w.after"
    " ORDER BY j.job_id, e.seq")


def decode_tails(where: str, rows: Sequence[tuple[Any, ...]], versions: dict[str, int]
                 ) -> dict[str, list[Event]]:
    """``(job_id, after, version, seq, body)`` rows (seq order per job) as each job's events
    after ``after``, checked whole and decoded; JobNotFound naming the jobs with no row."""
    out, unsure = tails_in_one_pass(rows)  # every job with a row is a key of ``out``
    missing = [j for j in versions if j not in out]
    if missing:
        raise JobNotFound(missing)
    if unsure:  # read as tail_events reads them: its events, or its refusal in its words
        by_job: dict[str, tuple[int, object, list[tuple[Any, Any]]]] = {}
        for job_id, after, version, seq, body in rows:
            key = job_id if type(job_id) is str else str(job_id)
            if key not in unsure:
                continue
            entry = by_job.get(key)
            if entry is None:  # a job's first row: its after and version
                entry = by_job[key] = (int(after), version, [])
            if seq is not None:
                entry[2].append((seq, body))
        # in the order of their first rows: the first refusal is the one raised before
        for j, (after, version, stored) in by_job.items():
            out[j] = tail_events(where, j, after, version, stored)
    return out
