"""One process: the supervisor loop in a thread, the HTTP server (uvicorn) in the main one.

The loop is ``Supervisor.serve``'s (a tick of every unfinished job every ``poll`` seconds,
backing off while a scheduler is unreachable), timed for ``/metrics``. Stopping the server
(SIGINT/SIGTERM) stops the loop after its current tick.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import uvicorn

from dispatch.errors import BadInput
from dispatch.http.app import Server, build_app, make_server
from dispatch.http.auth import Tokens, is_loopback, load_tokens
from dispatch.notify import Notifier
from dispatch.supervisor import Supervisor, TickReport

log = logging.getLogger("dispatch.http")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642


class SupervisorLoop:
    """``Supervisor.serve`` in a thread, with each tick timed into the server's metrics."""

    def __init__(self, server: Server, poll: float, notifier: Notifier | None = None,
                 on_tick: Callable[[TickReport], None] | None = None) -> None:
        self.server = server
        self.poll = poll
        self.notifier = notifier
        self.on_tick = on_tick
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="dispatch-supervisor",
                                       daemon=True)
        self.sup: Supervisor | None = None

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        if self.sup is not None:
            self.sup.stopping.set()
        self.thread.join(timeout)

    def _run(self) -> None:
        with self.server.service() as service:
            self.sup = sup = service.supervisor(notifier=self.notifier)
            sup.stopping = self.stopping
            backoff = self.poll
            while not self.stopping.is_set():
                started = time.monotonic()
                try:
                    report = sup.tick()
                except Exception:  # keep serving: the record is the truth, the next tick retries
                    log.exception("tick failed")
                    report = TickReport(errors=["tick failed"])
                self.server.metrics.observe(report, time.monotonic() - started)
                if self.on_tick is not None:
                    self.on_tick(report)
                backoff = min(backoff * 2, self.poll * 16) if report.unreachable else self.poll
                self.stopping.wait(backoff)
            sup.notifier.close()


def check_bind(host: str, token_file: str | None) -> Tokens:
    """The tokens to require: none on loopback without a token file; a non-loopback
    address needs one."""
    if token_file is None:
        if not is_loopback(host):
            raise BadInput(f"binding {host} (not a loopback address) needs --token-file "
                           "(lines name:token)")
        return Tokens({})
    return load_tokens(token_file)


def serve(store_url: str | None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
          token_file: str | None = None, poll: float = 2.0,
          notifier: Notifier | None = None, supervise: bool = True) -> None:
    tokens = check_bind(host, token_file)
    server = make_server(store_url, tokens)
    server.service().close()  # a store that cannot be used stops us here (exit 5), not later
    loop = SupervisorLoop(server, poll, notifier)
    config = uvicorn.Config(build_app(server), host=host, port=port, log_level="warning",
                            access_log=False, lifespan="off")
    if supervise:
        loop.start()
    try:
        uvicorn.Server(config).run()
    finally:
        if supervise:
            loop.stop()
