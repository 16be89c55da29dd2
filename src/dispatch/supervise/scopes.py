"""Scopes: which scheduler a job belongs to, and which scopes a supervisor serves.

A **scope** is a backend plus, where it has one, its cluster: ``slurm:<ClusterName>``
(from ``scontrol show config``), ``kubeflow:<cluster id>/<namespace>`` (the API server's
kube-system UID: backends/kubeflow/scope.py), ``local:<host>:<root>`` (a digest of the local
root's path: two roots on one host are two schedulers). A job's scope is fixed when it is
recorded (JobCreated.scope); records from before scopes have the bare backend name as their
scope. A backend whose scope changed form names its cluster's older scopes (its entry's
``aliases``: ``kubeflow:<context>/<namespace>``), and its supervisor serves those too.

Asking a scheduler which cluster it is can hang (a controller down, DNS, a partition): a
supervisor asks on a thread of its own (``ask_scope``) and waits at most ``RESOLVE_WAIT_S``
at start (a backend that asks no scheduler, local, as long as this machine takes to build
it); a backend that has not answered by then is served by its bare name and its answer
is taken when it comes (leases.py), so it never holds up the other backends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_all
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dispatch.backends import registry
from dispatch.backends.base import Backend
from dispatch.backends.local.scope import local_scope as local_scope
from dispatch.core.model import SchedulerUnreachable
from dispatch.errors import BackendError, BadInput, ClusterUnknown

if TYPE_CHECKING:
    from dispatch.stores.base import RecordStore

log = logging.getLogger("dispatch.supervise.leases")

# How long a supervisor's start waits for the schedulers to say their clusters.
RESOLVE_WAIT_S = 2.0
# A backend whose scope asks no scheduler (its entry's ``asks_scheduler``; local: a digest of
# its root on this machine) takes only this machine's time to answer (building the backend,
# on a loaded machine seconds), so it is waited for up to this long, never cut at
# RESOLVE_WAIT_S: a local scope left unresolved would leave its jobs unticked by
# ``supervise --once`` (issue 32 item 9).
NO_SCHEDULER_WAIT_S = 60.0
# A live job's scope is checked against this machine's cluster before it is served (never
# on a guess), so it is waited for as long as the backend's own answer takes (bounded by its
# read deadline, DISPATCH_READ_DEADLINE), up to this long: cut at RESOLVE_WAIT_S, a loaded
# machine's first TLS request left the scope out and `supervise --once` ticked none of its
# jobs (seen in CI's k8s lane).
LIVE_SCOPE_WAIT_S = 30.0
# One pass (`supervise --once --scope NAME`) has no later tick to take a late answer in, so
# it waits this long for a named backend's cluster: past RESOLVE_WAIT_S (under load the
# kube-system UID read took longer and the pass ticked none of the cluster's jobs, CI's k8s
# lane), never long enough for a hung controller to hold the pass (served by its bare name).
ONCE_SCOPE_WAIT_S = 10.0


def backends() -> tuple[str, ...]:
    """Every backend's name, from the registry (read each time: a test may register one)."""
    return registry.names()


def asks_no_scheduler() -> frozenset[str]:
    return frozenset(n for n, e in registry.REGISTRY.items() if not e.asks_scheduler)


class ScopeError(BadInput):
    """A --scope that names no backend, or a cluster this machine's tools do not reach."""


_scopes: dict[tuple[str, int], str] = {}
_aliases: dict[tuple[str, int], tuple[str, ...]] = {}


def scope_for(backend_name: str, backend: Backend) -> str:
    """The scope a job recorded now through ``backend`` belongs to (asked once per process;
    the registry entry's ``scope`` says how). SchedulerUnreachable when the scheduler cannot
    say which cluster it is."""
    key = (backend_name, id(backend))
    if key not in _scopes:
        entry = registry.REGISTRY.get(backend_name)
        if entry is None:
            raise ScopeError(f"unknown backend {backend_name!r} ({', '.join(backends())})")
        _scopes[key] = entry.scope(backend_name, backend)
    return _scopes[key]


def aliases_for(backend_name: str, backend: Backend) -> tuple[str, ...]:
    """The older scopes of ``backend``'s cluster (its entry's ``aliases``; asked once per
    process): none when it has none or they cannot be told (logged)."""
    entry = registry.REGISTRY.get(backend_name)
    if entry is None or entry.aliases is None:
        return ()
    key = (backend_name, id(backend))
    if key not in _aliases:
        try:
            _aliases[key] = entry.aliases(backend_name, backend)
        except (SchedulerUnreachable, BackendError) as err:
            log.warning("the older scopes of %s cannot be told: %s", backend_name, err)
            return ()
    return _aliases[key]


def scope_at_submit(backend_name: str, backend: Backend) -> str:
    """The scope to record a new job under: its scheduler's cluster, or, when the scheduler
    cannot say now (unreachable, no readable configuration), the bare backend name, which
    every supervisor serving that backend by default serves too. Recording the job is never
    refused for it: the supervisor submits once the scheduler answers. A scheduler that
    answers but cannot be told from another cluster (ClusterUnknown) is refused: a guess
    would let another cluster's supervisor serve the job."""
    try:
        return scope_for(backend_name, backend)
    except ClusterUnknown:
        raise
    except (SchedulerUnreachable, BackendError) as err:
        log.warning("recording the job under scope %s: %s", backend_name, err)
        return backend_name


def backend_of(scope: str) -> str:
    name = scope.partition(":")[0]
    if name not in registry.REGISTRY:
        raise ScopeError(f"scope {scope!r}: names no backend ({', '.join(backends())}, "
                         "optionally followed by :cluster)")
    return name


def ask_scope(backend_name: str, backend_for: Callable[[str], Backend]) -> Future[str]:
    """``scope_for`` on a thread of its own (building the backend included): the answer, or
    the error, when it comes. The thread ends with the scheduler's own tool timeout."""
    answer: Future[str] = Future()

    def ask() -> None:
        try:
            answer.set_result(scope_for(backend_name, backend_for(backend_name)))
        except BaseException as err:  # noqa: BLE001 - handed to whoever reads the answer
            answer.set_exception(err)

    threading.Thread(target=ask, name=f"dispatch-scope-{backend_name}", daemon=True).start()
    return answer


@dataclass(frozen=True)
class Unresolved:
    """A backend served under its bare name only, for now: its scheduler could not say
    which cluster it is. ``asking``: the question still open when this was noted (its
    answer is taken when it comes); supervision asks again every lease period otherwise."""

    backend: str
    why: str
    asking: Future[str] | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.backend}: {self.why}"


def unresolved_note(u: Unresolved) -> str:
    return (f"{u.backend} is served by its bare name until its scheduler says which cluster "
            f"it is (asked again every lease period): {u.why}")


def resolve_scopes(requested: Iterable[str], backend_for: Callable[[str], Backend], *,
                   wait_s: float | None = None, unchecked: bool = True
                   ) -> tuple[list[str], list[Unresolved]]:
    """The scopes to serve, and the backends whose own scope is not known yet.

    Nothing requested: every backend, each as this machine's scope of it plus its bare name
    (jobs recorded before scopes, or while the scheduler could not say its cluster). A bare
    backend name: the same for that backend. A backend that cannot be asked now, or has not
    answered within ``wait_s`` (all are asked at once), is served under its bare name and
    listed as Unresolved (a scheduler down while the supervisor starts must not leave its
    jobs unserved, nor hold up the others); a backend that asks no scheduler
    (``asks_no_scheduler()``) is waited for up to NO_SCHEDULER_WAIT_S instead. A full scope:
    itself, refused when this machine's tools reach another cluster (served as given when
    they cannot be asked now); one of its older scopes (``aliases_for``: jobs recorded before
    its scope changed form) is served as itself. ``unchecked=False`` (a live job's scope,
    not a person's --scope): a full scope that cannot be checked now is left out (asked
    again later), never served on a guess: it may be another cluster's."""
    if wait_s is None:  # a live job's scope is checked, never guessed: waited for longer
        wait_s = RESOLVE_WAIT_S if unchecked else LIVE_SCOPE_WAIT_S
    wanted = list(dict.fromkeys(requested))
    items = wanted or list(backends())
    names = [backend_of(item) for item in items]  # a scope naming no backend: refused first
    asks = {name: ask_scope(name, backend_for) for name in dict.fromkeys(names)}
    started = time.monotonic()
    local = asks_no_scheduler()
    wait_all([a for n, a in asks.items() if n in local],
             timeout=max(wait_s, NO_SCHEDULER_WAIT_S))
    wait_all(asks.values(), timeout=max(0.0, started + wait_s - time.monotonic()))
    out: list[str] = []
    unresolved: list[Unresolved] = []
    for item, name in zip(items, names, strict=True):
        ask = asks[name]
        try:
            if not ask.done():
                raise SchedulerUnreachable(name, f"did not say which cluster it is within "
                                                 f"{wait_s:g}s")
            mine = ask.result()
        except (SchedulerUnreachable, BackendError) as err:
            if item == name or not wanted:
                unresolved.append(Unresolved(name, str(err),
                                             None if ask.done() else ask))
                out.append(name)
                continue
            if not unchecked:
                log.info("not serving %s for now: this machine's %s cannot say which "
                         "cluster it is: %s", item, name, err)
                continue
            log.warning("cannot check scope %s against this machine's %s: %s", item, name,
                        err)
            mine = item
        if item not in (name, mine):
            older = aliases_for(name, backend_for(name))
            if item in older:
                out.append(item)
                continue
            also = f" (and, for older records, {', '.join(older)})" if older else ""
            raise ScopeError(f"--scope {item}: this machine's {name} backend is scope "
                             f"{mine}{also}")
        out.extend([mine] if item != name else [mine, name])
    return list(dict.fromkeys(out)), unresolved


def live_scopes(store: RecordStore) -> list[str]:
    """The scopes of the record's unfinished jobs, as the record names them."""
    return sorted({row.scope for row in store.list_jobs(live_only=True)})


def scopes_to_serve(requested: Sequence[str], store: RecordStore,
                    backend_for: Callable[[str], Backend]
                    ) -> tuple[list[str], list[Unresolved]]:
    """What a supervisor started without a choice of scopes serves (``supervise`` without
    --scope, ``serve``): the ``requested`` ones and every backend whose scope asks no
    scheduler (local; a requested scope this machine cannot serve is refused: ScopeError),
    then each live job's scope this machine can serve (one of another machine's cluster is
    left to its own supervisor). No other backend is asked which cluster it is: a machine
    where only local jobs run never probes Slurm or Kubernetes."""
    resolved, unresolved = resolve_scopes([*requested, *sorted(asks_no_scheduler())],
                                          backend_for)
    for scope in live_scopes(store):
        if scope in resolved:
            continue
        try:
            more, pending = resolve_scopes([scope], backend_for, unchecked=False)
        except ScopeError as err:
            log.info("not serving %s: %s", scope, err)
            continue
        resolved += [s for s in more if s not in resolved]
        unresolved += [u for u in pending if u not in unresolved]
    return resolved, unresolved
