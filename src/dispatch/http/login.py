"""The login page: ``GET /login?token=T`` (the URL ``dispatch serve`` prints) or the page's
form posting the token exchanges a valid token for a session cookie (``HttpOnly;
SameSite=Strict; Path=/``, a random id this process keeps in memory) and redirects to the
dashboard. A wrong token gets the page again with 401, and a log line (rate-limited, with
the peer).

A ``GET /login?token=`` that another site made the browser send (a link, a redirect, an
image) is refused with 403 (login CSRF: it would log the browser in as the attacker's
token): the browser's ``Sec-Fetch-Site`` must say ``none`` (the URL opened or pasted) or
``same-origin``. A client that sends no ``Sec-Fetch-Site`` (curl, a script) is not a browser
another site can drive, and is let in. The form's POST is checked like every POST
(http/guard.py)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from dispatch.http.auth import Access
from dispatch.http.guard import BODY, peer
from dispatch.http.refusals import REFUSALS

WRONG = '<p class="problem">That token is not valid for this server.</p>'
ELSEWHERE = ('<p class="problem">This login link was opened from another site, so it was not '
             'used. If the link is yours, paste the token below.</p>')
# what a browser says of a request it makes for the URL typed or pasted, or for a page of ours
OWN_SITES = frozenset({"none", "same-origin"})


def _page(status: int, note: str = "") -> Response:
    html = resources.files("dispatch.http").joinpath("static/login.html").read_text()
    return Response(html.replace("<!-- note -->", note), status_code=status,
                    media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-store"})


def _exchange(access: Access, token: str, request: Request) -> Response:
    actor = access.actor_of_token(token.strip())
    if actor is None:
        REFUSALS.note("login", f"a login with a wrong token from {peer(request)}")
        return _page(401, WRONG)
    response = RedirectResponse("/", status_code=303, headers={"Cache-Control": "no-store"})
    response.set_cookie(access.cookie_name, access.open_session(actor), httponly=True,
                        samesite="strict", path="/")
    return response


Endpoint = Callable[[Request], Response]


def login_routes(access: Access) -> tuple[Endpoint, Endpoint]:
    def login_page(request: Request) -> Response:
        token = request.query_params.get("token")
        if token is None:
            return _page(200)
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in OWN_SITES:
            REFUSALS.note("login-elsewhere", f"a login link opened from another site "
                          f"(Sec-Fetch-Site: {site}) from {peer(request)}")
            return _page(403, ELSEWHERE)
        return _exchange(access, token, request)

    def login_form(request: Request) -> Response:
        body = request.scope.get(BODY, b"").decode("utf-8", "replace")
        token = (parse_qs(body).get("token") or [""])[0]
        return _exchange(access, token, request)

    return login_page, login_form
