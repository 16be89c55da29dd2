"""What every endpoint of ``dispatch serve`` shares: the ``Server`` (store URL, access,
metrics), typed errors as their HTTP status and JSON shape, and the request helpers. The
route groups (routes_*.py) build their endpoints over these; app.py puts them together."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from dispatch.backends.registry import Backends, make_backend
from dispatch.errors import DispatchError
from dispatch.http.auth import Access
from dispatch.http.follow import LogStreams
from dispatch.http.guard import ACTOR
from dispatch.http.metrics import ServeMetrics
from dispatch.service import Service
from dispatch.service.held import HeldIndex
from dispatch.service.views import error_json
from dispatch.stores.select import open_store

log = logging.getLogger("dispatch.http")

HTTP_BY_EXIT = {2: 400, 3: 404, 4: 503, 5: 500, 6: 409}


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
    # Set when a job is recorded through this server: the supervision loop looks for the
    # scopes of live jobs at once rather than at the end of its lease period (a job of a
    # backend not served yet is watched from its first moments, while its pods still show
    # how it is going: a crash-looping pod's exit code is gone once its Job gives up).
    recorded: threading.Event = field(default_factory=threading.Event)

    def service(self, actor: str | None = None) -> Service:
        backends = Backends(self.metrics.scheduler.wrap(make_backend))
        return Service(open_store(self.store_url), backends, actor=actor or self.local_user,
                       held_index=self.held_index)


def error_of(err: Exception) -> Response:
    if isinstance(err, DispatchError):
        return error_response(err)
    return error_response(_Internal(f"internal error: {type(err).__name__}"))


def actor_of(request: Request) -> str | None:
    return request.scope.get(ACTOR)


def handle(fn: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """Typed errors become their HTTP status and the JSON error shape; anything else a 500
    (logged with its traceback here, one line to the caller)."""
    def endpoint(request: Request) -> Response:
        try:
            return fn(request)
        except Exception as err:
            if not isinstance(err, DispatchError):  # a bug: the log has the traceback
                log.exception("%s %s failed", request.method, request.url.path)
            return error_of(err)
    endpoint.__name__ = fn.__name__
    return endpoint


def flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("1", "true", "yes")
