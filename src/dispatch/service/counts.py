"""How many jobs of each state the list's filters keep: the dashboard's counts above the list
(each a link to its ``?state=``) and its "page 1 of 7 · 312 jobs".

The finished jobs are counted by the store from its outcome column (stores/query.py
``count_sql``: a scan of the outcome index, no record read); the unfinished ones by the
state their record gives (the state a ``?state=`` filter reads), from a server's held index,
which keeps the live jobs folded between refreshes (service/held.py). While that index is
first built, the unfinished jobs are one count under ``live`` (the store knows they are
unfinished, not yet in which state), so that no request waits for the fold. A filter only
the record answers (a search; a cause, for an unfinished job) is decided on each job's
record, folded once: the views the page folded already are handed in and reused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from dispatch.core.model import State
from dispatch.core.status import record_state
from dispatch.service.operations import Service
from dispatch.service.views import JobView
from dispatch.stores.base import JobRow
from dispatch.stores.query import JobQuery

LIVE = "live"  # the unfinished jobs, while their states are not known yet

Keep = Callable[[JobView, JobRow], bool]
_EVERY_JOB = JobQuery()


def state_counts(service: Service, base: JobQuery, folded: Mapping[str, JobView], *,
                 keep: Keep | None = None, searched: bool = False) -> dict[str, int]:
    """State value (or ``LIVE``) -> how many jobs of ``base``'s filters (with no state
    narrowing) are in it; no zeros. ``keep`` is the filter only a record answers (None when
    the store's filters say it all); ``searched``: it is a search, which the store cannot
    count for the finished jobs either (a cause it can: its causes table). ``folded``: views
    of some of the jobs, already read."""
    base = replace(base, terminal=None, outcome=None, order="created", after=None,
                   limit=None)
    counts: dict[str, int] = {}
    by_outcome = None if searched else service.store.count_jobs(base)
    if by_outcome is not None and None not in by_outcome:
        counts.update({o: n for o, n in by_outcome.items() if o})
    else:  # a search, or jobs finished before the store kept outcomes: their records say
        _count_views(counts, _views(service, replace(base, terminal=True), keep, folded))
    unfiltered = base == _EVERY_JOB
    if keep is not None or service.held_index is None:
        live_rows = service.store.query_jobs(replace(base, terminal=False))
        _count_views(counts, _views(service, live_rows, keep, folded))
        return counts
    if unfiltered:  # every live job the index holds: its counts, kept between refreshes
        live = service.held_index.state_counts_if_ready(service.store, service.clock())
        if live is None:
            if by_outcome is not None and by_outcome.get(""):
                counts[LIVE] = by_outcome[""]
            return counts
        for state, n in live.items():
            counts[state] = counts.get(state, 0) + n
        return counts
    jobs = service.held_index.live_if_ready(service.store, service.clock())
    if jobs is None:
        if by_outcome is not None and by_outcome.get(""):
            counts[LIVE] = by_outcome[""]
        return counts
    # the jobs table names the live jobs a filter keeps (no record read)
    wanted = {r.job_id for r in service.store.query_jobs(replace(base, terminal=False))}
    for job in jobs:
        if job.id in wanted:
            state = record_state(job).value
            counts[state] = counts.get(state, 0) + 1
    return counts


def matches(counts: Mapping[str, int], state: State | None, live_only: bool) -> int | None:
    """How many jobs a list with this state filter holds on all its pages together; None
    for an unfinished state while the unfinished jobs are one ``LIVE`` count."""
    if state is not None:
        if not state.terminal and LIVE in counts:
            return None
        return counts.get(state.value, 0)
    if live_only:
        return sum(n for s, n in counts.items() if s == LIVE or not State(s).terminal)
    return sum(counts.values())


def _views(service: Service, rows_or_query: list[JobRow] | JobQuery, keep: Keep | None,
           folded: Mapping[str, JobView]) -> list[JobView]:
    rows = (service.store.query_jobs(rows_or_query) if isinstance(rows_or_query, JobQuery)
            else rows_or_query)
    missing = [r.job_id for r in rows if r.job_id not in folded]
    fresh = {v.job: v for v in service.views(missing, ask_scheduler=False)} if missing else {}
    out: list[JobView] = []
    for r in rows:
        view = folded.get(r.job_id) or fresh.get(r.job_id)
        if view is not None and (keep is None or keep(view, r)):
            out.append(view)
    return out


def _count_views(counts: dict[str, int], views: list[JobView]) -> None:
    for v in views:
        if v.status is not None:
            counts[v.status.state.value] = counts.get(v.status.state.value, 0) + 1


__all__ = ["LIVE", "Keep", "matches", "state_counts"]
