"""What a browser and a scraper read: the dashboard page and its static files, the login
(http/login.py), /metrics (Prometheus text format), and /healthz (a probe's)."""

from __future__ import annotations

from importlib import resources

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from dispatch.http.endpoints import Server
from dispatch.http.etag import compressed
from dispatch.http.login import login_routes


def site_routes(server: Server) -> list[BaseRoute]:
    def metrics(request: Request) -> Response:
        return compressed(request, Response(generate_latest(server.registry),
                                            media_type=CONTENT_TYPE_LATEST))

    def healthz(request: Request) -> Response:
        # For a liveness or readiness probe (docs/kubeflow.md, dispatch in the cluster):
        # needs no token, so it says nothing but that this process answers HTTP.
        return PlainTextResponse("ok\n", headers={"Cache-Control": "no-store"})

    def dashboard(request: Request) -> Response:
        html = resources.files("dispatch.http").joinpath("static/index.html").read_text()
        return Response(html, media_type="text/html; charset=utf-8",
                        headers={"Cache-Control": "no-store"})

    login_page, login_form = login_routes(server.access)
    static = StaticFiles(directory=str(resources.files("dispatch.http").joinpath("static")))
    return [
        Route("/", dashboard),
        Route("/jobs/{job}", dashboard),  # the job's page: the same page, which reads the URL
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login_form, methods=["POST"]),
        Mount("/static", static, name="static"),
        Route("/metrics", metrics),
        Route("/healthz", healthz, methods=["GET"]),
    ]
