"""``ls``'s pages: the newest jobs first, filtered in the store (finished or not, backend,
name, created since, a finished job's outcome) and keyset-paged on (creation time, id), so a
page reads its own rows and records only, however many jobs the store holds (issue 27).

A state the store cannot filter on (a live job's state: pending, running, held, ...) is
checked on each row's record; the store is then read page after page until the page is full
or the jobs run out, never all at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from dispatch.core.model import CauseKind, State
from dispatch.errors import BadInput
from dispatch.service.operations import Service
from dispatch.service.views import JobView
from dispatch.stores.base import sort_key_us
from dispatch.stores.query import JobQuery
from dispatch.support.durations import age_seconds, quoted

DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class Page:
    """The jobs of one page, oldest first, and the cursor of the next (older) page."""

    jobs: list[JobView]
    older: str | None


def parse_cursor(text: str) -> tuple[int, str]:
    """``--before``'s cursor (``<created µs>:<job id>``, as the previous page printed)."""
    us, sep, job_id = text.partition(":")
    # ASCII digits, and no more than a store's 64-bit integer holds (int() refuses other
    # digits or 4,300 of them with a traceback, the store an integer past 2**63).
    if (not sep or not job_id or not us.isascii() or not us.isdigit() or len(us) > 19
            or int(us) >= 2**63):
        raise BadInput(f"--before {quoted(text)}: not a cursor that ls printed "
                       "(it looks like 1767225600000000:a1b2c3)")
    return int(us), job_id


def parse_since(text: str, now: datetime | None = None, option: str = "--since") -> int:
    """``--since`` (and ``prune --before``): an ISO 8601 date or time (UTC unless it names
    its zone), or an age before ``now``: a whole number and a unit, ``90m``, ``2h``, ``30d``,
    ``1w``."""
    if now is not None:
        age = age_seconds(text, option)
        if age is not None:
            return sort_key_us(now - timedelta(seconds=age))
    try:
        # ASCII only: a date in other digits is not one ISO 8601 writes.
        at = datetime.fromisoformat(text) if text.isascii() else None
    except ValueError:
        at = None
    if at is None:
        raise BadInput(f"{option} {quoted(text)}: not an ISO 8601 date or time (e.g. "
                       "2026-12-01 or 2026-12-01T08:00) nor an age (e.g. 90m, 2h, 30d, 1w)")
    return sort_key_us(at if at.tzinfo else at.replace(tzinfo=UTC))


def shows(view: JobView, state: State | None, live: bool, cause: CauseKind | None) -> bool:
    """Whether a job is in ``ls``'s page: the HTTP API's filters (service/listing.py), with
    their meaning: ``state`` the job's state, ``live`` any unfinished one, ``cause`` the cause
    the list shows or any cause of the job's committed history (``rows.had_cause``)."""
    from dispatch.service.rows import had_cause

    s = view.status
    if state is not None and (s is None or s.state is not state):
        return False
    if live and (s is None or s.state.terminal):
        return False
    return cause is None or had_cause(view, cause)


def ls_page(service: Service, *, finished: bool, state: State | None = None,
            backend: str | None = None, name: str | None = None, since_us: int | None = None,
            limit: int = DEFAULT_LIMIT, before: tuple[int, str] | None = None,
            live: bool = False, cause: CauseKind | None = None) -> Page:
    if state is not None:
        finished = finished or state.terminal
    if cause is not None:  # as the API's: a cause is looked for in every job ...
        finished = True
    if live:  # ... unless only the unfinished ones are asked for
        finished = False
    query = JobQuery(terminal=None if finished else False, backend=backend, name_glob=name,
                     since_us=since_us, descending=True, after=before, limit=limit + 1,
                     cause=cause.value if cause is not None else None)
    if state is not None:
        query = replace(query, terminal=state.terminal,
                        outcome=state.value if state.terminal else None)
    chosen: list[JobView] = []
    keys: list[tuple[int, str]] = []
    while len(chosen) <= limit:
        rows = service.store.query_jobs(query)
        views = {v.job: v for v in service.views([r.job_id for r in rows])}
        for row in rows:
            view = views.get(row.job_id)
            if view is None or not shows(view, state, live, cause):
                continue
            chosen.append(view)
            keys.append((sort_key_us(row.created_at), row.job_id))
        if len(rows) <= limit:
            break
        query = replace(query, after=(sort_key_us(rows[-1].created_at), rows[-1].job_id))
    more = len(chosen) > limit
    chosen, keys = chosen[:limit], keys[:limit]
    older = f"{keys[-1][0]}:{keys[-1][1]}" if more else None
    return Page(jobs=list(reversed(chosen)), older=older)


def select_jobs(service: Service, *, finished: bool = False, state: State | None = None,
                live: bool = False, cause: CauseKind | None = None,
                backend: str | None = None, name: str | None = None,
                since_us: int | None = None) -> list[str]:
    """Every job ``ls`` with these filters would list, on all its pages, oldest first (the
    Python API's ``dispatch.jobs``): the store filters by what its jobs table holds (finished
    or not, a finished job's outcome, backend, a name pattern, creation, the causes a
    history holds); only when a state or a cause is asked are the remaining jobs folded,
    together (snapshots, no scheduler asked), and kept as ``shows`` says."""
    if state is not None:
        finished = finished or state.terminal
    if cause is not None:
        finished = True
    if live:
        finished = False
    query = JobQuery(terminal=None if finished else False, backend=backend, name_glob=name,
                     since_us=since_us, cause=cause.value if cause is not None else None)
    if state is not None:
        query = replace(query, terminal=state.terminal,
                        outcome=state.value if state.terminal else None)
    ids = [r.job_id for r in service.store.query_jobs(query)]
    if state is None and cause is None:
        return ids
    return [v.job for v in service.views(ids, ask_scheduler=False)
            if shows(v, state, live, cause)]
