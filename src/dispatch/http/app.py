"""The HTTP API and dashboard of ``dispatch serve``: a Starlette application over the
service, mirroring the Python API.

    GET  /api/jobs[?all=1][&state=S]       status JSON of each job (as ``dispatch ls --json``)
    GET  /api/jobs?limit=N[&after=C][&order=[-]COL][&state=S][&backend=B][&cause=K][&q=T]
                   [&since=ISO]
                                           one page: {"jobs", "next", "held_count"}, each
                                           job a list row (service/listing.py, rows.py)
    GET  /api/jobs/{job}                   status JSON (as ``dispatch status --json``)
    GET  /api/jobs/{job}/history           as ``dispatch history --json``
    GET  /api/jobs/{job}/timeline          the dashboard's timeline (http/timeline.py)
    GET  /api/goodput?days=N               the fleet's badput by cause per day (G4)
    GET  /api/jobs/{job}/logs[?follow=1][&submission=N]   text, streamed while following
    POST /api/jobs                         a spec as JSON -> 201 and the new job's status
    POST /api/jobs/{job}/cancel|resubmit|give-up          -> the job's status
    POST /api/jobs/{job}/supersede         -> 201 and the new job's status
    GET  /api/supervisors                  who is active for each scope (as ``dispatch
                                           supervisors --json``)
    GET  /metrics                          Prometheus text format
    GET  /healthz                          "ok", without a token (a probe's; says nothing else)
    GET  /                                 the dashboard (without a session: to /login)
    GET  /login[?token=T], POST /login     a token for a session cookie (http/login.py)

Who may ask is http/auth.py's and http/guard.py's; the connection limits http/protocol.py's.
The endpoints sit by route group: routes_jobs.py, routes_logs.py, routes_goodput.py,
routes_site.py (the dashboard, login, /metrics), over what endpoints.py shares.

The list and the job's reads answer with an ETag (http/etag.py) and 304 to a matching
If-None-Match: a refresh of unchanged data costs one cheap query and no body. The lists
(and /metrics) are gzipped when the client accepts it.

Errors are ``{"error": {"code", "exit_code", "message"}}`` (``views.error_json``) with the
HTTP status of the CLI's exit code: 2 -> 400, 3 -> 404, 4 -> 503, 5 -> 500 (a record store
that cannot be used is this server's fault, not the caller's, and not always transient),
6 -> 409. Endpoints are plain functions: Starlette runs them in its thread pool, each with
its own Service (its own store connection) for the request. A log stream's endpoint only
resolves the job there; the stream itself runs on the event loop (http/follow.py).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from dispatch.http.auth import Access, Tokens
from dispatch.http.endpoints import HTTP_BY_EXIT, Server, http_status
from dispatch.http.follow import LogStreams
from dispatch.http.guard import Guard
from dispatch.http.metrics import RecordCollector, ServeMetrics
from dispatch.http.routes_goodput import goodput_routes
from dispatch.http.routes_jobs import job_routes
from dispatch.http.routes_logs import log_routes
from dispatch.http.routes_site import site_routes
from dispatch.service.requests import whoami
from dispatch.stores.select import open_store
from dispatch.support.clock import utcnow


def build_app(server: Server) -> Starlette:
    routes: list[BaseRoute] = [*site_routes(server), *job_routes(server),
                               *goodput_routes(server), *log_routes(server)]
    return Starlette(routes=routes, middleware=[
        Middleware(Guard, access=server.access, loopback_bind=server.loopback_bind)])


def make_server(store_url: str | None, tokens: Tokens, *, loopback_bind: bool = True) -> Server:
    registry = CollectorRegistry(auto_describe=True)
    metrics = ServeMetrics(registry)
    local_user = whoami()
    server = Server(store_url=store_url, access=Access.new(tokens, local_user),
                    metrics=metrics, registry=registry, local_user=local_user,
                    loopback_bind=loopback_bind)
    server.streams = LogStreams(server.service, registry)
    record = RecordCollector(server.service)
    registry.register(record)
    # Both built in the background, the held index first (the cheaper, and the list's
    # counts and held jobs wait on it), then the /metrics totals: run at once they share one
    # interpreter lock and the index would take the time of both (issue 49). Meanwhile
    # neither the first list refresh nor the first scrape waits (issues 36 and 49).
    held = server.held_index.warm(lambda: open_store(store_url), utcnow)
    record.warm(after=held)
    return server


__all__ = ["HTTP_BY_EXIT", "Server", "build_app", "http_status", "make_server"]
