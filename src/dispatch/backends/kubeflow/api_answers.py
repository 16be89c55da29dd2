"""What the API server says back, as dispatch reads it: a refusal in its own words
(ApiAnswer), a watch's version gone (WatchExpired), which codes are worth asking again, and
one open watch's stream of events (WatchStream)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx2

from dispatch.core.model import SchedulerUnreachable
from dispatch.errors import BackendError

BACKEND = "kubeflow"


class ApiAnswer(BackendError):
    """The API server answered and said no (404, 409, 422, 403...). Carries its words."""
    verb = "list"  # the read refused, when a look's read was: "watch" for a refused watch

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class WatchExpired(BackendError):
    """410 Gone: the resourceVersion a watch asked for is older than the server keeps; the
    only way on is a fresh list."""


def transient(code: int) -> bool:
    return code >= 500 or code == 429


class WatchStream:
    """One open watch: ``events()`` yields (type, object) until the server ends the stream
    cleanly; ``abort()`` (from any thread) ends it at once."""

    def __init__(self, response: Any, what: str) -> None:
        self._response = response
        self._what = what

    def events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        try:
            for line in self._response.iter_lines():
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                    etype, obj = event["type"], event["object"]
                except (ValueError, KeyError, TypeError):
                    raise SchedulerUnreachable(
                        BACKEND, f"{self._what}: not a watch event: {line[:200]!r}"
                    ) from None
                if etype == "ERROR":
                    code = int(obj.get("code") or 0)
                    message = str(obj.get("message") or "")
                    if code == 410:
                        raise WatchExpired(f"{self._what}: {message}")
                    if transient(code):
                        raise SchedulerUnreachable(BACKEND, f"{self._what}: {code} {message}")
                    raise ApiAnswer(code, str(obj.get("reason") or ""), message)
                yield str(etype), obj
        except httpx2.TransportError as err:
            raise SchedulerUnreachable(
                BACKEND, f"{self._what}: {type(err).__name__}: {err}"
            ) from None
        finally:
            self._response.close()

    def abort(self) -> None:
        stream = self._response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in recv()
            except OSError:
                pass
