"""One process: the supervision loop in a thread, the HTTP server (uvicorn) in the main one.

The loop is ``dispatch supervise``'s (dispatch.supervise.leases), over this machine's local
backend, the scopes of the record's live jobs (looked at again every lease period, so a job
submitted for another scope is served too) and the scopes asked for with --scope; a backend
no live job uses is not probed. Each scope is ticked only while this process holds its
lease, so a ``serve`` beside other ``serve`` or ``supervise`` processes on one store is a hot
standby for the scopes another holds. Each pass is timed for ``/metrics``. SIGINT and
SIGTERM stop the loop after its current tick, hand its leases back at once and exit 0.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import uvicorn

from dispatch.errors import BadInput
from dispatch.http.app import Server, build_app, make_server
from dispatch.http.auth import Tokens, is_loopback, load_tokens
from dispatch.http.follow import LogStreams
from dispatch.http.listeners import listen
from dispatch.http.protocol import MAX_CONNECTIONS, GuardedH11Protocol, QuietUvicornWarnings
from dispatch.http.refusals import REFUSALS
from dispatch.stores.fence import Lease
from dispatch.supervise.escalations import Notifier
from dispatch.supervise.leases import (
    DEFAULT_LEASE_S,
    ScopeError,
    Supervision,
    Unresolved,
    live_scopes,
    resolve_scopes,
    scopes_to_serve,
    unresolved_note,
)
from dispatch.supervise.loop import Supervisor, TickReport

log = logging.getLogger("dispatch.http")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642




def combined(reports: dict[str, TickReport]) -> TickReport:
    """One pass over several scopes as one tick for the metrics."""
    return TickReport(
        jobs=sum(r.jobs for r in reports.values()),
        decisions=sum(r.decisions for r in reports.values()),
        appended=sum(r.appended for r in reports.values()),
        conflicts=sum(r.conflicts for r in reports.values()),
        unreachable=[u for r in reports.values() for u in r.unreachable],
        errors=[e for r in reports.values() for e in r.errors],
        skipped=sum(r.skipped for r in reports.values()))


class SupervisorLoop:
    """``Supervision.run`` over ``scopes`` in a thread; each pass in which this process held
    a scope is timed into the server's metrics (a standby's idle passes are not ticks)."""

    def __init__(self, server: Server, scopes: Sequence[str], *, poll: float,
                 lease_s: float = DEFAULT_LEASE_S, notifier: Notifier | None = None,
                 on_tick: Callable[[TickReport], None] | None = None,
                 unresolved: Sequence[Unresolved] = ()) -> None:
        self.server = server
        self.scopes = list(scopes)
        self.unresolved = list(unresolved)
        self.poll = poll
        self.lease_s = lease_s
        self.notifier = notifier or Notifier()
        self.on_tick = on_tick
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="dispatch-supervisor",
                                       daemon=True)
        self.sup: Supervision | None = None

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        self.server.recorded.set()  # the scopes' watcher wakes and ends
        if self.sup is not None:
            self.sup.stop()
        self.thread.join(timeout)

    def _observe(self, reports: dict[str, TickReport], seconds: float) -> None:
        if not reports:
            return
        report = combined(reports)
        self.server.metrics.observe(report, seconds)
        if self.on_tick is not None:
            self.on_tick(report)

    def _watch_scopes_until_stopped(self) -> None:
        """Every lease period, and at once when a job is recorded through this server, on a
        thread of its own: asking a scheduler for its cluster can take seconds (a stopped
        slurmctld), and no backend's tick may wait for it."""
        recorded = self.server.recorded
        while not self.stopping.is_set():
            recorded.wait(self.lease_s)
            recorded.clear()
            if self.stopping.is_set():
                return
            self._watch_scopes()

    def _watch_scopes(self) -> None:
        """Serve the scopes of live jobs recorded since (a job submitted through this
        server or the CLI for a backend not served yet)."""
        sup = self.sup
        if sup is None:
            return
        try:
            with self.server.service() as service:
                live = live_scopes(service.store)
                for scope in live:
                    if scope in sup.supervisors:
                        continue
                    try:
                        resolved, _ = resolve_scopes([scope], service.backends,
                                                     unchecked=False)
                    except ScopeError as err:  # another machine's cluster: not ours
                        log.info("not serving %s: %s", scope, err)
                        continue
                    for s in resolved:
                        if s not in sup.supervisors:
                            sup._add(s)  # noqa: SLF001 - under its scopes lock; picked up next pass
                            log.info("serving %s too (a live job of it)", s)
        except Exception:  # the next look tries again; serving what is served goes on
            log.exception("cannot look for new scopes")

    def _run(self) -> None:
        try:
            with self.server.service() as service:
                # Its supervisors' live jobs are the held index's, folded once (issue 49).
                make = partial(Supervisor, shared_folds=self.server.held_index.shared)
                self.sup = sup = Supervision(service.store, service.backends, self.scopes,
                                             lease_s=self.lease_s, poll=self.poll,
                                             notifier=self.notifier,
                                             unresolved=self.unresolved,
                                             make_supervisor=make)
                sup.on_change = say_role
                if self.stopping.is_set():
                    sup.stop()
                threading.Thread(target=self._watch_scopes_until_stopped, daemon=True,
                                 name="dispatch-serve-scopes").start()
                sup.run(on_tick=self._observe)
        except Exception:  # the API keeps serving; the log says why nothing is supervised
            log.exception("the supervision loop stopped")
        finally:
            self.notifier.close()


def say_role(scope: str, role: str, lease: Lease | None) -> None:
    """A scope's role on stderr as it changes (``active for: local:h (epoch 3)``,
    ``standby for: local:h (active: h:42; this takes over if it stops)``): serve's log is
    quiet below warnings."""
    print(role, file=sys.stderr, flush=True)


def check_bind(host: str, token_file: str | None) -> Tokens:
    """The team tokens, if any (the per-start token is always accepted): a non-loopback
    address needs a token file."""
    if token_file is None:
        if not is_loopback(host):
            raise BadInput(f"binding {host} (not a loopback address) needs --token-file "
                           "(lines name:token)")
        return Tokens({})
    return load_tokens(token_file)


def raise_open_files_limit(wanted: int = MAX_CONNECTIONS + 1024) -> None:
    """Room for the connection cap and the record's and backends' files: a process out of
    descriptors cannot accept, and asyncio logs that with a traceback each time."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY:
        GuardedH11Protocol.max_connections = min(MAX_CONNECTIONS, max(16, soft - 128))


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def serve(store_url: str | None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
          token_file: str | None = None, poll: float = 2.0,
          notifier: Notifier | None = None, supervise: bool = True,
          scopes: Sequence[str] = (), lease_s: float = DEFAULT_LEASE_S) -> None:
    tokens = check_bind(host, token_file)
    if not lease_s > 0 or not poll > 0:
        raise BadInput("--lease and --poll must be positive")
    raise_open_files_limit()
    server = make_server(store_url, tokens, loopback_bind=is_loopback(host))
    # A store that cannot be used (exit 5) or a --scope this machine cannot serve (exit 2)
    # stops us here, before anything listens.
    with server.service() as service:
        resolved, unresolved = (
            scopes_to_serve(scopes, service.store, service.backends) if supervise
            else ([], []))
    for u in unresolved:
        print(f"note: {unresolved_note(u)}", file=sys.stderr)
    if supervise:
        # Not "supervising": per scope it is the active supervisor, or a hot standby while
        # another is (each scope's role is said below as it is taken or changes).
        print(f"serving scopes: {', '.join(resolved)} (lease {lease_s:g}s; each scope's "
              "role follows)", file=sys.stderr)
    loop = SupervisorLoop(server, resolved, poll=poll, lease_s=lease_s, notifier=notifier,
                          unresolved=unresolved)
    listeners = listen(host, port, server.access.start_token)
    # cookies do not keep ports apart: each server's session cookie has its own name
    server.access.cookie_name = f"dispatch_session_{listeners.port}"
    base = f"http://{url_host(host)}:{listeners.port}"
    if token_file is None:
        print(f"dispatch serve: {base}/login?token={server.access.start_token}\n"
              f"  (the token is also in {listeners.token_path}; this user's programs may use "
              f"the socket {listeners.socket_path}) (Ctrl-C stops)", file=sys.stderr,
              flush=True)
    else:
        # Team tokens: the start token stays out of the output, which may be a log others
        # read (a pod's, a service's journal); it is in the 0600 file for this user.
        print(f"dispatch serve: {base}/ (log in with a token of {token_file}; the start "
              f"token is in {listeners.token_path}; this user's programs may use the socket "
              f"{listeners.socket_path}) (Ctrl-C stops)", file=sys.stderr, flush=True)
    config = uvicorn.Config(build_app(server), log_level="warning", access_log=False,
                            lifespan="off", http=GuardedH11Protocol, timeout_keep_alive=5,
                            timeout_graceful_shutdown=GRACE_S)
    logging.getLogger("uvicorn.error").addFilter(QuietUvicornWarnings())
    # uvicorn re-raises the signal that stopped it once it is done: ours turn SIGINT and
    # SIGTERM into an exception, so the loop hands its leases back at once, the socket and
    # token file go, and the process exits 0 (a stop asked for is not a failure)
    in_main = threading.current_thread() is threading.main_thread()  # where signals go
    previous = ({sig: signal.signal(sig, _raise_stopped) for sig in STOP_SIGNALS}
                if in_main else {})
    try:
        if supervise:
            loop.start()
        _Uvicorn(config, server.streams).run(sockets=[listeners.tcp, listeners.unix])
    except _Stopped:
        pass
    finally:
        try:
            if supervise:
                loop.stop()
            listeners.close()
            server.streams.close()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def quiet_resource_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's errors, but one out of descriptors (or memory) as a rate-limited line
    with a count: at its open-files limit asyncio (3.11) tries ``backlog`` accepts at each
    wake-up, says each failure with a traceback and schedules a retry of the listener for
    each, so thousands a minute; those retries left over when the listener has closed (a
    stop) fail again, and say nothing either."""
    err = context.get("exception")
    callback = getattr(context.get("handle"), "_callback", None)
    if getattr(callback, "__name__", "") == "_start_serving" and isinstance(
            err, ValueError | OSError):
        return  # a retry of a listener closed meanwhile: nothing is lost
    if isinstance(err, OSError) and err.errno in OUT_OF_RESOURCES:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        REFUSALS.note("out-of-resources", f"cannot accept a connection: {err.strerror} "
                      f"(this process may open {soft} files: ulimit -n)")
        return
    loop.default_exception_handler(context)
# How long a stop waits for answers still being sent (log streams end at once; a bigger
# answer to a slow client is cut after this) before it goes on to hand the leases back.
GRACE_S = 2


class _Uvicorn(uvicorn.Server):
    """uvicorn, ending every log stream as its shutdown begins: it waits for open answers
    to finish, and a followed job's may not finish for days."""

    def __init__(self, config: uvicorn.Config, streams: LogStreams) -> None:
        super().__init__(config)
        self.streams = streams

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(quiet_resource_errors)
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.streams.stop()
        await super().shutdown(sockets)


class _Stopped(BaseException):
    """SIGINT or SIGTERM arrived: stop serving (not an error)."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped
