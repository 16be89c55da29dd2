"""Supervision past one machine: the loop that serves scopes (scopes.py) under leases.

Per scope exactly one supervisor is **active** (it holds the scope's lease, stores/lease.py)
and the others are hot standbys that try to take the lease every poll. Only the active one
asks the scheduler and ticks the scope's jobs, so N supervisors cost the scheduler what one
does. Its appends carry the lease's fence and the store refuses them once the lease is gone;
it also checks the lease before each action on the scheduler, renewing it when a third of
the period has passed. It renews only from the loop that ticks the scope, so a supervisor
that stops making progress there (hung, paused, cut off from the store) loses the scope
within one lease period and a standby takes it at its next poll: takeover after a crash
within period + poll. A planned stop releases the lease, so a standby takes over at its next
poll.

Each backend is served on a thread of its own (its scopes one after the other, as one
scheduler), and each look at a scheduler runs with a deadline, waited for while the lease
is kept (discovery.Lookout); asking a scheduler which cluster it is runs off every loop
(scopes.ask_scope). So a scheduler tool that hangs holds up only its own backend's jobs: the
other backends keep their reaction time and their leases.

The lease period must exceed the longest single action (one submit or stop, one append): a
step longer than that loses the lease mid-tick, which is safe (fenced) but churns.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn

from dispatch.backends.base import Backend
from dispatch.core.model import SchedulerUnreachable
from dispatch.errors import BackendError
from dispatch.stores.base import Fence, Fenced, RecordStore, StoreError
from dispatch.stores.fence import Lease, LeaseLost
from dispatch.supervise.discovery import LOOK_DEADLINE_S, Lookout
from dispatch.supervise.escalations import Notifier
from dispatch.supervise.loop import Supervisor, TickReport
from dispatch.supervise.presence import Announcer, backend_refusals
from dispatch.supervise.presence import supervisors_rows as supervisors_rows
from dispatch.supervise.presence import supervisors_view as supervisors_view
from dispatch.supervise.scopes import RESOLVE_WAIT_S as RESOLVE_WAIT_S
from dispatch.supervise.scopes import ScopeError as ScopeError
from dispatch.supervise.scopes import Unresolved as Unresolved
from dispatch.supervise.scopes import ask_scope
from dispatch.supervise.scopes import backend_of as backend_of
from dispatch.supervise.scopes import live_scopes as live_scopes
from dispatch.supervise.scopes import local_scope as local_scope
from dispatch.supervise.scopes import resolve_scopes as resolve_scopes
from dispatch.supervise.scopes import scope_at_submit as scope_at_submit
from dispatch.supervise.scopes import scope_for as scope_for
from dispatch.supervise.scopes import scopes_to_serve as scopes_to_serve
from dispatch.supervise.scopes import unresolved_note as unresolved_note
from dispatch.support import failpoints as fp
from dispatch.support.durations import lease_seconds, poll_seconds

log = logging.getLogger("dispatch.supervise.leases")

DEFAULT_LEASE_S = 15.0
# How long a planned stop waits for the backends' loops to finish their step before it
# hands the leases back anyway (an append made after that is refused: fenced).
STOP_WAIT_S = 10.0


# -- the loop ----------------------------------------------------------------------------------

@dataclass
class _Held:
    lease: Lease
    renewed: float  # monotonic time the last renewal (or the taking) was asked for
    deadline: float  # the lease surely still ours before this (the store's expiry is later)


class Supervision:
    """Serve ``scopes`` from one process: hold each scope's lease when it is free, tick only
    the scopes held, hand them back on stop()."""

    def __init__(self, store: RecordStore, backend_for: Callable[[str], Backend],
                 scopes: Sequence[str], *, holder: str | None = None,
                 lease_s: float = DEFAULT_LEASE_S, poll: float = 2.0,
                 notifier: Notifier | None = None,
                 make_supervisor: Callable[..., Supervisor] = Supervisor,
                 monotonic: Callable[[], float] = time.monotonic,
                 unresolved: Sequence[Unresolved] = (),
                 look_deadline_s: float = LOOK_DEADLINE_S) -> None:
        if not scopes:
            raise ScopeError("no scope to serve")
        self.store = store
        self.book = store.leases()
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self.lease_s = lease_seconds(lease_s, "--lease")
        self.poll = poll_seconds(poll, "--poll")
        self.monotonic = monotonic
        self.stopping = threading.Event()
        self.held: dict[str, _Held] = {}
        self.standing_by: set[str] = set()  # scopes whose standby was said (on_change)
        self.backend_for = _OnePerName(backend_for)
        self.notifier = notifier
        self.make_supervisor = make_supervisor
        self.lookout = Lookout(look_deadline_s)
        self._scopes_lock = threading.Lock()
        self._on_tick_lock = threading.Lock()
        self.supervisors: dict[str, Supervisor] = {}
        # Why the last pass of a scope ticked nothing (``supervise --once`` says it).
        self.untick: dict[str, str] = {}
        for scope in dict.fromkeys(scopes):
            self._add(scope)
        # Backends served by bare name only until their scheduler says its cluster: the
        # monotonic time to ask next, and the question in flight (never waited for).
        self.unresolved = {u.backend: monotonic() + self.lease_s for u in unresolved}
        self._asking: dict[str, Future[str]] = {
            u.backend: u.asking for u in unresolved if u.asking is not None}
        self.on_change: Callable[[str, str, Lease | None], None] = _log_change
        # Who serves what beyond the lease: this process's presence row per scope (a
        # standby's too), and the reads its scheduler refuses it (supervise/presence.py).
        self.announcer = Announcer(self.book.presence(), self.holder,
                                   started_at=datetime.now(UTC), lease_s=self.lease_s,
                                   poll=self.poll, monotonic=monotonic)

    def _add(self, scope: str) -> None:
        sup = self.make_supervisor(
            self.store, self.backend_for, name=self.holder, scope=scope,
            notifier=self.notifier, lease_guard=lambda s=scope: self.guard(s),
            lookout=self.lookout)
        if self.stopping.is_set():
            sup.stopping.set()
        with self._scopes_lock:
            self.supervisors[scope] = sup

    def follow_live_scopes(self) -> None:
        """From now on also serve the scope of each live job recorded later (one submitted
        for a backend not served yet): looked for once a lease period, on a thread of its
        own (asking a scheduler which cluster it is can take seconds)."""
        refused: set[str] = set()

        def watch() -> None:
            while not self.stopping.wait(self.lease_s):
                try:
                    self.add_live_scopes(refused)
                except Exception:  # noqa: BLE001 - the next look tries again; the log says why
                    log.exception("cannot look for new scopes")
        threading.Thread(target=watch, daemon=True, name="dispatch-live-scopes").start()

    def add_live_scopes(self, refused: set[str]) -> list[str]:
        """Serve each live job's scope not served yet that this machine can serve (another
        machine's cluster goes into ``refused``, not asked about again); the scopes added."""
        added: list[str] = []
        for scope in live_scopes(self.store):
            if scope in self.supervisors or scope in refused:
                continue
            try:
                resolved, _ = resolve_scopes([scope], self.backend_for, unchecked=False)
            except ScopeError as err:
                log.info("not serving %s: %s", scope, err)
                refused.add(scope)
                continue
            for more in resolved:
                if more not in self.supervisors:
                    self._add(more)
                    added.append(more)
                    log.info("serving %s too (a live job of it)", more)
        return added

    def _by_backend(self) -> dict[str, list[tuple[str, Supervisor]]]:
        """The scopes served, grouped by backend (a backend's scopes are one scheduler)."""
        with self._scopes_lock:
            served = list(self.supervisors.items())
        groups: dict[str, list[tuple[str, Supervisor]]] = {}
        for scope, sup in served:
            groups.setdefault(scope.partition(":")[0], []).append((scope, sup))
        return groups

    def _resolve_pending(self) -> None:
        """Take the answers of the unresolved backends that came in, and ask again those
        due (once a lease period); serve a backend's scope from its answer on. Never waits:
        the asking runs on threads of its own (scopes.ask_scope)."""
        now = self.monotonic()
        for name, due in list(self.unresolved.items()):
            asking = self._asking.get(name)
            if asking is None:
                if now >= due:
                    self._asking[name] = ask_scope(name, self.backend_for)
                continue
            if not asking.done():
                continue
            del self._asking[name]
            try:
                scope = asking.result()
            except (SchedulerUnreachable, BackendError) as err:
                self.unresolved[name] = now + self.lease_s
                log.debug("scope of %s still unknown: %s", name, err)
                continue
            except Exception:  # noqa: BLE001 - asked again next period; the log says why
                self.unresolved[name] = now + self.lease_s
                log.exception("scope of %s: asking failed", name)
                continue
            del self.unresolved[name]
            if scope not in self.supervisors:
                self._add(scope)
                log.info("serving %s too (%s answered)", scope, name)

    # -- the lease of one scope ---------------------------------------------------------------
    def guard(self, scope: str) -> Fence:
        """The fence of ``scope``'s lease, renewed when a third of the period has passed;
        LeaseLost when the lease is not ours any more. Called from the loop that ticks the
        scope only."""
        h = self.held.get(scope)
        if h is None:
            raise LeaseLost(scope, self.holder, "not held")
        now = self.monotonic()
        if now >= h.renewed + self.lease_s / 3:
            self._renew(scope, h, now)
        return h.lease.fence

    def _renew(self, scope: str, h: _Held, now: float) -> None:
        if now >= h.deadline:
            self._drop(scope, "not renewed before it expired")
        try:
            if fp.ARMED:
                fp.hit("lease:renewing")
            lease = self.book.renew(h.lease.fence, self.lease_s)
        except StoreError as err:
            if self.monotonic() >= h.deadline:
                self._drop(scope, f"the store cannot be reached to renew it: {err}")
            log.warning("scope %s: cannot renew the lease yet: %s", scope, err)
            return
        if lease is None:
            self._drop(scope, "taken over or expired")
        h.lease, h.renewed, h.deadline = lease, now, now + self.lease_s
        if fp.ARMED:
            fp.hit("lease:renewed")

    def _drop(self, scope: str, why: str) -> NoReturn:
        lease = self.held.pop(scope, None)
        self.on_change(scope, f"standby for: {scope} (lost the lease: {why})",
                       lease.lease if lease else None)
        raise LeaseLost(scope, self.holder, why)

    def _try_take(self, scope: str) -> None:
        asked = self.monotonic()
        try:
            lease = self.book.acquire(scope, self.holder, self.lease_s)
        except StoreError as err:
            log.warning("scope %s: cannot ask for the lease: %s", scope, err)
            self.untick[scope] = f"cannot ask for the lease: {err}"
            return
        if lease is not None:
            self.held[scope] = _Held(lease, asked, asked + self.lease_s)
            self.standing_by.discard(scope)
            # The row first, then the word: whoever reads the word finds the row.
            self.announcer.active(scope, backend_refusals(self.backend_for, scope))
            self.on_change(scope, f"active for: {scope} (epoch {lease.epoch})", lease)
            return
        self.announcer.standby(scope)  # at every ask: a live standby's row stays fresh
        if scope not in self.standing_by:  # said once, until it is active again
            self.standing_by.add(scope)
            self.on_change(scope, f"standby for: {scope} (active: "
                           f"{self._active_holder(scope)}; this takes over if it stops)",
                           None)

    def _active_holder(self, scope: str) -> str:
        try:
            other = self.book.get(scope)
        except StoreError:
            return "another supervisor"
        return other.holder if other is not None and other.active else "another supervisor"

    # -- one pass ---------------------------------------------------------------------------
    def _pass(self, scopes: Sequence[tuple[str, Supervisor]]) -> dict[str, TickReport]:
        """Take the free ones of ``scopes`` (one backend's), tick the held ones."""
        reports: dict[str, TickReport] = {}
        for scope, sup in scopes:
            if self.stopping.is_set():
                break
            self.untick.pop(scope, None)
            if scope not in self.held:
                self._try_take(scope)
                if scope not in self.held:
                    self.untick.setdefault(scope, "its lease is held by another supervisor")
                    continue
            try:
                self.guard(scope)
                reports[scope] = sup.tick()
                self.book.ticked(self.guard(scope))
                self.announcer.active(scope, backend_refusals(self.backend_for, scope))
            except LeaseLost as err:
                self.untick[scope] = str(err)
                log.warning("%s", err)
            except Fenced as err:
                self.untick[scope] = f"the store refused a write: {err}"
                log.warning("scope %s: the store refused a write: %s", scope, err)
                if scope in self.held:
                    self.held.pop(scope)
                    self.on_change(scope, f"standby for: {scope} (lost the lease: the "
                                   "store refused a write)", None)
            except Exception:  # keep serving; the record is the truth, the next tick retries
                log.exception("scope %s: tick failed", scope)
                reports[scope] = TickReport(errors=["tick failed"])
        return reports

    def step(self) -> dict[str, TickReport]:
        """One pass over every scope: take the free ones, tick the held ones, each backend's
        on a thread of its own (all waited for); the reports of the scopes ticked."""
        self._resolve_pending()
        groups = list(self._by_backend().values())
        if len(groups) <= 1:
            return self._pass(groups[0]) if groups else {}
        reports: dict[str, TickReport] = {}

        def one(group: Sequence[tuple[str, Supervisor]]) -> None:
            reports.update(self._pass(group))

        threads = [threading.Thread(target=one, args=(g,), daemon=True,
                                    name=f"dispatch-pass-{g[0][0].partition(':')[0]}")
                   for g in groups]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return reports

    def run(self, on_tick: Callable[[dict[str, TickReport], float], None] | None = None
            ) -> None:
        """Serve until stop(); then hand every held lease back. Each backend is served by
        a loop of its own; this one takes the schedulers' answers about their clusters.
        ``on_tick(reports, seconds)`` after each pass of a backend (serve times its ticks
        into /metrics); never called by two loops at once."""
        loops: dict[str, threading.Thread] = {}
        try:
            while not self.stopping.is_set():
                self._resolve_pending()
                for name in self._by_backend():
                    if name not in loops:
                        loops[name] = threading.Thread(
                            target=self._serve_backend, args=(name, on_tick), daemon=True,
                            name=f"dispatch-supervise-{name}")
                        loops[name].start()
                self.stopping.wait(min(self.poll, 1.0))
        finally:
            self.stop()
            until = time.monotonic() + STOP_WAIT_S
            for loop in loops.values():
                loop.join(max(0.0, until - time.monotonic()))
            self.release_all()

    def _serve_backend(self, name: str,
                       on_tick: Callable[[dict[str, TickReport], float], None] | None) -> None:
        """One backend's scopes, pass after pass, until stop(); backs off while its
        scheduler cannot be reached, never sleeping past a renewal."""
        backoff = self.poll
        while not self.stopping.is_set():
            scopes = self._by_backend().get(name, [])
            started = self.monotonic()
            try:
                reports = self._pass(scopes)
                if on_tick is not None:
                    with self._on_tick_lock:
                        on_tick(reports, self.monotonic() - started)
            except Exception:  # keep serving; the record is the truth, the next pass retries
                log.exception("backend %s: pass failed", name)
                reports = {}
            unreachable = any(r.unreachable for r in reports.values())
            backoff = min(backoff * 2, self.poll * 16) if unreachable else self.poll
            held = any(scope in self.held for scope, _ in scopes)
            # Never sleep past a renewal: a held lease is renewed a third into its period.
            self.stopping.wait(min(backoff, self.lease_s / 3) if held else self.poll)

    def serve_until(self, done: Callable[[], bool],
                    on_tick: Callable[[dict[str, TickReport]], None] | None = None) -> None:
        """Serve until ``done()`` (checked after each pass) or stop(); then hand every held
        lease back. For ``dispatch run`` and ``Job.wait``: active while the scope's lease is
        free, else a standby that watches while the active supervisor acts (and takes over
        should it go), so one job's waiter never makes a second active supervisor."""
        try:
            while not self.stopping.is_set():
                reports = self.step()
                if on_tick is not None:
                    on_tick(reports)
                if done():
                    return
                unreachable = any(r.unreachable for r in reports.values())
                wait = self.poll * (4 if unreachable else 1)
                if self.held:  # never sleep past a renewal
                    wait = min(wait, self.lease_s / 3)
                self.stopping.wait(wait)
        finally:
            self.release_all()

    def stop(self) -> None:
        self.stopping.set()
        with self._scopes_lock:
            for sup in self.supervisors.values():
                sup.stopping.set()

    def release_all(self) -> None:
        for scope, h in list(self.held.items()):
            try:
                self.book.release(h.lease.fence)
            except StoreError as err:  # it expires on its own within one period
                log.warning("scope %s: cannot release the lease: %s", scope, err)
            self.held.pop(scope, None)
            self.on_change(scope, f"released: {scope} (epoch {h.lease.epoch})", h.lease)
        self.announcer.withdraw_all()


class _OnePerName:
    """``backend_for`` made safe to call from several loops at once: a backend is built
    once (the registry keeps one instance per name, backends keep per-tick caches)."""

    def __init__(self, backend_for: Callable[[str], Backend]) -> None:
        self._backend_for = backend_for
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def __call__(self, name: str) -> Backend:
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            return self._backend_for(name)


def _log_change(scope: str, what: str, lease: Lease | None) -> None:
    """``what``: the whole line ("active for: SCOPE (epoch 3)", "standby for: SCOPE
    (active: HOLDER; ...)", "released: SCOPE (epoch 3)")."""
    log.info("%s", what)
