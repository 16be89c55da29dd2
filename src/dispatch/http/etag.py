"""ETags for the dashboard's polls: a refresh of unchanged data is one cheap query and a
304 without a body.

A list's tag is the store's stamp (the number of jobs and the sum of their versions: any
new job or event changes it) with the query asked; a job's is its version. Both carry the
current ``FRESH_S`` window too, so what only the scheduler says (a live job's object, a
scheduler that stopped answering) is asked again at least that often even when the record
did not move.
"""

from __future__ import annotations

import hashlib
import time

from starlette.requests import Request
from starlette.responses import Response

FRESH_S = 30


def _window(now: float | None = None) -> int:
    return int((time.time() if now is None else now) // FRESH_S)


def _tag(*parts: object) -> str:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:24]
    return f'W/"{digest}"'


def list_etag(stamp: tuple[int, int], query: str, now: float | None = None) -> str:
    return _tag("list", *stamp, query, _window(now))


def job_etag(job_id: str, version: int, path: str, now: float | None = None) -> str:
    return _tag("job", job_id, version, path, _window(now))


def not_modified(request: Request, etag: str) -> bool:
    wanted = request.headers.get("if-none-match", "")
    return etag in (t.strip() for t in wanted.split(","))


def tagged(response: Response, etag: str) -> Response:
    """The response with its ETag; the browser must ask again each time (no-cache) and
    may then get a 304."""
    response.headers["ETag"] = etag
    response.headers["Cache-Control"] = "no-cache"
    return response
