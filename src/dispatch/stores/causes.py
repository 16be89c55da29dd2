"""The causes each job's committed history holds (schema version 6, issue 48 item 2): one
row per (cause kind, job) in a table of their own, written by the append that commits them
and filled from the stored events by the migration, so that a list finds the jobs that
ever had a cause (a success after a preemption, by ``preempted``) in one indexed lookup.
Pure: the kinds a batch adds, the rows a migration writes, and the statements."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dispatch.core.codec import decode_event
from dispatch.core.events import Event, HoldPlaced, HoldReleased, OutcomeCommitted, RecoveryStarted
from dispatch.core.model import CauseKind

SQLITE_INSERT = "INSERT OR IGNORE INTO job_causes (cause, job_id) VALUES (?, ?)"
# one statement (as the events' insert beside it: no pipeline a stopped client leaves halfway)
PG_INSERT = ("INSERT INTO dispatch_job_causes (cause, job_id) SELECT c, %s"
             " FROM unnest(%s::text[]) AS t(c) ON CONFLICT DO NOTHING")


def history_causes(events: Sequence[Event]) -> list[str]:
    """The cause kinds a batch adds to its job's committed history (core/record.py's
    transitions: a recovery, a hold, a release, the outcome), sorted, each once. The stores
    keep them per job at append time (schema version 6), so a list finds the jobs that
    ever had a cause in one indexed lookup. Events after an outcome are left out, as the
    fold leaves them out; a hold released twice may leave ``released`` where the fold shows
    none: the index narrows, the fold decides (service/rows.py ``had_cause``)."""
    found: set[str] = set()
    for e in events:
        if isinstance(e, RecoveryStarted | HoldPlaced):
            found.add(e.cause.kind.value)
        elif isinstance(e, HoldReleased):
            found.add(CauseKind.RELEASED.value)
        elif isinstance(e, OutcomeCommitted) and e.state.terminal:
            found.add(e.cause.kind.value)
            break
    return sorted(found)


def from_bodies(rows: Iterable[tuple[str, object]]) -> list[tuple[str, str]]:
    """(cause, job id) rows for the causes table, from stored events ``(job_id, body)`` in
    (job, seq) order: what ``history_causes`` gives each job's record. A body that does
    not decode is left out (its record is refused when it is read, not here)."""
    found: set[tuple[str, str]] = set()
    done: set[str] = set()  # jobs whose outcome was seen: what follows is not history
    for job_id, body in rows:
        if job_id in done:
            continue
        try:
            event = decode_event(body if isinstance(body, str | bytes) else str(body))
        except (ValueError, TypeError):
            continue
        for kind in history_causes([event]):
            found.add((kind, job_id))
        if isinstance(event, OutcomeCommitted) and event.state.terminal:
            done.add(job_id)
    return sorted(found)
