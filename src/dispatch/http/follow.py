"""The log streams of ``dispatch serve`` (``GET /api/jobs/{job}/logs[?follow=1]``), which the
dashboard's job page opens by default: many may be open at once for as long as their jobs
run, so a stream holds no thread and no store connection while it waits.

A stream is a loop on the event loop: one look at the job (service/logs.py) every ``poll``
seconds, run on a small executor of the streams' own (``THREADS``, so the API's threads stay
free) at most ``BUDGET`` bytes a call, with a store connection borrowed from a small pool
for that call only; between calls it awaits. It ends
at the job's outcome, as soon as its client goes away (uvicorn's ``http.disconnect``,
watched the whole time), and when the server stops (``LogStreams.stop``, called as uvicorn
starts its shutdown, before it waits for open responses to end).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from prometheus_client import CollectorRegistry, Gauge
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from dispatch.errors import DispatchError
from dispatch.service import Service
from dispatch.service.logs import Follow
from dispatch.support.tails import text_of

log = logging.getLogger("dispatch.http")
T = TypeVar("T")

POLL_S = 0.5  # between looks at a followed job, as `dispatch logs -f`
THREADS = 4  # looks run at once, whatever the number of streams (the API keeps its own 40)
BUDGET = 1 << 20  # bytes one call reads before it hands them to the client


class LogStreams:
    """Every log stream of one server: the executor their looks run on, the store
    connections those borrow, how many are open (``dispatch_log_streams_open``) and the stop
    that ends them all."""

    def __init__(self, open_service: Callable[[], Service], registry: CollectorRegistry, *,
                 threads: int = THREADS, poll: float = POLL_S) -> None:
        self.open_service = open_service
        self.threads = threads
        self.poll = poll
        self.stopping = False
        self._ended: set[anyio.Event] = set()  # one per open stream; set ends it
        self._limiter: anyio.CapacityLimiter | None = None
        self._idle: list[Service] = []
        self._lock = threading.Lock()
        self.gauge = Gauge("dispatch_log_streams_open", "log streams open now (each a client "
                           "reading a job's output)", registry=registry)

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made on the event loop, by the first stream
            self._limiter = anyio.CapacityLimiter(self.threads)
        return self._limiter

    def stop(self) -> None:
        """End every open stream (and refuse new ones): the server is stopping. Called on
        the event loop."""
        self.stopping = True
        for ended in self._ended:
            ended.set()

    def close(self) -> None:
        """Close the pooled store connections (once the server has stopped)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for service in idle:
            service.close()

    def borrow(self) -> Service:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self.open_service()

    def give_back(self, service: Service) -> None:
        with self._lock:
            if not self.stopping and len(self._idle) < self.threads:
                self._idle.append(service)
                return
        service.close()

    async def run(self, fn: Callable[[LogStreams, Follow], T], follower: Follow) -> T:
        return await anyio.to_thread.run_sync(fn, self, follower, limiter=self.limiter)

    def register(self) -> anyio.Event:
        ended = anyio.Event()
        if self.stopping:
            ended.set()
        self._ended.add(ended)
        self.gauge.inc()
        return ended

    def unregister(self, ended: anyio.Event) -> None:
        self._ended.discard(ended)
        self.gauge.dec()


@dataclass
class _Got:
    """What one call on the executor read: text, whether the look was read to its end, and
    the error that ended it (after the text read before it)."""

    texts: list[str]
    finished: bool
    error: DispatchError | None = None


def _look(streams: LogStreams, follower: Follow) -> _Got:
    """Read a look of ``follower`` (in a worker thread) with a store connection borrowed for
    this call only, stopping once ``BUDGET`` bytes are read (the next call goes on from
    there): a stream holds no connection while it waits for its client or its job, and at
    most about ``BUDGET`` bytes."""
    got = _Got([], finished=False)
    size = 0
    service = streams.borrow()
    try:
        pieces = follower.look(service)
        try:
            for _, node, data, many in pieces:
                got.texts.append(text_of(data, f"[{node}] " if many else ""))
                size += len(data)
                if size >= BUDGET:
                    return got
        finally:
            pieces.close()
        got.finished = True
    except DispatchError as err:
        got.error = err
    finally:
        streams.give_back(service)
    return got


class LogStreamResponse(Response):
    """A job's output as ``text/plain``, streamed look by look (see the module's doc). An
    error in the first look is an HTTP status (``on_error``'s answer: no such submission, an
    unreachable scheduler); once the stream has begun, a last line ``== dispatch: error:
    ...`` says it. A stream the server's stop ends says so in its last line."""

    media_type = "text/plain; charset=utf-8"

    def __init__(self, streams: LogStreams, follower: Follow,
                 on_error: Callable[[Exception], Response]) -> None:
        # as StreamingResponse: no body, so no Content-Length (the answer is chunked)
        self.status_code = 200
        self.background = None
        self.init_headers()
        self.streams = streams
        self.follower = follower
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ended = self.streams.register()
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._watch_disconnect, receive, ended)
                await self._stream(scope, send, ended)
                tasks.cancel_scope.cancel()
        finally:
            self.streams.unregister(ended)

    @staticmethod
    async def _watch_disconnect(receive: Receive, ended: anyio.Event) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        ended.set()

    async def _stream(self, scope: Scope, send: Send, ended: anyio.Event) -> None:
        started = False
        last = b""
        while not ended.is_set():
            try:
                got = await self.streams.run(_look, self.follower)
            except Exception as err:  # a bug: the log has its traceback
                log.exception("%s failed", scope.get("path"))
                if not started:
                    await self.on_error(err)(scope, _no_receive, send)
                    return
                last = b"== dispatch: error: internal error\n"
                break
            if not started:
                if got.error is not None and not got.texts:
                    await self.on_error(got.error)(scope, _no_receive, send)
                    return
                await send({"type": "http.response.start", "status": self.status_code,
                            "headers": self.raw_headers})
                started = True
            for text in got.texts:
                await send({"type": "http.response.body", "body": text.encode(),
                            "more_body": True})
            if got.error is not None:
                last = f"== dispatch: error: {got.error}\n".encode()
                break
            if not got.finished:
                continue  # more was written than one call reads: go on at once
            if self.follower.done:
                break
            with anyio.move_on_after(self.streams.poll):
                await ended.wait()
        else:
            if self.streams.stopping:
                last = b"== dispatch: the server is stopping; follow again to go on\n"
        if not started:  # ended before its first look
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": last, "more_body": False})


async def _no_receive() -> Any:
    raise RuntimeError("an error response reads no request")


__all__ = ["POLL_S", "LogStreamResponse", "LogStreams"]
