"""The bounds of the durations people give: lease periods, polls, refresh intervals, wait
timeouts (options and the Python API alike).

A lease period is how long a scope stays held after its holder dies: an unbounded one (inf,
1e12) would hold the scope past everyone's lifetime. A poll is the pause between ticks: nan
sleeps forever, 0 is a busy loop. Pure: no I/O; the CLI's option type uses it too.
"""

from __future__ import annotations

import math
import re

from dispatch.errors import BadInput

LEASE_MIN_S = 1.0
LEASE_MAX_S = 600.0
POLL_MIN_S = 0.05
POLL_MAX_S = 600.0
# An age (``ls --since 30d``, ``prune --before 12h``, ``goodput --since 2w``): a century at
# most, so ``now`` less it is always a date (99999999999999d would be before year 1).
AGE_MAX_S = 36_500 * 86_400
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
# ASCII digits only: \d and int() read any Unicode digit ("٧d" would be a week, "²d" fails
# in int()); the count is bounded before int() reads it (4,300 digits and more raise).
_AGE = re.compile(r"\s*([0-9]+)\s*([smhdw])\s*", re.ASCII)
_AGE_DIGITS = 12


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


def age_seconds(text: str, what: str) -> int | None:
    """The whole seconds of an age written as a whole number and a unit (``90m``, ``2h``,
    ``30d``, ``1w``); None when ``text`` is not written so (it may be a date). BadInput
    (naming ``what``) for an age over a century."""
    m = _AGE.fullmatch(text)
    if m is None:
        return None
    digits, unit = m.group(1).lstrip("0") or "0", m.group(2)
    if len(digits) > _AGE_DIGITS or int(digits) * AGE_UNITS[unit] > AGE_MAX_S:
        raise BadInput(f"{what} {quoted(text)}: an age is at most {AGE_MAX_S // 86_400}d "
                       "(100 years)")
    return int(digits) * AGE_UNITS[unit]


def quoted(text: str, most: int = 40) -> str:
    """``text`` as repr shows it, cut to its first ``most`` characters (a value of
    thousands of digits is named, not printed whole)."""
    if len(text) <= most:
        return repr(text)
    return f"{text[:most]!r}... ({len(text)} characters)"


def lease_seconds(value: object, what: str = "lease period") -> float:
    return seconds_in(value, what, LEASE_MIN_S, LEASE_MAX_S)


def poll_seconds(value: object, what: str = "poll") -> float:
    return seconds_in(value, what, POLL_MIN_S, POLL_MAX_S)


def timeout_seconds(value: object, what: str = "timeout") -> float | None:
    """A wait's limit: None (no limit) or a finite number of seconds, 0 or more."""
    if value is None:
        return None
    return seconds_in(value, what, 0.0, math.inf)
