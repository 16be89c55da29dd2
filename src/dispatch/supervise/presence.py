"""Who serves what, beyond the lease: each supervisor's presence rows (stores/presence.py).

``Announcer`` writes this process's rows: a standby's each time it asks for a scope's lease,
the active one's when it takes the lease, then a third into each period and whenever the
reads its scheduler refuses change (a backend's ``refused_reads``, core/refusals.py). A
row goes stale ``stale_after_s`` after its last write: STALE_POLLS polls plus one lease
period, so a standby whose pass is slowed by its other scopes is not dropped, and a killed
one is gone from ``dispatch supervisors`` within that bound. A presence write is a hint for
people: one that fails is logged and tried again at the next one, never fatal.

``supervisors_view`` (pure) joins the leases, the rows and the live jobs into what
``dispatch supervisors`` and ``/api/supervisors`` show; ``job_notes`` names the refused
reads in a job's ``status`` notes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dispatch.core.refusals import Refusal, RefusalsInvalid, decode, encode, refusal_notes
from dispatch.stores.base import StoreError
from dispatch.stores.fence import Lease
from dispatch.stores.presence import Presence, PresenceBook, Role

if TYPE_CHECKING:
    from dispatch.backends.base import Backend
    from dispatch.core.model import Status
    from dispatch.stores.base import RecordStore

log = logging.getLogger("dispatch.supervise.presence")

STALE_POLLS = 3


class Announcer:
    """This process's presence rows. Called from the loops that serve the scopes (a scope
    from one loop only)."""

    def __init__(self, book: PresenceBook, holder: str, *, started_at: datetime,
                 lease_s: float, poll: float, monotonic: Callable[[], float]) -> None:
        self.book = book
        self.holder = holder
        self.started_at = started_at
        self.lease_s = lease_s
        self.stale_after_s = STALE_POLLS * poll + lease_s
        self.monotonic = monotonic
        self._written: dict[str, tuple[Role, str, float]] = {}  # scope -> what, when
        self._failing = False

    def standby(self, scope: str) -> None:
        """Another holds ``scope``: refreshed at every ask for its lease."""
        self._write(scope, "standby", "[]", refresh_s=0.0)

    def active(self, scope: str, refusals: Sequence[Refusal]) -> None:
        """This process holds ``scope``: written when it changes, else a third into a
        period (as often as the lease is renewed)."""
        self._write(scope, "active", encode(refusals), refresh_s=self.lease_s / 3)

    def _write(self, scope: str, role: Role, refusals: str, *, refresh_s: float) -> None:
        now = self.monotonic()
        last = self._written.get(scope)
        if (last is not None and last[:2] == (role, refusals)
                and now - last[2] < refresh_s):
            return
        try:
            self.book.announce(scope, self.holder, role, started_at=self.started_at,
                               stale_after_s=self.stale_after_s, refusals=refusals)
        except StoreError as err:
            if not self._failing:  # said once until a write succeeds again
                log.warning("cannot write this supervisor's presence (who serves what, "
                            "for `dispatch supervisors`): %s", err)
            self._failing = True
            self._written.pop(scope, None)
            return
        self._failing = False
        self._written[scope] = (role, refusals, now)

    def withdraw_all(self) -> None:
        """A planned stop: this process's rows go at once."""
        self._written.clear()
        try:
            self.book.withdraw(self.holder)
        except StoreError as err:  # stale within stale_after_s anyway
            log.warning("cannot withdraw this supervisor's presence: %s", err)


def backend_refusals(backend_for: Callable[[str], Backend], scope: str) -> list[Refusal]:
    """What the scheduler of ``scope``'s backend refuses this process now."""
    from dispatch.backends.base import refusals_of  # not on a status read's path

    return refusals_of(backend_for(scope.partition(":")[0]))


# -- who serves what ---------------------------------------------------------------------------

def _refusals(row: Presence) -> list[dict[str, str]]:
    try:
        return [r.to_json() for r in decode(row.refusals)]
    except RefusalsInvalid as err:  # shown, never a traceback: the row is a hint
        return [{"resource": "?", "verb": "?", "words": f"unreadable: {err}", "cost": "",
                 "since": row.seen_at.isoformat()}]


def supervisors_view(leases: Sequence[Lease], live: Counter[str],
                     presence: Sequence[Presence] = (),
                     now: datetime | None = None) -> list[dict[str, Any]]:
    """One row per scope that has a lease, live jobs or a supervisor present: who is active
    since when, the last tick and the lag (seconds since it, on the store's clock), the
    standbys (each with its start, since when it stands by and its last write), and the
    reads the active one's scheduler refuses it. A scope with live jobs and no active
    supervisor shows state ``unserved`` / ``expired`` / ``released``."""
    rows: list[dict[str, Any]] = []
    by_scope = {lease.scope: lease for lease in leases}
    present: dict[str, list[Presence]] = {}
    for p in presence:
        present.setdefault(p.scope, []).append(p)
    for scope in sorted(set(by_scope) | set(live) | set(present)):
        lease = by_scope.get(scope)
        active = lease.holder if lease is not None and lease.active else None
        here = present.get(scope, [])
        standbys = [{"holder": p.holder, "started": p.started_at.isoformat(),
                     "since": p.since.isoformat(), "seen": p.seen_at.isoformat()}
                    for p in here if p.role == "standby" and p.holder != active]
        refused = next((_refusals(p) for p in here
                        if p.role == "active" and p.holder == active), [])
        extra = {"live_jobs": live.get(scope, 0), "standbys": standbys, "refusals": refused}
        if lease is None:
            rows.append({"scope": scope, "state": "unserved", "holder": None, "epoch": None,
                         "since": None, "last_tick": None, "lag_s": None, "period_s": None,
                         **extra})
            continue
        clock = now or lease.now
        last = lease.last_tick_at
        rows.append({
            "scope": scope, "state": lease.state, "holder": lease.holder,
            "epoch": lease.epoch, "since": lease.acquired_at.isoformat(),
            "last_tick": last.isoformat() if last is not None else None,
            "lag_s": round((clock - (last or lease.acquired_at)).total_seconds(), 3),
            "period_s": lease.period_s, **extra,
        })
    return rows


def supervisors_rows(store: RecordStore) -> list[dict[str, Any]]:
    """``dispatch supervisors --json`` and ``/api/supervisors``."""
    live = Counter(row.scope for row in store.list_jobs(live_only=True))
    book = store.leases()
    return supervisors_view(book.all(), live, book.presence().current())


def scope_refusals(store: RecordStore, scope: str) -> list[Refusal]:
    """The reads the active supervisor of ``scope`` says its scheduler refuses it (none when
    nobody is active, or its row is stale or unreadable)."""
    book = store.leases()
    lease = book.get(scope)
    if lease is None or not lease.active:
        return []
    for p in book.presence().current():
        if p.scope == scope and p.holder == lease.holder and p.role == "active":
            try:
                return decode(p.refusals)
            except RefusalsInvalid as err:
                log.warning("scope %s: the active supervisor's refusals: %s", scope, err)
    return []


def job_notes(store: RecordStore, status: Status | None) -> list[str]:
    """The notes of a job's ``status``: each read its scope's active supervisor is refused
    (an unfinished job only)."""
    if status is None or status.state.terminal:
        return []
    try:
        refused = scope_refusals(store, status.scope or status.backend)
    except StoreError as err:  # the status itself was read: it is shown without the notes
        log.warning("job %s: cannot read its supervisor's refusals: %s", status.job, err)
        return []
    return refusal_notes(refused, backend=status.backend, terminal=status.state.terminal)
