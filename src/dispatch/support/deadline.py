"""How long a read waits for a scheduler, and the deadline for the tools it runs (R5).

A read (``status``, ``ls``, ``watch``, the HTTP API) sets it around its look at a backend
(discovery.look_all): every tool run in that context gets at most the time left, so a tool
that hangs is killed at the deadline and never outlives the read that started it. Where no
deadline is set (a supervisor's tick) each tool keeps its own timeout.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from dispatch.support.durations import seconds_in

# How long a read (status, ls, watch, the HTTP API) waits for one backend's look before it
# shows that backend's jobs as their record last committed them, marked unreachable (R5);
# $DISPATCH_READ_DEADLINE (seconds) sets another.
READ_DEADLINE_S = 5.0
READ_DEADLINE_ENV = "DISPATCH_READ_DEADLINE"
READ_DEADLINE_MIN_S, READ_DEADLINE_MAX_S = 0.1, 600.0

_until: ContextVar[float | None] = ContextVar("dispatch_tools_until", default=None)
_seconds: ContextVar[float | None] = ContextVar("dispatch_tools_seconds", default=None)


@contextmanager
def tools_within(seconds: float) -> Iterator[None]:
    """Every tool run inside gets at most what is left of ``seconds`` from now."""
    token = _until.set(time.monotonic() + seconds)
    told = _seconds.set(seconds)
    try:
        yield
    finally:
        _seconds.reset(told)
        _until.reset(token)


def deadline_seconds() -> float | None:
    """The ``seconds`` of the deadline in force (None: none), to say which one passed."""
    return _seconds.get()


def time_left(timeout: float) -> float:
    """``timeout``, or the seconds left before the deadline when that is less (0 or less:
    none left)."""
    until = _until.get()
    return timeout if until is None else min(timeout, until - time.monotonic())


def read_deadline(environ: Mapping[str, str] | None = None) -> float:
    """The reads' deadline per backend: $DISPATCH_READ_DEADLINE, else READ_DEADLINE_S;
    BadInput naming the variable when it is not a number of seconds in bounds."""
    text = (os.environ if environ is None else environ).get(READ_DEADLINE_ENV, "").strip()
    if not text:
        return READ_DEADLINE_S
    return seconds_in(text, READ_DEADLINE_ENV, READ_DEADLINE_MIN_S, READ_DEADLINE_MAX_S,
                      from_text=True)
