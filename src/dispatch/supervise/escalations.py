"""Escalations go somewhere: the log always; a webhook and/or a command when configured.

Delivery never blocks the supervisor loop: a background thread drains a queue, retrying a
webhook with exponential backoff. The record already holds every escalation (EscalationRaised
is appended before anyone is told), so a lost notification never loses the decision.
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dispatch.core.app_error import AppError, error_json
from dispatch.core.codec import cause_json
from dispatch.core.model import Cause
from dispatch.core.record import Job
from dispatch.errors import BadInput

log = logging.getLogger("dispatch.escalation")


def escalation_payload(job: Job, message: str, cause: Cause | None,
                       at: datetime, error: AppError | None = None) -> dict[str, Any]:
    """``error``: the application's own error of the end escalated (its first failing rank
    and words), apart from the cause (the scheduler's and dispatch's words)."""
    return {
        "job": job.id,
        "name": job.name,
        "backend": job.spec.backend,
        "message": message,
        "cause": cause_json(cause),
        "error": error_json(error),
        "at": at.isoformat(),
    }


class BadEscalationTarget(BadInput, ValueError):
    """An escalation webhook or command that can never be used (exit code 2 at start, not
    a failure at the first escalation, hours later)."""


def check_webhook(url: str, where: str = "escalation webhook") -> str:
    """``url`` if it is an http(s) URL with a host, else BadEscalationTarget naming ``where``."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as err:
        raise BadEscalationTarget(f"{where}: {url!r} is not a URL ({err})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise BadEscalationTarget(f"{where}: {url!r} must be an http:// or https:// URL with "
                                  "a host")
    if any(ord(c) < 0x20 or ord(c) == 0x7F or c.isspace() for c in url):
        raise BadEscalationTarget(f"{where}: {url!r} holds whitespace or control characters")
    return url


def split_command(text: str, where: str = "escalation command") -> list[str]:
    """The argv ``text`` names, split like a shell would (never run by one); refused
    (BadEscalationTarget naming ``where``) when it does not split or is empty."""
    import shlex

    try:
        argv = shlex.split(text)
    except ValueError as err:
        raise BadEscalationTarget(f"{where}: {text!r} cannot be split into an argv "
                                  f"({err})") from None
    if not argv or not argv[0]:
        raise BadEscalationTarget(f"{where}: {text!r} names no program")
    if any("\0" in a for a in argv):
        raise BadEscalationTarget(f"{where}: {text!r} holds a NUL character")
    return argv


class Notifier:
    """Log every escalation; POST it to ``webhook`` and/or pipe it to ``command`` (argv).
    Both are checked here (BadEscalationTarget), so a bad one is refused at start."""

    def __init__(self, webhook: str | None = None, command: Sequence[str] | None = None,
                 *, retries: int = 5, backoff: float = 1.0, timeout: float = 5.0) -> None:
        self.webhook = check_webhook(webhook) if webhook else None
        if command is not None and isinstance(command, str):
            raise BadEscalationTarget("escalation command: an argv list, not a string "
                                      "(split_command splits one)")
        if command and (not command[0] or any(not isinstance(a, str) or "\0" in a
                                              for a in command)):
            raise BadEscalationTarget(f"escalation command: {list(command)!r} is not an argv "
                                      "of strings naming a program")
        self.command = list(command) if command else None
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        # Backends are supervised on threads of their own: two may escalate at once, and
        # exactly one drain thread must start (close() joins that one).
        self._start = threading.Lock()
        self.delivered: list[dict[str, Any]] = []
        self.failed: list[dict[str, Any]] = []

    def escalate(self, job: Job, message: str, cause: Cause | None, at: datetime,
                 error: AppError | None = None) -> None:
        payload = escalation_payload(job, message, cause, at, error)
        log.error("ESCALATION job %s (%s): %s [%s]", job.id, job.name, message,
                  cause.kind.value if cause else "-")
        if self.webhook or self.command:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._drain,
                                                    name="dispatch-notify", daemon=True)
                    self._thread.start()
            self._queue.put(payload)

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (bounded), then stop the background thread."""
        with self._start:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _drain(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            ok = True
            if self.webhook:
                ok = self._post(payload) and ok
            if self.command:
                ok = self._run(payload) and ok
            (self.delivered if ok else self.failed).append(payload)

    def _post(self, payload: dict[str, Any]) -> bool:
        # Imported here: urllib.request pulls in http.client, ssl and email, which every
        # command that never posts an escalation (status, ls, ...) would pay for at start.
        import urllib.error
        import urllib.request

        from dispatch.support.retry import with_backoff

        assert self.webhook is not None
        body = json.dumps(payload).encode()
        attempts = [0]

        def once() -> None:
            attempts[0] += 1
            request = urllib.request.Request(self.webhook or "", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                    if not 200 <= response.status < 300:
                        raise OSError(f"HTTP {response.status}")
            except (urllib.error.URLError, OSError) as err:
                log.warning("escalation webhook attempt %d failed: %s", attempts[0], err)
                raise

        try:
            with_backoff(once, attempts=self.retries, backoff=self.backoff,
                         retry_on=(urllib.error.URLError, OSError))
        except (urllib.error.URLError, OSError):
            return False
        return True

    def _run(self, payload: dict[str, Any]) -> bool:
        assert self.command is not None
        try:
            done = subprocess.run(self.command, input=json.dumps(payload).encode(),
                                  timeout=60, check=False, capture_output=True)
        except (OSError, subprocess.TimeoutExpired) as err:
            log.warning("escalation command failed: %s", err)
            return False
        if done.returncode != 0:
            log.warning("escalation command exited %d", done.returncode)
        return done.returncode == 0
