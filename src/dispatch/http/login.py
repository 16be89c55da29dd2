"""The login page: ``GET /login?token=T`` (the URL ``dispatch serve`` prints) or the page's
form posting the token exchanges a valid token for a session cookie (``HttpOnly;
SameSite=Strict; Path=/``, a random id this process keeps in memory) and redirects to the
dashboard. A wrong token gets the page again with 401."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from dispatch.http.auth import Access
from dispatch.http.guard import BODY

WRONG = '<p class="problem">That token is not valid for this server.</p>'


def _page(status: int, note: str = "") -> Response:
    html = resources.files("dispatch.http").joinpath("static/login.html").read_text()
    return Response(html.replace("<!-- note -->", note), status_code=status,
                    media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-store"})


def _exchange(access: Access, token: str) -> Response:
    actor = access.actor_of_token(token.strip())
    if actor is None:
        return _page(401, WRONG)
    response = RedirectResponse("/", status_code=303, headers={"Cache-Control": "no-store"})
    response.set_cookie(access.cookie_name, access.open_session(actor), httponly=True,
                        samesite="strict", path="/")
    return response


Endpoint = Callable[[Request], Response]


def login_routes(access: Access) -> tuple[Endpoint, Endpoint]:
    def login_page(request: Request) -> Response:
        token = request.query_params.get("token")
        return _page(200) if token is None else _exchange(access, token)

    def login_form(request: Request) -> Response:
        body = request.scope.get(BODY, b"").decode("utf-8", "replace")
        token = (parse_qs(body).get("token") or [""])[0]
        return _exchange(access, token)

    return login_page, login_form
