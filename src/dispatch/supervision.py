"""Supervision past one machine: scopes, and the loop that serves them under leases.

A **scope** is a backend plus, where it has one, its cluster: ``slurm:<ClusterName>``
(from ``scontrol show config``), ``kubeflow:<context>/<namespace>``, ``local:<host>:<root>``
(a digest of the local root's path: two roots on one host are two schedulers). A job's scope
is fixed when it is recorded (JobCreated.scope); records from before scopes have the bare
backend name as their scope.

Per scope exactly one supervisor is **active** (it holds the scope's lease, stores/lease.py)
and the others are hot standbys that try to take the lease every poll. Only the active one
asks the scheduler and ticks the scope's jobs, so N supervisors cost the scheduler what one
does. Its appends carry the lease's fence and the store refuses them once the lease is gone;
it also checks the lease before each action on the scheduler, renewing it when a third of
the period has passed. It renews only from its own loop, so a supervisor that stops making
progress (hung, paused, cut off from the store) loses the scope within one lease period and a
standby takes it at its next poll: takeover after a crash within period + poll. A planned
stop releases the lease, so a standby takes over at its next poll.

The lease period must exceed the longest single step (one scheduler call, one append): a step
longer than that loses the lease mid-tick, which is safe (fenced) but churns.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from dispatch.backends.base import Backend
from dispatch.core.model import SchedulerUnreachable
from dispatch.errors import BackendError, BadInput
from dispatch.notify import Notifier
from dispatch.stores.base import Fence, Fenced, RecordStore, StoreError
from dispatch.stores.lease import Lease, LeaseLost
from dispatch.supervisor import Supervisor, TickReport

log = logging.getLogger("dispatch.supervision")

BACKENDS = ("local", "slurm", "kubeflow")
DEFAULT_LEASE_S = 15.0


class ScopeError(BadInput):
    """A --scope that names no backend, or a cluster this machine's tools do not reach."""


# -- scopes ------------------------------------------------------------------------------------

def local_scope(root: Path, host: str | None = None) -> str:
    digest = hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:8]
    return f"local:{host or socket.gethostname()}:{digest}"


def slurm_cluster_name(config_text: str) -> str | None:
    """ClusterName from ``scontrol show config`` output (``ClusterName = x``)."""
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "ClusterName" and value.strip():
            return value.strip()
    return None


def slurm_scope() -> str:
    from dispatch.backends.slurm.tools import NAME, run_tool

    res = run_tool(["scontrol", "show", "config"], 30.0)
    if res.returncode != 0:
        raise SchedulerUnreachable(NAME, f"scontrol show config failed (exit {res.returncode}):"
                                   f" {res.words or 'no words'}")
    name = slurm_cluster_name(res.stdout)
    if name is None:
        raise SchedulerUnreachable(NAME, "scontrol show config names no ClusterName")
    return f"slurm:{name}"


def kubeflow_scope() -> str:
    from dispatch.backends.kubeflow.client import load_config

    cfg = load_config(os.environ.get("DISPATCH_KUBECONFIG") or None, None)
    context = getattr(cfg, "context_name", None) or "in-cluster"
    namespace = (os.environ.get("DISPATCH_K8S_NAMESPACE") or getattr(cfg, "namespace", None)
                 or "default")
    return f"kubeflow:{context}/{namespace}"


_scopes: dict[tuple[str, int], str] = {}


def scope_for(backend_name: str, backend: Backend) -> str:
    """The scope a job recorded now through ``backend`` belongs to (asked once per process).
    SchedulerUnreachable when the scheduler cannot say which cluster it is."""
    key = (backend_name, id(backend))
    if key not in _scopes:
        if backend_name == "local":
            root = getattr(backend, "root", None)
            if not isinstance(root, Path):
                raise BackendError("the local backend has no root directory")
            _scopes[key] = local_scope(root)
        elif backend_name == "slurm":
            _scopes[key] = slurm_scope()
        elif backend_name == "kubeflow":
            try:
                _scopes[key] = kubeflow_scope()
            except Exception as err:  # a kubeconfig that cannot be read names itself
                raise BackendError(f"kubeflow: cannot tell the scope: {err}") from None
        else:
            raise ScopeError(f"unknown backend {backend_name!r} ({', '.join(BACKENDS)})")
    return _scopes[key]


def scope_at_submit(backend_name: str, backend: Backend) -> str:
    """The scope to record a new job under: its scheduler's cluster, or, when the scheduler
    cannot say now (unreachable, no readable configuration), the bare backend name, which
    every supervisor serving that backend by default serves too. Recording the job is never
    refused for it: the supervisor submits once the scheduler answers."""
    try:
        return scope_for(backend_name, backend)
    except (SchedulerUnreachable, BackendError) as err:
        log.warning("recording the job under scope %s: %s", backend_name, err)
        return backend_name


def backend_of(scope: str) -> str:
    name = scope.partition(":")[0]
    if name not in BACKENDS:
        raise ScopeError(f"scope {scope!r}: names no backend ({', '.join(BACKENDS)}, "
                         "optionally followed by :cluster)")
    return name


@dataclass(frozen=True)
class Unresolved:
    """A backend served under its bare name only, for now: its scheduler could not say
    which cluster it is. Supervision asks again every lease period."""

    backend: str
    why: str

    def __str__(self) -> str:
        return f"{self.backend}: {self.why}"


def unresolved_note(u: Unresolved) -> str:
    return (f"{u.backend} is served by its bare name until its scheduler says which cluster "
            f"it is (asked again every lease period): {u.why}")


def resolve_scopes(requested: Iterable[str], backend_for: Callable[[str], Backend]
                   ) -> tuple[list[str], list[Unresolved]]:
    """The scopes to serve, and the backends whose own scope is not known yet.

    Nothing requested: every backend, each as this machine's scope of it plus its bare name
    (jobs recorded before scopes, or while the scheduler could not say its cluster). A bare
    backend name: the same for that backend. A backend that cannot be asked now is served
    under its bare name and listed as Unresolved (asked again later; a scheduler down while
    the supervisor starts must not leave its jobs unserved). A full scope: itself, refused
    when this machine's tools reach another cluster (served as given when they cannot be
    asked now)."""
    wanted = list(dict.fromkeys(requested))
    out: list[str] = []
    unresolved: list[Unresolved] = []
    for item in wanted or list(BACKENDS):
        name = backend_of(item)
        try:
            mine = scope_for(name, backend_for(name))
        except (SchedulerUnreachable, BackendError) as err:
            if item == name or not wanted:
                unresolved.append(Unresolved(name, str(err)))
                out.append(name)
                continue
            log.warning("cannot check scope %s against this machine's %s: %s", item, name,
                        err)
            mine = item
        if item not in (name, mine):
            raise ScopeError(f"--scope {item}: this machine's {name} backend is scope {mine}")
        out.extend([mine] if item != name else [mine, name])
    return list(dict.fromkeys(out)), unresolved


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
                 unresolved: Sequence[Unresolved] = ()) -> None:
        if not scopes:
            raise ScopeError("no scope to serve")
        if not lease_s > 0 or not poll > 0:
            raise BadInput("--lease and --poll must be positive")
        self.store = store
        self.book = store.leases()
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self.lease_s = lease_s
        self.poll = poll
        self.monotonic = monotonic
        self.stopping = threading.Event()
        self.held: dict[str, _Held] = {}
        self.backend_for = backend_for
        self.notifier = notifier
        self.make_supervisor = make_supervisor
        self.supervisors: dict[str, Supervisor] = {}
        for scope in dict.fromkeys(scopes):
            self._add(scope)
        # Backends served by bare name only until their scheduler says its cluster: the
        # monotonic time to ask next.
        self.unresolved = {u.backend: monotonic() + lease_s for u in unresolved}
        self.on_change: Callable[[str, str, Lease | None], None] = _log_change

    def _add(self, scope: str) -> None:
        self.supervisors[scope] = self.make_supervisor(
            self.store, self.backend_for, name=self.holder, scope=scope,
            notifier=self.notifier, lease_guard=lambda s=scope: self.guard(s))

    def _resolve_pending(self) -> None:
        """Ask each unresolved backend its scope again (once a lease period); serve it from
        now on when it answers."""
        now = self.monotonic()
        for name, due in list(self.unresolved.items()):
            if now < due:
                continue
            try:
                scope = scope_for(name, self.backend_for(name))
            except (SchedulerUnreachable, BackendError) as err:
                self.unresolved[name] = now + self.lease_s
                log.debug("scope of %s still unknown: %s", name, err)
                continue
            del self.unresolved[name]
            if scope not in self.supervisors:
                self._add(scope)
                log.info("serving %s too (%s answered)", scope, name)

    # -- the lease of one scope ---------------------------------------------------------------
    def guard(self, scope: str) -> Fence:
        """The fence of ``scope``'s lease, renewed when a third of the period has passed;
        LeaseLost when the lease is not ours any more."""
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
            lease = self.book.renew(h.lease.fence, self.lease_s)
        except StoreError as err:
            if self.monotonic() >= h.deadline:
                self._drop(scope, f"the store cannot be reached to renew it: {err}")
            log.warning("scope %s: cannot renew the lease yet: %s", scope, err)
            return
        if lease is None:
            self._drop(scope, "taken over or expired")
        h.lease, h.renewed, h.deadline = lease, now, now + self.lease_s

    def _drop(self, scope: str, why: str) -> NoReturn:
        lease = self.held.pop(scope, None)
        self.on_change(scope, f"standby ({why})", lease.lease if lease else None)
        raise LeaseLost(scope, self.holder, why)

    def _try_take(self, scope: str) -> None:
        asked = self.monotonic()
        try:
            lease = self.book.acquire(scope, self.holder, self.lease_s)
        except StoreError as err:
            log.warning("scope %s: cannot ask for the lease: %s", scope, err)
            return
        if lease is not None:
            self.held[scope] = _Held(lease, asked, asked + self.lease_s)
            self.on_change(scope, "active", lease)

    # -- one pass ---------------------------------------------------------------------------
    def step(self) -> dict[str, TickReport]:
        """Take the free scopes, tick the held ones; the reports of the scopes ticked."""
        reports: dict[str, TickReport] = {}
        if self.unresolved:
            self._resolve_pending()
        for scope, sup in list(self.supervisors.items()):
            if self.stopping.is_set():
                break
            if scope not in self.held:
                self._try_take(scope)
                if scope not in self.held:
                    continue
            try:
                self.guard(scope)
                reports[scope] = sup.tick()
                self.book.ticked(self.guard(scope))
            except LeaseLost as err:
                log.warning("%s", err)
            except Fenced as err:
                log.warning("scope %s: the store refused a write: %s", scope, err)
                if scope in self.held:
                    self.held.pop(scope)
                    self.on_change(scope, "standby (fenced)", None)
            except Exception:  # keep serving; the record is the truth, the next tick retries
                log.exception("scope %s: tick failed", scope)
                reports[scope] = TickReport(errors=["tick failed"])
        return reports

    def run(self, on_tick: Callable[[dict[str, TickReport], float], None] | None = None
            ) -> None:
        """Serve until stop(); then hand every held lease back. ``on_tick(reports, seconds)``
        after each pass (serve times its ticks into /metrics)."""
        backoff = self.poll
        try:
            while not self.stopping.is_set():
                started = self.monotonic()
                reports = self.step()
                if on_tick is not None:
                    on_tick(reports, self.monotonic() - started)
                unreachable = any(r.unreachable for r in reports.values())
                backoff = min(backoff * 2, self.poll * 16) if unreachable else self.poll
                # Never sleep past a renewal: a held lease is renewed a third into its period.
                wait = min(backoff, self.lease_s / 3) if self.held else self.poll
                self.stopping.wait(wait)
        finally:
            self.release_all()

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
        for sup in self.supervisors.values():
            sup.stopping.set()

    def release_all(self) -> None:
        for scope, h in list(self.held.items()):
            try:
                self.book.release(h.lease.fence)
            except StoreError as err:  # it expires on its own within one period
                log.warning("scope %s: cannot release the lease: %s", scope, err)
            self.held.pop(scope, None)
            self.on_change(scope, "released", h.lease)


def _log_change(scope: str, what: str, lease: Lease | None) -> None:
    epoch = f" (epoch {lease.epoch})" if lease is not None else ""
    log.info("scope %s: %s%s", scope, what, epoch)


# -- who serves what ------------------------------------------------------------------------

def supervisors_view(leases: Sequence[Lease], live: Counter[str],
                     now: datetime | None = None) -> list[dict[str, Any]]:
    """One row per scope that has a lease or live jobs: who is active since when, the last
    tick and the lag (seconds since it, on the store's clock). A scope with live jobs and no
    active supervisor shows state ``unserved`` / ``expired`` / ``released``."""
    rows: list[dict[str, Any]] = []
    by_scope = {lease.scope: lease for lease in leases}
    for scope in sorted(set(by_scope) | set(live)):
        lease = by_scope.get(scope)
        if lease is None:
            rows.append({"scope": scope, "state": "unserved", "holder": None, "epoch": None,
                         "since": None, "last_tick": None, "lag_s": None, "period_s": None,
                         "live_jobs": live.get(scope, 0)})
            continue
        clock = now or lease.now
        last = lease.last_tick_at
        rows.append({
            "scope": scope, "state": lease.state, "holder": lease.holder,
            "epoch": lease.epoch, "since": lease.acquired_at.isoformat(),
            "last_tick": last.isoformat() if last is not None else None,
            "lag_s": round((clock - (last or lease.acquired_at)).total_seconds(), 3),
            "period_s": lease.period_s, "live_jobs": live.get(scope, 0),
        })
    return rows


def supervisors_rows(store: RecordStore) -> list[dict[str, Any]]:
    """``dispatch supervisors --json`` and ``/api/supervisors``."""
    live = Counter(row.scope for row in store.list_jobs(live_only=True))
    return supervisors_view(store.leases().all(), live)
