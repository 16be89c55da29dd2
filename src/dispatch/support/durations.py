"""The bounds of the durations people give: lease periods, polls, refresh intervals, wait
timeouts (options and the Python API alike).

A lease period is how long a scope stays held after its holder dies: an unbounded one (inf,
1e12) would hold the scope past everyone's lifetime. A poll is the pause between ticks: nan
sleeps forever, 0 is a busy loop. Pure: no I/O; the CLI's option type uses it too.
"""

from __future__ import annotations

import math

from dispatch.errors import BadInput

LEASE_MIN_S = 1.0
LEASE_MAX_S = 600.0
POLL_MIN_S = 0.05
POLL_MAX_S = 600.0


def seconds_in(value: object, what: str, low: float, high: float, *,
               from_text: bool = False) -> float:
    """``value`` as seconds; BadInput (naming ``what``) unless it is a finite number from
    ``low`` to ``high``. ``from_text``: a number written as text (an option) is read too."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    # Text in ASCII only: float() reads any Unicode digit ("٧" would be 7 seconds).
    if not number and not (from_text and isinstance(value, str) and value.isascii()):
        raise BadInput(f"{what}: {value!r} is not a number of seconds")
    try:
        seconds = float(value)  # type: ignore[arg-type]  # a number or text, checked above
    except (TypeError, ValueError, OverflowError):
        raise BadInput(f"{what}: {value!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or not low <= seconds <= high:
        span = f"from {low:g} to {high:g}" if math.isfinite(high) else f"{low:g} or more"
        raise BadInput(f"{what}: {value!r} must be a finite number of seconds {span}")
    return seconds


def lease_seconds(value: object, what: str = "lease period") -> float:
    return seconds_in(value, what, LEASE_MIN_S, LEASE_MAX_S)


def poll_seconds(value: object, what: str = "poll") -> float:
    return seconds_in(value, what, POLL_MIN_S, POLL_MAX_S)


def timeout_seconds(value: object, what: str = "timeout") -> float | None:
    """A wait's limit: None (no limit) or a finite number of seconds, 0 or more."""
    if value is None:
        return None
    return seconds_in(value, what, 0.0, math.inf)
