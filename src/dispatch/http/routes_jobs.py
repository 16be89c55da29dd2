"""The jobs API: list (whole or by page), one job's status, history and timeline (each with
its ETag, http/etag.py), create, a person's requests (cancel, resubmit, give-up), supersede,
and who supervises each scope."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dispatch.backends.registry import names as backend_names
from dispatch.backends.registry import traits as backend_traits
from dispatch.core.spec import SpecError, parse_spec
from dispatch.errors import DispatchError
from dispatch.http.endpoints import Server, actor_of, flag, handle, http_status
from dispatch.http.etag import compressed, job_etag, list_etag, not_modified, tagged
from dispatch.http.guard import BODY
from dispatch.http.timeline import timeline_json
from dispatch.service import Service
from dispatch.service.listing import PAGE_PARAMETERS, list_page, parse_list_request
from dispatch.service.running import running_json, running_of
from dispatch.service.views import history_json, status_json
from dispatch.supervise.leases import supervisors_rows
from dispatch.supervise.presence import job_notes
from dispatch.support.clock import utcnow

MAX_JSON_DEPTH = 64  # a spec nests a few levels; a deeper body is an attack or a bug


def job_routes(server: Server) -> list[Route]:
    @handle
    def list_jobs(request: Request) -> Response:
        params = dict(request.query_params)
        if PAGE_PARAMETERS & params.keys():
            return list_jobs_page(request, params)
        state = request.query_params.get("state")
        with server.service() as service:
            views = service.jobs(include_finished=flag(request, "all"),
                                 name=request.query_params.get("name") or None)
        rows = [status_json(v) for v in views]
        if state:
            rows = [r for r in rows if r.get("state") == state]
        return compressed(request, JSONResponse(rows))

    def list_jobs_page(request: Request, params: dict[str, str]) -> Response:
        req = parse_list_request(params, backend_names())
        with server.service() as service:
            etag = list_etag(service.store.stamp(), request.url.query)
            if not_modified(request, etag):
                return tagged(Response(status_code=304), etag)
            return tagged(compressed(request, JSONResponse(list_page(service, req))), etag)

    def _job_read(request: Request, body: Callable[[Service, str], Response]) -> Response:
        """A read of one job, with its ETag (the job's version): 304 when unchanged."""
        with server.service() as service:
            job_id = service.resolve(request.path_params["job"])
            etag = job_etag(job_id, service.store.version(job_id), request.url.path)
            if not_modified(request, etag):
                return tagged(Response(status_code=304), etag)
            return tagged(body(service, job_id), etag)

    @handle
    def get_job(request: Request) -> Response:
        def body(service: Service, job_id: str) -> Response:
            view = service.view(job_id)
            doc = status_json(view)
            if view.status is not None and view.error is None:  # as `dispatch status --json`
                doc["running"] = running_json(running_of(service.store, job_id, utcnow()))
                doc["notes"] = job_notes(service.store, view.status)
            try:
                view.checked()
            except DispatchError as err:  # the status, with the CLI's exit code's status
                return JSONResponse(doc, status_code=http_status(err))
            return JSONResponse(doc)
        return _job_read(request, body)

    @handle
    def job_history(request: Request) -> Response:
        return _job_read(request, lambda service, job_id: JSONResponse(
            history_json(service.history(job_id))))

    @handle
    def job_timeline(request: Request) -> Response:
        return _job_read(request, lambda service, job_id: JSONResponse(
            {"job": job_id, **timeline_json(service.store.read(job_id), service.clock())}))

    @handle
    def create_job(request: Request) -> Response:
        spec = parse_spec(_json_body(request), "<request>", backends=backend_traits())
        if spec.env_from_host:  # the server's environment is not the client's
            raise SpecError("<request>", "env_from_host", "takes values from the submitting "
                            "process's environment, which a request does not carry: submit "
                            "with the CLI or the Python API")
        with server.service(actor_of(request)) as service:
            job_id = service.submit(spec)
            server.recorded.set()
            return JSONResponse(status_json(service.view(job_id)), status_code=201)

    def _person(what: str) -> Callable[[Request], Response]:
        @handle
        def act(request: Request) -> Response:
            with server.service(actor_of(request)) as service:
                view = getattr(service, what)(request.path_params["job"])
            return JSONResponse(status_json(view))
        act.__name__ = what
        return act

    @handle
    def supersede(request: Request) -> Response:
        with server.service(actor_of(request)) as service:
            new_id = service.supersede(request.path_params["job"])
            return JSONResponse(status_json(service.view(new_id)), status_code=201)

    @handle
    def supervisors(request: Request) -> Response:
        with server.service() as service:
            return JSONResponse(supervisors_rows(service.store))

    return [
        Route("/api/supervisors", supervisors, methods=["GET"]),
        Route("/api/jobs", list_jobs, methods=["GET"]),
        Route("/api/jobs", create_job, methods=["POST"]),
        Route("/api/jobs/{job}", get_job, methods=["GET"]),
        Route("/api/jobs/{job}/history", job_history, methods=["GET"]),
        Route("/api/jobs/{job}/timeline", job_timeline, methods=["GET"]),
        Route("/api/jobs/{job}/cancel", _person("cancel"), methods=["POST"]),
        Route("/api/jobs/{job}/resubmit", _person("resubmit"), methods=["POST"]),
        Route("/api/jobs/{job}/give-up", _person("give_up"), methods=["POST"]),
        Route("/api/jobs/{job}/supersede", supersede, methods=["POST"]),
    ]


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
