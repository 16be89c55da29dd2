"""GET /api/goodput: the fleet's badput by cause per day (G4), the dashboard's chart."""

from __future__ import annotations

from datetime import timedelta

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dispatch.http.endpoints import Server, handle
from dispatch.service.listing import whole_number


def goodput_routes(server: Server) -> list[Route]:
    @handle
    def fleet_goodput(request: Request) -> Response:
        """Badput by cause per day over the last ``days`` (1..90, default 14): the fleet
        chart; and the whole span's split."""
        from dispatch.core.goodput import fleet
        from dispatch.service.goodput import badput_by_day, fleet_times, split_json

        days = whole_number("days", request.query_params.get("days", "14"), 1, 90)
        with server.service() as service:
            now = service.clock()
            found, errors = fleet_times(service.store, now)
        whole = fleet(found, None, since=now - timedelta(days=days), until=now).get("")
        return JSONResponse({"days": badput_by_day(found, now, days),
                             "split": split_json(whole) if whole is not None else None,
                             "unreadable": sorted(errors)})

    return [Route("/api/goodput", fleet_goodput, methods=["GET"])]
