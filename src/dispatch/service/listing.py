"""The dashboard's job list: one page of jobs (filters, search, any column's order, keyset
cursor) and how many jobs are held (a banner with a one-click filter, never rows pinned
above every result: issue 36).

The store filters, orders and pages by what its jobs table holds (id, name, backend,
creation: stores/query.py), so such a page reads only its own rows. A filter or order on
what only the record says (state, cause, submissions) folds every job the store's filters
keep and pages in memory, by the same kind of key; the store's ``terminal`` column narrows
that set first when the state asked for is finished or not. A search is such a filter: it
reads causes and application errors, which only the record holds.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from dispatch.core.model import CauseKind, State
from dispatch.errors import BadInput
from dispatch.service.counts import Keep, matches, state_counts
from dispatch.service.operations import Service
from dispatch.service.pages import parse_since
from dispatch.service.rows import answers, had_cause, list_row_json
from dispatch.service.rows import shown_cause as row_cause
from dispatch.service.views import JobView, status_json
from dispatch.stores.base import JobRow, sort_key_us
from dispatch.stores.query import ORDERS, JobQuery, Key, Order
from dispatch.support.durations import quoted
from dispatch.support.name_glob import natural_key
from dispatch.support.utf8 import encodable  # JSON's \udce9 is a lone surrogate

Column = Literal["created", "name", "backend", "job", "state", "cause", "submissions",
                 "ended", "duration"]
COLUMNS: tuple[Column, ...] = (*ORDERS, "state", "cause", "submissions", "ended", "duration")
MAX_LIMIT = 500


class BadParameter(BadInput):
    """A query parameter that cannot be used: the message names it and what it takes."""

    error_code = "bad-parameter"

    def __init__(self, name: str, problem: str) -> None:
        self.parameter = name
        super().__init__(f"query parameter {name!r}: {problem}")


@dataclass(frozen=True)
class ListRequest:
    """What a page asks for. ``order`` is a column, ``descending`` its direction (newest
    first by default); ``after`` the cursor the previous page gave."""

    order: Column = "created"
    descending: bool = True
    limit: int = 50
    after: Key | None = None
    state: State | None = None
    live_only: bool = False
    cause: CauseKind | None = None
    backend: str | None = None
    search: str | None = None
    since_us: int | None = None  # created at or after (stores/base.py sort_key_us)
    name: str | None = None  # a name pattern (support/name_glob.py), filtered in the store

    @property
    def derived(self) -> bool:
        """Whether the record must be folded to filter or order (the store cannot)."""
        return ((self.state is not None and not self.state.terminal)
                or self.cause is not None or self.search is not None
                or self.order not in ORDERS)


# The largest whole number a parameter takes: what a store's 64-bit integer holds (int()
# refuses 4,300 digits with a traceback, a store any integer past 2**63).
MOST = 2**63 - 1


def whole_number(name: str, raw: str, least: int, most: int = MOST) -> int:
    """Query parameter ``name`` as a whole number from ``least`` to ``most``; BadParameter
    naming it otherwise (ASCII digits only: int() reads any Unicode digit)."""
    if (not raw.isascii() or not raw.isdigit() or len(raw.lstrip("0")) > len(str(most))
            or not least <= int(raw) <= most):
        span = f"from {least} to {most}" if most < MOST else f"of at least {least}"
        raise BadParameter(name, f"{quoted(raw)} is not a whole number {span}")
    return int(raw)


# The key of each order, as _store_key and _derived_key make it: (its column's value,)
# creation µs, job id. A cursor is read against it, so a crafted one (another shape, mixed
# types, an integer no store holds) is refused here, not by the store or by sorted().
_KEY_TYPES: dict[Column, tuple[type, ...]] = {
    "created": (int, str), "name": (str, int, str), "backend": (str, int, str),
    "job": (str, int, str), "state": (str, int, str), "cause": (str, int, str),
    "submissions": (int, int, str), "ended": (int, int, str), "duration": (int, int, str)}


def encode_cursor(order: Column, descending: bool, key: Key) -> str:
    raw = json.dumps([order, descending, *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str, order: Column, descending: bool) -> Key:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        doc = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: [[[[... nested past the stack
        raise BadParameter("after", "not a cursor this server gave (use the 'next' of the "
                           "previous page)") from None
    if not isinstance(doc, list) or len(doc) < 2 or doc[0] != order or doc[1] != descending:
        raise BadParameter("after", "not a cursor of this order (a cursor belongs to the "
                           "order and direction of the page that gave it)")
    key = doc[2:]
    if not (len(key) == len(_KEY_TYPES[order])
            and all(type(v) is t for v, t in zip(key, _KEY_TYPES[order], strict=True))
            and all(0 <= v <= MOST for v in key if isinstance(v, int))
            and all(encodable(v) for v in key if isinstance(v, str))):
        raise BadParameter("after", "not a cursor this server gave (use the 'next' of the "
                           "previous page)")
    return tuple(key)


def parse_list_request(params: dict[str, str], backends: Sequence[str]) -> ListRequest:
    """A ListRequest from query parameters; BadParameter naming the first that is wrong."""
    req = ListRequest()
    if "order" in params:
        raw = params["order"]
        column = raw.removeprefix("-")
        if column not in COLUMNS:
            raise BadParameter("order", f"{raw!r} is not a column; one of "
                               f"{', '.join(COLUMNS)} (a leading '-' for descending)")
        req = replace(req, order=column, descending=raw.startswith("-"))
    if "limit" in params:
        req = replace(req, limit=whole_number("limit", params["limit"], 1, MAX_LIMIT))
    state = params.get("state")
    if state == "live":
        req = replace(req, live_only=True)
    elif state:
        try:
            req = replace(req, state=State(state))
        except ValueError:
            raise BadParameter("state", f"{state!r} is not a state; one of live, "
                               f"{', '.join(s.value for s in State)}") from None
    cause = params.get("cause")
    if cause:
        try:
            req = replace(req, cause=CauseKind(cause))
        except ValueError:
            raise BadParameter("cause", f"{cause!r} is not a cause; one of "
                               f"{', '.join(c.value for c in CauseKind)}") from None
    backend = params.get("backend")
    if backend:
        if backend not in backends:
            raise BadParameter("backend", f"{backend!r} is not a backend; one of "
                               f"{', '.join(backends)}")
        req = replace(req, backend=backend)
    if "name" in params:
        if not params["name"] or not encodable(params["name"]):
            raise BadParameter("name", f"{quoted(params['name'])}: a name, or a shell-style "
                               "pattern such as 'sweep-*'")
        req = replace(req, name=params["name"])
    search = params.get("q", "").strip()
    if len(search) > 200:
        raise BadParameter("q", "longer than 200 characters")
    if search:
        req = replace(req, search=search)
    if params.get("since"):
        try:
            req = replace(req, since_us=parse_since(params["since"]))
        except BadInput:
            raise BadParameter("since", f"{quoted(params['since'])} is not an ISO 8601 date "
                               "or time (e.g. 2026-12-01 or 2026-12-01T08:00)") from None
    if "after" in params:
        req = replace(req, after=decode_cursor(params["after"], req.order, req.descending))
    return req


def _store_key(order: Column, row: JobRow) -> Key:
    first: dict[str, str] = {"name": natural_key(row.name), "backend": row.backend,
                             "job": row.job_id}
    tail = (sort_key_us(row.created_at), row.job_id)
    return (first[order], *tail) if order in first else tail


def _derived_key(order: Column, row: JobRow, view: JobView, now_us: int) -> Key:
    if order in ORDERS:  # a store column, ordered here because a filter needed the record
        return _store_key(order, row)
    s = view.status
    first: str | int
    created = sort_key_us(row.created_at)
    ended = sort_key_us(s.ended_at) if s is not None and s.ended_at is not None else None
    if order == "ended":  # an unfinished job has not ended: after every end, descending
        first = ended if ended is not None else 0
    elif order == "duration":  # time to result: creation to the outcome, or to now
        first = max(0, (ended if ended is not None else now_us) - created)
    elif order == "state":
        first = s.state.value if s is not None else ""
    elif order == "cause":
        cause, _ = row_cause(view)
        first = cause.kind.value if cause is not None else ""
    else:
        first = s.submissions if s is not None else 0
    return (first, sort_key_us(row.created_at), row.job_id)


def _matches(req: ListRequest, view: JobView, row: JobRow | None = None) -> bool:
    s = view.status
    if (req.state is not None or req.cause is not None) and s is None:
        return False
    if req.state is not None and s is not None and s.state is not req.state:
        return False
    if req.cause is not None and not had_cause(view, req.cause):
        return False
    return req.search is None or answers(
        view, req.search, job_id=row.job_id if row else "", name=row.name if row else "")


def _after(key: Key, cursor: Key, descending: bool) -> bool:
    return key < cursor if descending else key > cursor


def find_jobs(service: Service, req: ListRequest) -> tuple[list[JobView], str | None]:
    """One page of the list: the jobs' views (the scheduler asked for those shown) and the
    cursor of the next page (None on the last). The dashboard, the API and the CLI share
    it: filters (state, cause, backend, a name pattern), the search over names, id
    prefixes, causes and application errors (service/rows.py ``answers``), any column's
    order."""
    views, nxt, _, _ = _find(service, req)
    return views, nxt


def find_counted(service: Service, req: ListRequest
                 ) -> tuple[list[JobView], str | None, dict[str, int], int | None]:
    """``find_jobs``, how many jobs of each state its filters keep leaving the state aside
    (service/counts.py: the counts above the dashboard's list) and how many match them all,
    on every page together (its "page 1 of 7 · 312 jobs")."""
    views, nxt, base, folded = _find(service, req)
    keep: Keep | None = None
    if req.search is not None or req.cause is not None:
        unstated = replace(req, state=None, live_only=False)
        keep = lambda view, row: _matches(unstated, view, row)  # noqa: E731
    counts = state_counts(service, base, folded, keep=keep, searched=req.search is not None)
    return views, nxt, counts, matches(counts, req.state, req.live_only)


def _find(service: Service, req: ListRequest
          ) -> tuple[list[JobView], str | None, JobQuery, dict[str, JobView]]:
    """The page, its next cursor, the store's filters and the views it folded."""
    terminal = (False if req.live_only else
                None if req.state is None else req.state.terminal)
    # A finished state is the store's outcome column: filtered in SQL, not by folding.
    outcome = req.state.value if req.state is not None and req.state.terminal else None
    base = JobQuery(terminal=terminal, backend=req.backend, outcome=outcome,
                    since_us=req.since_us, name_glob=req.name,
                    cause=req.cause.value if req.cause is not None else None)
    if not req.derived:
        order: Order = req.order  # type: ignore[assignment]  # a store column here
        rows = service.store.query_jobs(replace(base, order=order, descending=req.descending,
                                                after=req.after, limit=req.limit + 1))
        page, more = rows[:req.limit], len(rows) > req.limit
        keys = [_store_key(req.order, r) for r in page]
        views = service.views([r.job_id for r in page])
        if req.state is not None:  # jobs finished before the store kept outcomes
            views = [v for v in views if _matches(req, v)]
        by_id: dict[str, JobView] = {}
    else:
        rows = service.store.query_jobs(base)
        by_id = {v.job: v for v in service.views([r.job_id for r in rows],
                                                 ask_scheduler=False)}
        now_us = sort_key_us(service.clock())
        keyed = sorted(((_derived_key(req.order, r, by_id[r.job_id], now_us), r) for r in rows
                        if r.job_id in by_id and _matches(req, by_id[r.job_id], r)),
                       key=lambda kr: kr[0], reverse=req.descending)
        if req.after is not None:
            cursor = req.after
            keyed = [(k, r) for k, r in keyed if _after(k, cursor, req.descending)]
        chosen, more = keyed[:req.limit], len(keyed) > req.limit
        keys = [k for k, _ in chosen]
        asked = {v.job: v for v in service.views([r.job_id for _, r in chosen])}
        views = [asked.get(r.job_id, by_id[r.job_id]) for _, r in chosen]
    nxt = encode_cursor(req.order, req.descending, keys[-1]) if more else None
    return views, nxt, base, by_id


def list_page(service: Service, req: ListRequest) -> dict[str, Any]:
    """``{"jobs", "next", "held_count", "total", "counts"}``: one page of list rows
    (service/rows.py: what the list shows, not the whole status), the cursor of the next
    page (None on the last), how many jobs are held (the dashboard's banner; ``state=held``
    lists them; None while a server is still counting them), how many jobs match every
    filter on all pages together (None for an unfinished state while a server is still
    folding the unfinished jobs), and how many of each state the filters other than the
    state keep (service/counts.py; ``live`` for the unfinished until then)."""
    views, nxt, counts, total = find_counted(service, req)
    return {"jobs": [list_row_json(v) for v in views], "next": nxt,
            "held_count": held_count(service), "total": total, "counts": counts}


def held_ids(service: Service) -> list[str]:
    """The held jobs' ids, newest first, as the record says (a hold is the record's own
    fact). A server's held index (service/held.py) names them from the live jobs it keeps
    folded; without one, every live job is folded here."""
    if service.held_index is not None:
        return service.held_index.held(service.store, service.clock())
    ids = [r.job_id for r in service.store.query_jobs(JobQuery(terminal=False,
                                                               descending=True))]
    return [v.job for v in service.views(ids, ask_scheduler=False)
            if v.status is not None and v.status.state is State.HELD]


def held_count(service: Service) -> int | None:
    """How many jobs are held; None while a server's held index is still being built in
    the background (service/held.py), so that the first refresh does not wait for it."""
    if service.held_index is not None:
        ids = service.held_index.held_if_ready(service.store, service.clock())
        return None if ids is None else len(ids)
    return len(held_ids(service))


def held_jobs(service: Service) -> list[dict[str, Any]]:
    """The held jobs' status JSON, newest first (``held_ids``)."""
    views: list[JobView] = service.views(held_ids(service), ask_scheduler=False)
    return [status_json(v) for v in views
            if v.status is not None and v.status.state is State.HELD]


# The parameters that ask for a page (the shape above) rather than the plain list.
# ``name`` alone (with ``all``, ``state``) keeps the plain list, as before pages: a pattern.
PAGE_PARAMETERS = frozenset({"limit", "after", "order", "q", "backend", "cause", "since"})
