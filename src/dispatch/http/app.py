"""The HTTP API and dashboard of ``dispatch serve``: a Starlette application over the
service, mirroring the Python API.

    GET  /api/jobs[?all=1][&state=S]       status JSON of each job (as ``dispatch ls --json``)
    GET  /api/jobs?limit=N[&after=C][&order=[-]COL][&state=S][&backend=B][&cause=K][&q=T]
                                           one page: {"jobs", "next", "held", "held_count"}
                                           (service/listing.py)
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
    GET  /                                 the dashboard (without a session: to /login)
    GET  /login[?token=T], POST /login     a token for a session cookie (http/login.py)

Who may ask is http/auth.py's and http/guard.py's; the connection limits http/protocol.py's.

The list and the job's reads answer with an ETag (http/etag.py) and 304 to a matching
If-None-Match: a refresh of unchanged data costs one cheap query and no body.

Errors are ``{"error": {"code", "exit_code", "message"}}`` (``views.error_json``) with the
HTTP status of the CLI's exit code: 2 -> 400, 3 -> 404, 4 -> 503, 5 -> 500 (a record store
that cannot be used is this server's fault, not the caller's, and not always transient),
6 -> 409. Endpoints are plain functions: Starlette runs them in its thread pool, each with
its own Service (its own store connection) for the request. A log stream's endpoint only
resolves the job there; the stream itself runs on the event loop (http/follow.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from dispatch.backends.registry import Backends, make_backend
from dispatch.backends.registry import names as backend_names
from dispatch.core.spec import SpecError, parse_spec
from dispatch.errors import BadInput, DispatchError
from dispatch.http.auth import Access, Tokens
from dispatch.http.etag import job_etag, list_etag, not_modified, tagged
from dispatch.http.follow import LogStreamResponse, LogStreams
from dispatch.http.goodput_metrics import GoodputCollector
from dispatch.http.guard import ACTOR, BODY, Guard
from dispatch.http.login import login_routes
from dispatch.http.metrics import RecordCollector, ServeMetrics
from dispatch.http.timeline import timeline_json
from dispatch.service import Service
from dispatch.service.held import HeldIndex
from dispatch.service.listing import PAGE_PARAMETERS, list_page, parse_list_request
from dispatch.service.logs import Follow
from dispatch.service.requests import whoami
from dispatch.service.views import error_json, history_json, status_json
from dispatch.stores.select import open_store
from dispatch.supervise.leases import supervisors_rows

log = logging.getLogger("dispatch.http")

HTTP_BY_EXIT = {2: 400, 3: 404, 4: 503, 5: 500, 6: 409}
MAX_JSON_DEPTH = 64  # a spec nests a few levels; a deeper body is an attack or a bug


class _Internal(DispatchError):
    exit_code = 1
    error_code = "internal"


def http_status(err: DispatchError) -> int:
    return HTTP_BY_EXIT.get(err.exit_code, 500)


def error_response(err: DispatchError, message: str | None = None) -> JSONResponse:
    return JSONResponse(error_json(err, message), status_code=http_status(err))


@dataclass
class Server:
    """What every request shares: the store URL, who may ask (http/auth.py), the process
    metrics."""

    store_url: str | None
    access: Access
    metrics: ServeMetrics
    registry: CollectorRegistry
    local_user: str
    loopback_bind: bool = True
    # The live jobs kept folded between list refreshes, to pin the held ones (issue 27).
    held_index: HeldIndex = field(default_factory=HeldIndex)
    # The open log streams (http/follow.py); make_server makes it.
    streams: LogStreams = field(init=False)

    def service(self, actor: str | None = None) -> Service:
        backends = Backends(self.metrics.scheduler.wrap(make_backend))
        return Service(open_store(self.store_url), backends, actor=actor or self.local_user,
                       held_index=self.held_index)


def _error_of(err: Exception) -> Response:
    if isinstance(err, DispatchError):
        return error_response(err)
    return error_response(_Internal(f"internal error: {type(err).__name__}"))


def _actor(request: Request) -> str | None:
    return request.scope.get(ACTOR)


def _handle(fn: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """Typed errors become their HTTP status and the JSON error shape; anything else a 500
    (logged with its traceback here, one line to the caller)."""
    def endpoint(request: Request) -> Response:
        try:
            return fn(request)
        except Exception as err:
            if not isinstance(err, DispatchError):  # a bug: the log has the traceback
                log.exception("%s %s failed", request.method, request.url.path)
            return _error_of(err)
    endpoint.__name__ = fn.__name__
    return endpoint


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("1", "true", "yes")


def build_app(server: Server) -> Starlette:  # noqa: C901 - one small function per route
    @_handle
    def list_jobs(request: Request) -> Response:
        params = dict(request.query_params)
        if PAGE_PARAMETERS & params.keys():
            return list_jobs_page(request, params)
        state = request.query_params.get("state")
        with server.service() as service:
            views = service.jobs(include_finished=_flag(request, "all"),
                                 name=request.query_params.get("name"))
        rows = [status_json(v) for v in views]
        if state:
            rows = [r for r in rows if r.get("state") == state]
        return JSONResponse(rows)

    def list_jobs_page(request: Request, params: dict[str, str]) -> Response:
        req = parse_list_request(params, backend_names())
        with server.service() as service:
            etag = list_etag(service.store.stamp(), request.url.query)
            if not_modified(request, etag):
                return tagged(Response(status_code=304), etag)
            return tagged(JSONResponse(list_page(service, req)), etag)

    def _job_read(request: Request, body: Callable[[Service, str], Response]) -> Response:
        """A read of one job, with its ETag (the job's version): 304 when unchanged."""
        with server.service() as service:
            job_id = service.resolve(request.path_params["job"])
            etag = job_etag(job_id, service.store.version(job_id), request.url.path)
            if not_modified(request, etag):
                return tagged(Response(status_code=304), etag)
            return tagged(body(service, job_id), etag)

    @_handle
    def get_job(request: Request) -> Response:
        def body(service: Service, job_id: str) -> Response:
            view = service.view(job_id)
            try:
                view.checked()
            except DispatchError as err:  # the status, with the CLI's exit code's status
                return JSONResponse(status_json(view), status_code=http_status(err))
            return JSONResponse(status_json(view))
        return _job_read(request, body)

    @_handle
    def job_history(request: Request) -> Response:
        return _job_read(request, lambda service, job_id: JSONResponse(
            history_json(service.history(job_id))))

    @_handle
    def job_timeline(request: Request) -> Response:
        return _job_read(request, lambda service, job_id: JSONResponse(
            {"job": job_id, **timeline_json(service.store.read(job_id), service.clock())}))

    @_handle
    def fleet_goodput(request: Request) -> Response:
        """Badput by cause per day over the last ``days`` (1..90, default 14): the fleet
        chart; and the whole span's split."""
        from dispatch.core.goodput import fleet
        from dispatch.service.goodput import badput_by_day, fleet_times, split_json

        raw = request.query_params.get("days", "14")
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 90:
            raise BadInput(f"days: {raw!r} must be a whole number from 1 to 90")
        days = int(raw)
        with server.service() as service:
            now = service.clock()
            found, errors = fleet_times(service.store, now)
        whole = fleet(found, None, since=now - timedelta(days=days), until=now).get("")
        return JSONResponse({"days": badput_by_day(found, now, days),
                             "split": split_json(whole) if whole is not None else None,
                             "unreadable": sorted(errors)})

    @_handle
    def job_logs(request: Request) -> Response:
        """The job's output as text, streamed in pieces (never held whole: a log of any size
        takes a few MiB here); ``tail=N``: the last N lines of each stream only."""
        def _count(name: str) -> int | None:
            raw = request.query_params.get(name)
            if raw is None:
                return None
            if not raw.isascii() or not raw.isdigit():
                raise SpecError(name, "", f"not a whole number: {raw!r}")
            return int(raw)

        follow = _flag(request, "follow")
        submission = _count("submission")
        tail = _count("tail")
        with server.service() as service:
            job_id = service.resolve(request.path_params["job"])
        # Read look by look on the event loop (http/follow.py): a stream waiting for its
        # job's next line holds no thread and no store connection.
        return LogStreamResponse(server.streams, Follow(job_id, submission=submission,
                                                        follow=follow, tail=tail),
                                 on_error=_error_of)

    @_handle
    def create_job(request: Request) -> Response:
        spec = parse_spec(_json_body(request), "<request>")
        if spec.env_from_host:  # the server's environment is not the client's
            raise SpecError("<request>", "env_from_host", "takes values from the submitting "
                            "process's environment, which a request does not carry: submit "
                            "with the CLI or the Python API")
        with server.service(_actor(request)) as service:
            job_id = service.submit(spec)
            return JSONResponse(status_json(service.view(job_id)), status_code=201)

    def _person(what: str) -> Callable[[Request], Response]:
        @_handle
        def act(request: Request) -> Response:
            with server.service(_actor(request)) as service:
                view = getattr(service, what)(request.path_params["job"])
            return JSONResponse(status_json(view))
        act.__name__ = what
        return act

    @_handle
    def supersede(request: Request) -> Response:
        with server.service(_actor(request)) as service:
            new_id = service.supersede(request.path_params["job"])
            return JSONResponse(status_json(service.view(new_id)), status_code=201)

    @_handle
    def supervisors(request: Request) -> Response:
        with server.service() as service:
            return JSONResponse(supervisors_rows(service.store))

    def metrics(request: Request) -> Response:
        return Response(generate_latest(server.registry), media_type=CONTENT_TYPE_LATEST)

    def dashboard(request: Request) -> Response:
        html = resources.files("dispatch.http").joinpath("static/index.html").read_text()
        return Response(html, media_type="text/html; charset=utf-8",
                        headers={"Cache-Control": "no-store"})

    login_page, login_form = login_routes(server.access)
    static = StaticFiles(directory=str(resources.files("dispatch.http").joinpath("static")))
    routes = [
        Route("/", dashboard),
        Route("/jobs/{job}", dashboard),  # the job's page: the same page, which reads the URL
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login_form, methods=["POST"]),
        Mount("/static", static, name="static"),
        Route("/metrics", metrics),
        Route("/api/supervisors", supervisors, methods=["GET"]),
        Route("/api/jobs", list_jobs, methods=["GET"]),
        Route("/api/jobs", create_job, methods=["POST"]),
        Route("/api/jobs/{job}", get_job, methods=["GET"]),
        Route("/api/jobs/{job}/history", job_history, methods=["GET"]),
        Route("/api/jobs/{job}/timeline", job_timeline, methods=["GET"]),
        Route("/api/goodput", fleet_goodput, methods=["GET"]),
        Route("/api/jobs/{job}/logs", job_logs, methods=["GET"]),
        Route("/api/jobs/{job}/cancel", _person("cancel"), methods=["POST"]),
        Route("/api/jobs/{job}/resubmit", _person("resubmit"), methods=["POST"]),
        Route("/api/jobs/{job}/give-up", _person("give_up"), methods=["POST"]),
        Route("/api/jobs/{job}/supersede", supersede, methods=["POST"]),
    ]
    return Starlette(routes=routes, middleware=[
        Middleware(Guard, access=server.access, loopback_bind=server.loopback_bind)])


def _json_body(request: Request) -> Any:
    body = request.scope.get(BODY, b"")
    try:
        data = json.loads(body or b"null", object_pairs_hook=_unique_keys)
    except RecursionError:
        data = None
        deep = True
    except _DuplicateKey as err:
        raise SpecError("<request>", "", str(err)) from None
    except ValueError as err:
        raise SpecError("<request>", "", f"the body is not JSON: {err}") from None
    else:
        deep = _depth_over(data, MAX_JSON_DEPTH)
    if deep:
        raise SpecError("<request>", "", f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    return data


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose key appears twice is refused, as in a YAML spec."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


def _depth_over(data: Any, limit: int) -> bool:
    """Whether ``data`` nests lists/objects more than ``limit`` deep (without recursion)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict)
                                                  else node))
    return False


def make_server(store_url: str | None, tokens: Tokens, *, loopback_bind: bool = True) -> Server:
    registry = CollectorRegistry(auto_describe=True)
    metrics = ServeMetrics(registry)
    local_user = whoami()
    server = Server(store_url=store_url, access=Access.new(tokens, local_user),
                    metrics=metrics, registry=registry, local_user=local_user,
                    loopback_bind=loopback_bind)
    server.streams = LogStreams(server.service, registry)
    registry.register(RecordCollector(server.service))
    registry.register(GoodputCollector(server.service))
    return server


__all__ = ["HTTP_BY_EXIT", "Server", "build_app", "make_server"]
