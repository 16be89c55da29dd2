"""Escalations reach a real webhook (an HTTP server on loopback) with retries, and a command;
delivery never blocks the caller."""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from tests.specs import parse_spec

from dispatch.backends.registry import declarations_for
from dispatch.core import events as ev
from dispatch.core.model import Cause, CauseKind
from dispatch.core.record import fold
from dispatch.supervise.escalations import Notifier

NOW = datetime(2026, 11, 30, tzinfo=UTC)
JOB = fold([ev.JobCreated(seq=1, at=NOW, job_id="j1",
                          spec=parse_spec({"name": "n", "command": ["x"]}),
                          declarations=declarations_for("local"))], NOW)
CAUSE = Cause(kind=CauseKind.OUT_OF_MEMORY, detail="OUT_OF_MEMORY", at=NOW)


class Flaky(BaseHTTPRequestHandler):
    """Answers 503 to the first two POSTs, then 204; keeps what it received."""

    received: list[dict[str, Any]] = []
    calls = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        type(self).calls += 1
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).calls <= 2:
            self.send_response(503)
        else:
            type(self).received.append(json.loads(body))
            self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_webhook_is_retried_with_backoff_until_delivered() -> None:
    server = HTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hook"
        notifier = Notifier(webhook=url, backoff=0.05, retries=5)
        notifier.escalate(JOB, "no rule covers out-of-memory", CAUSE, NOW)  # returns at once
        notifier.close(timeout=30)
    finally:
        server.shutdown()
    assert Flaky.calls == 3
    assert Flaky.received == [{
        "job": "j1", "name": "n", "backend": "local",
        "message": "no rule covers out-of-memory",
        "cause": {"kind": "out-of-memory", "provenance": "scheduler", "actor": None,
                  "detail": "OUT_OF_MEMORY", "note": "", "exit_code": None,
                  "at": "2026-11-30T00:00:00+00:00"},
        "error": None,  # no application error captured for this end
        "at": NOW.isoformat()}]
    assert len(notifier.delivered) == 1 and not notifier.failed


def test_unreachable_webhook_gives_up_after_its_retries() -> None:
    notifier = Notifier(webhook="http://127.0.0.1:9/none", backoff=0.01, retries=2,
                        timeout=1)
    notifier.escalate(JOB, "m", CAUSE, NOW)
    notifier.close(timeout=30)
    assert len(notifier.failed) == 1 and not notifier.delivered


def test_command_gets_the_escalation_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    argv = [sys.executable, "-c",
            f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())"]
    notifier = Notifier(command=argv)
    notifier.escalate(JOB, "rules[0] budget spent (1/1) on out-of-memory", CAUSE, NOW)
    notifier.close(timeout=30)
    assert json.loads(out.read_text())["message"].startswith("rules[0] budget spent")


def test_the_escalation_command_gets_the_applications_error(tmp_path: Path) -> None:
    """Issue 23: the payload carries the application's error apart from the cause."""
    from dispatch.core.app_error import AppError, ErrorSource

    out = tmp_path / "got.json"
    argv = [sys.executable, "-c",
            f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())"]
    error = AppError(source=ErrorSource.TORCHELASTIC_ERROR_FILE, rank=1, node="node1",
                     message="FloatingPointError: loss is NaN", exit_code=1,
                     traceback_tail="Traceback (most recent call last):", at=NOW)
    notifier = Notifier(command=argv)
    notifier.escalate(JOB, "no rule covers non-zero-exit; application error: rank 1 on "
                      "node1: FloatingPointError: loss is NaN", CAUSE, NOW, error)
    notifier.close(timeout=30)
    got = json.loads(out.read_text())
    assert got["error"] == {
        "rank": 1, "local_rank": None, "node": "node1", "exit_code": 1, "signal": None,
        "signal_name": None, "message": "FloatingPointError: loss is NaN",
        "traceback_tail": "Traceback (most recent call last):",
        "source": "torchelastic-error-file", "at": NOW.isoformat(), "note": ""}
    assert got["cause"]["kind"] == "out-of-memory"
    assert "FloatingPointError" not in got["cause"]["detail"] + got["cause"]["note"]


def test_escalations_from_many_threads_at_once_start_one_drain_and_all_are_delivered(
        tmp_path: Path) -> None:
    """Backends are supervised on threads of their own: escalations raised at the same
    instant start exactly one delivery thread, and close() delivers every one of them."""
    out = tmp_path / "got"
    script = ("import sys, json; p = json.load(sys.stdin); "
              f"open({str(out)!r}, 'a').write(p['message'] + '\\n')")
    notifier = Notifier(command=[sys.executable, "-c", script])
    start = threading.Barrier(16)

    def raise_one(n: int) -> None:
        start.wait()
        notifier.escalate(JOB, f"escalation {n}", CAUSE, NOW)

    threads = [threading.Thread(target=raise_one, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    drains = [t for t in threading.enumerate() if t.name == "dispatch-notify"]
    notifier.close(timeout=120)
    assert len(drains) == 1
    assert sorted(out.read_text().splitlines()) == sorted(f"escalation {n}" for n in range(16))
    assert len(notifier.delivered) == 16 and notifier.failed == []
