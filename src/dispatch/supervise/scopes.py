"""Scopes: which scheduler a job belongs to, and which scopes a supervisor serves.

A **scope** is a backend plus, where it has one, its cluster: ``slurm:<ClusterName>``
(from ``scontrol show config``), ``kubeflow:<context>/<namespace>``, ``local:<host>:<root>``
(a digest of the local root's path: two roots on one host are two schedulers). A job's scope
is fixed when it is recorded (JobCreated.scope); records from before scopes have the bare
backend name as their scope.

Asking a scheduler which cluster it is can hang (a controller down, DNS, a partition): a
supervisor asks on a thread of its own (``ask_scope``) and waits at most ``RESOLVE_WAIT_S``
at start (a backend that asks no scheduler, local, as long as this machine takes to build
it); a backend that has not answered by then is served by its bare name and its answer
is taken when it comes (leases.py), so it never holds up the other backends.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_all
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dispatch.backends.base import Backend
from dispatch.core.model import SchedulerUnreachable
from dispatch.errors import BackendError, BadInput

if TYPE_CHECKING:
    from dispatch.stores.base import RecordStore

log = logging.getLogger("dispatch.supervise.leases")

BACKENDS = ("local", "slurm", "kubeflow")
# How long a supervisor's start waits for the schedulers to say their clusters.
RESOLVE_WAIT_S = 2.0
# The backends whose scope asks no scheduler (local: a digest of its root on this machine).
# Their answer takes only this machine's time (building the backend, on a loaded machine
# seconds), so it is waited for up to this long, never cut at RESOLVE_WAIT_S: a local scope
# left unresolved would leave its jobs unticked by ``supervise --once`` (issue 32 item 9).
ASKS_NO_SCHEDULER = frozenset({"local"})
NO_SCHEDULER_WAIT_S = 60.0


class ScopeError(BadInput):
    """A --scope that names no backend, or a cluster this machine's tools do not reach."""


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
    from dispatch.support.paths import K8S_CONTEXT, KUBECONFIG, env_path

    # the configuration the backend uses (registry.py): the same file and context
    kubeconfig = env_path(KUBECONFIG)
    cfg = load_config(str(kubeconfig) if kubeconfig else None,
                      os.environ.get(K8S_CONTEXT) or None)
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
                   wait_s: float = RESOLVE_WAIT_S) -> tuple[list[str], list[Unresolved]]:
    """The scopes to serve, and the backends whose own scope is not known yet.

    Nothing requested: every backend, each as this machine's scope of it plus its bare name
    (jobs recorded before scopes, or while the scheduler could not say its cluster). A bare
    backend name: the same for that backend. A backend that cannot be asked now, or has not
    answered within ``wait_s`` (all are asked at once), is served under its bare name and
    listed as Unresolved (a scheduler down while the supervisor starts must not leave its
    jobs unserved, nor hold up the others); a backend that asks no scheduler
    (ASKS_NO_SCHEDULER) is waited for up to NO_SCHEDULER_WAIT_S instead. A full scope:
    itself, refused when this machine's tools reach another cluster (served as given when
    they cannot be asked now)."""
    wanted = list(dict.fromkeys(requested))
    items = wanted or list(BACKENDS)
    names = [backend_of(item) for item in items]  # a scope naming no backend: refused first
    asks = {name: ask_scope(name, backend_for) for name in dict.fromkeys(names)}
    started = time.monotonic()
    wait_all([a for n, a in asks.items() if n in ASKS_NO_SCHEDULER],
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
            log.warning("cannot check scope %s against this machine's %s: %s", item, name,
                        err)
            mine = item
        if item not in (name, mine):
            raise ScopeError(f"--scope {item}: this machine's {name} backend is scope {mine}")
        out.extend([mine] if item != name else [mine, name])
    return list(dict.fromkeys(out)), unresolved


def live_scopes(store: RecordStore) -> list[str]:
    """The scopes of the record's unfinished jobs, as the record names them."""
    return sorted({row.scope for row in store.list_jobs(live_only=True)})


def scopes_to_serve(requested: Sequence[str], store: RecordStore,
                    backend_for: Callable[[str], Backend]
                    ) -> tuple[list[str], list[Unresolved]]:
    """What a supervisor started without a choice of scopes serves (``supervise`` without
    --scope, ``serve``): the ``requested`` ones and the local backend (a requested scope this
    machine cannot serve is refused: ScopeError), then each live job's scope this machine can
    serve (one of another machine's cluster is left to its own supervisor). No other
    backend is asked which cluster it is: a machine where only local jobs run never probes
    Slurm or Kubernetes."""
    resolved, unresolved = resolve_scopes([*requested, "local"], backend_for)
    for scope in live_scopes(store):
        if scope in resolved:
            continue
        try:
            more, pending = resolve_scopes([scope], backend_for)
        except ScopeError as err:
            log.info("not serving %s: %s", scope, err)
            continue
        resolved += [s for s in more if s not in resolved]
        unresolved += [u for u in pending if u not in unresolved]
    return resolved, unresolved
