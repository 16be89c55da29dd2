"""uvicorn's h11 protocol with what a server that can start commands needs at the connection:

- on the Unix socket, the peer's uid as the kernel gives it (``SO_PEERCRED`` on the
  accepted socket, so no path can be swapped under us) must be the server's; anyone else's
  connection is closed at once. The uid is put in each request's scope (``PEER_UID``);
- a request (headers and body) must arrive within ``REQUEST_TIMEOUT_S`` of its first
  awaited byte, else the connection is closed: a slow or half-sent request holds nothing;
- at most ``max_connections`` connections: a new one past the cap closes the oldest
  connection that is still waiting for its request (idle or half-sent), so a flood of
  half-open connections cannot keep a real client out;
- each refusal is one rate-limited log line (http/refusals.py), never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections import OrderedDict
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from dispatch.http.refusals import REFUSALS

PEER_UID = "dispatch.peer_uid"
REQUEST_TIMEOUT_S = 20.0
MAX_CONNECTIONS = 1000
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_uid(sock: Any) -> int:
    """The uid of the process at the other end of a connected Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return int(_UCRED.unpack(raw)[1])


class QuietUvicornWarnings(logging.Filter):
    """uvicorn's one warning per invalid request, as one rate-limited refusal line."""

    RATE_LIMITED = {"Invalid HTTP request received.": "an invalid HTTP request",
                    "Unsupported upgrade request.": "an upgrade request (not supported)"}

    def filter(self, record: logging.LogRecord) -> bool:
        said = self.RATE_LIMITED.get(record.getMessage())
        if said is None:
            return True
        REFUSALS.note(said, said)
        return False


class _Waiting:
    """The connections still waiting for (the rest of) a request, oldest first."""

    def __init__(self) -> None:
        self.conns: OrderedDict[GuardedH11Protocol, None] = OrderedDict()

    def add(self, conn: GuardedH11Protocol) -> None:
        self.conns[conn] = None

    def discard(self, conn: GuardedH11Protocol) -> None:
        self.conns.pop(conn, None)

    def oldest(self) -> GuardedH11Protocol | None:
        return next(iter(self.conns), None)


class GuardedH11Protocol(H11Protocol):
    max_connections: ClassVar[int] = MAX_CONNECTIONS
    request_timeout_s: ClassVar[float] = REQUEST_TIMEOUT_S
    waiting: ClassVar[_Waiting] = _Waiting()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline: asyncio.TimerHandle | None = None
        self.refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            uid = peer_uid(sock)
            if uid != os.getuid():
                self.refused = True
                REFUSALS.note("peer-uid", f"a Unix socket connection from uid {uid}")
                transport.abort()
                return
            app = self.app

            async def as_peer(scope: Any, receive: Any, send: Any) -> None:
                scope[PEER_UID] = uid
                await app(scope, receive, send)
            self.app = as_peer
        if len(self.connections) >= self.max_connections:
            oldest = self.waiting.oldest()
            if oldest is None:
                self.refused = True
                REFUSALS.note("connection-cap", f"{len(self.connections)} connections are "
                              "busy (the cap)")
                transport.abort()
                return
            REFUSALS.note("evicted", f"{len(self.connections)} connections open (the cap): "
                          "closed the oldest still waiting for its request")
            oldest.close_waiting()
        super().connection_made(transport)
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._unwatch()
        if self.refused:
            return
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def _watch(self) -> None:
        """Start the request's clock when one is awaited; stop it once it is all here."""
        if self.transport.is_closing():
            self._unwatch()
        elif self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            if self.deadline is None:
                self.deadline = self.loop.call_later(self.request_timeout_s, self._too_slow)
                self.waiting.add(self)
        else:
            self._unwatch()

    def _unwatch(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.waiting.discard(self)

    def _too_slow(self) -> None:
        self.deadline = None
        REFUSALS.note("slow", f"a request not complete within {self.request_timeout_s:g}s")
        self.close_waiting()

    def close_waiting(self) -> None:
        self._unwatch()
        if not self.transport.is_closing():
            self.transport.abort()
