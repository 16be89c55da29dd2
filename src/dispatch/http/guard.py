"""The ASGI layer before every route: who is asking (http/auth.py), the browser checks, the
security headers on every answer, and a POST's body read (bounded) so the sync endpoints
need no event loop.

Without a credential every path answers 401 except the login page (``/login``), the
stylesheet it uses and the probe's ``/healthz`` (which says only "ok"); the dashboard at ``/``
redirects to ``/login`` instead.
"""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dispatch.core.spec import SpecError
from dispatch.errors import DispatchError
from dispatch.http.auth import Access, host_name, is_loopback
from dispatch.http.protocol import PEER_UID
from dispatch.http.refusals import REFUSALS
from dispatch.service.views import error_json

MAX_BODY_BYTES = 1 << 20
PUBLIC_PATHS = frozenset({"/login", "/static/dashboard.css", "/healthz"})
ACTOR = "dispatch.actor"
BODY = "dispatch.body"
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class Unauthorized(DispatchError):
    exit_code = 2
    error_code = "unauthorized"


class Forbidden(DispatchError):
    exit_code = 2
    error_code = "forbidden"


def cookie_value(request: Request, name: str) -> str | None:
    """The cookie ``name`` from the request's Cookie header (a malformed header is none)."""
    jar = SimpleCookie()
    try:
        jar.load(request.headers.get("cookie", ""))
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


def peer(request: Request) -> str:
    """Who is at the other end of a TCP connection, as ``host:port``."""
    client = request.client
    return "an unknown peer" if client is None else f"{client.host}:{client.port}"


class Guard:
    def __init__(self, app: ASGIApp, access: Access, loopback_bind: bool) -> None:
        self.app = app
        self.access = access
        self.loopback_bind = loopback_bind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message,
                           "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        request = Request(scope, receive)
        refused = self._refuse(request)
        if refused is not None:
            await refused(scope, receive, send_secured)
            return
        if request.method == "POST":
            body = bytearray()
            try:
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        await JSONResponse(error_json(SpecError("<request>", "",
                                                                "body too large")),
                                           status_code=413)(scope, receive, send_secured)
                        return
            except ClientDisconnect:
                REFUSALS.note("disconnect", "a client left before its request body was "
                              "complete")
                return
            scope[BODY] = bytes(body)
        await self.app(scope, receive, send_secured)

    def _refuse(self, request: Request) -> Response | None:
        if PEER_UID in request.scope:  # our own uid on the Unix socket (http/protocol.py)
            request.scope[ACTOR] = self.access.local_user
        else:
            host = host_name(request.headers.get("host") or "")
            if self.loopback_bind and not is_loopback(host):
                return JSONResponse(error_json(Forbidden(
                    f"host {host!r} is not a loopback name (this server listens on one)")),
                    status_code=403)
            actor = self.access.actor_of_bearer(request.headers.get("authorization"))
            if actor is None:
                actor = self.access.actor_of_session(
                    cookie_value(request, self.access.cookie_name))
            path = request.url.path
            if actor is None and path not in PUBLIC_PATHS:
                if path == "/" and request.method == "GET":
                    return RedirectResponse("/login", status_code=303)
                REFUSALS.note("unauthorized", "a request without a valid token or session "
                              f"from {peer(request)}")
                return JSONResponse(
                    error_json(Unauthorized("a token is required: log in at /login or "
                                            "send 'Authorization: Bearer TOKEN'")),
                    status_code=401, headers={"WWW-Authenticate": 'Bearer realm="dispatch"'})
            request.scope[ACTOR] = actor
        if request.method == "POST":
            if _cross_origin(request):
                return JSONResponse(error_json(Forbidden("cross-origin request refused")),
                                    status_code=403)
            ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
            wanted = ("application/x-www-form-urlencoded" if request.url.path == "/login"
                      else "application/json")
            if ctype != wanted:
                return JSONResponse(error_json(SpecError(
                    "<request>", "", f"this POST's body is {wanted} (Content-Type)")),
                    status_code=415)
        return None


def _cross_origin(request: Request) -> bool:
    """Whether a POST comes from another origin (CSRF), by the browser's own headers. Under
    ``Referrer-Policy: no-referrer`` a browser sends ``Origin: null`` even for the page's own
    POSTs; then ``Sec-Fetch-Site: same-origin`` must vouch for it."""
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    if origin == "null":
        return site != "same-origin"
    return origin is not None and origin.split("://", 1)[-1] != request.headers.get("host")
