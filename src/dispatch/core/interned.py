"""One copy of the equal immutable values that many folded jobs keep (issue 49).

A server or supervisor keeps every live job folded (stores/live.py): at 100,000 live jobs,
each job's own copy of values that are the same for thousands of jobs cost about a third of
what a folded job holds. Decoding gives each record its own objects: its backend's
declarations (with an empty frozenset of 216 bytes), the holder of each submit attempt (one
per supervisor process), and the fold its own frozensets (the executions started, most
often just {0}). ``interned`` returns the copy already kept of a value equal to the one it
is given, else keeps that one: the same value, so every answer is the same (a Job compares
by value), at one copy's cost. Only frozen, hashable values of a few types pass through it.

Each kind's table forgets everything once it holds ``LIMIT`` values, so a stream of values
that never repeat costs a bounded table, never a leak; a value forgotten is kept again the
next time it is seen. The value last given of each kind is tried first, by equality (live
jobs come in runs of one backend, one supervisor): an equality test costs less than a hash
of the decoder's new objects. Reads and writes are single dict operations, atomic under the
interpreter lock, so threads may share it (the core takes no lock: it does no I/O).
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")

LIMIT = 4096  # distinct values of one type kept at most

# per kind: a type (equal values of two types differ), or the name a caller gives values of
# one type that mean different things (a job's holders and its budget are both tuples: kept
# apart, each kind's last value is the next one's far more often)
_kept: dict[object, dict[object, object]] = {}
_last: dict[object, object] = {}  # per kind, the value last given: most often the next one
EMPTY: frozenset[str] = frozenset()  # one empty set for every job that stopped no duplicate


def interned(value: T, kind: str | None = None) -> T:
    """The kept value equal to ``value`` (of the same type), else ``value``, now kept.
    ``kind``: the values' own table (each caller passes values of one type under it)."""
    kind_: object = type(value) if kind is None else kind
    last = _last.get(kind_)
    if last is not None and last == value:  # an equality test costs less than a hash
        return last  # equal, and of the same type
    table = _kept.get(kind_)
    if table is None:
        table = _kept.setdefault(kind_, {})
    kept = table.get(value)
    if kept is None:
        if len(table) >= LIMIT:
            table.clear()
        kept = table.setdefault(value, value)
    _last[kind_] = kept
    return kept  # type: ignore[return-value]


__all__ = ["EMPTY", "LIMIT", "interned"]
