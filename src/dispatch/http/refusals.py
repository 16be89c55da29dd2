"""One log line per kind of refusal at most every few seconds, with a count of the ones it
stands for, so that a flood of bad or slow connections cannot flood the log."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("dispatch.http")

INTERVAL_S = 10.0


class Refusals:
    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.lock = threading.Lock()
        self.last: dict[str, float] = {}
        self.unsaid: dict[str, int] = {}

    def note(self, kind: str, message: str) -> None:
        """Count one refusal of ``kind``; say so in one line unless a line about ``kind``
        was written less than ``interval_s`` ago."""
        now = time.monotonic()
        with self.lock:
            self.unsaid[kind] = self.unsaid.get(kind, 0) + 1
            if now - self.last.get(kind, -self.interval_s) < self.interval_s:
                return
            count, self.unsaid[kind] = self.unsaid[kind], 0
            self.last[kind] = now
        more = f" ({count} such since the last line)" if count > 1 else ""
        log.warning("refused: %s%s", message, more)


REFUSALS = Refusals()
