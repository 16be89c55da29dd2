"""GET /api/jobs/{job}/logs: a job's output as text, through the service's ``Follow``; the
stream itself runs on the event loop (http/follow.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dispatch.http.endpoints import Server, error_of, flag, handle
from dispatch.http.follow import LogStreamResponse
from dispatch.service.listing import whole_number
from dispatch.service.logs import Follow


def log_routes(server: Server) -> list[Route]:
    @handle
    def job_logs(request: Request) -> Response:
        """The job's output as text, streamed in pieces (never held whole: a log of any size
        takes a few MiB here); ``tail=N``: the last N lines of each stream only."""
        def _count(name: str, least: int) -> int | None:
            raw = request.query_params.get(name)
            return None if raw is None else whole_number(name, raw, least)

        follow = flag(request, "follow")
        submission = _count("submission", 1)
        tail = _count("tail", 0)
        with server.service() as service:
            job_id = service.resolve(request.path_params["job"])
        # Read look by look on the event loop (http/follow.py): a stream waiting for its
        # job's next line holds no thread and no store connection.
        return LogStreamResponse(server.streams, Follow(job_id, submission=submission,
                                                        follow=follow, tail=tail),
                                 on_error=error_of)

    return [Route("/api/jobs/{job}/logs", job_logs, methods=["GET"])]
