"""ETags for the dashboard's polls: a refresh of unchanged data is one cheap query and a
304 without a body; a changed one is gzipped when the client accepts it (``compressed``).

A list's tag is the store's stamp (the number of jobs and the sum of their versions: any
new job or event changes it) with the query asked; a job's is its version. Both carry the
current ``FRESH_S`` window too, so what only the scheduler says (a live job's object, a
scheduler that stopped answering) is asked again at least that often even when the record
did not move.
"""

from __future__ import annotations

import gzip
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


GZIP_MIN = 1024  # smaller bodies gain little from compression


def accepts_gzip(request: Request) -> bool:
    for part in request.headers.get("accept-encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*") and params.replace(" ", "") != "q=0":
            return True
    return False


def compressed(request: Request, response: Response) -> Response:
    """``response`` gzipped when the client accepts gzip and the body is worth it; the
    answer varies by Accept-Encoding either way. Only for whole (not streamed) bodies."""
    response.headers["Vary"] = "Accept-Encoding"
    if accepts_gzip(request) and len(response.body) >= GZIP_MIN:
        response.body = gzip.compress(response.body, compresslevel=6, mtime=0)
        response.headers["Content-Encoding"] = "gzip"
        response.headers["Content-Length"] = str(len(response.body))
    return response
