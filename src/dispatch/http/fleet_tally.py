"""What each job adds to ``/metrics``, and the fleet's totals kept as the sum of those parts.

A job's part depends on its committed events only (its version): the state its record says
(no scheduler asked, as the dashboard's list), its outcomes, recoveries, escalations, budget
while unfinished, and its node-seconds by phase and cause up to its latest committed event.
So the totals are kept between scrapes and a scrape takes out the old part and adds the new
one of each job written to since (issue 36): its cost is what changed, not what exists.
Every sum is of integers (counts, and timedeltas, which are whole microseconds), so adding
and taking out in any order gives exactly the sums of a whole recomputation; a key is kept
while any part holds it, so a series with a zero sum stays as a recomputation shows it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Generic, TypeVar

import msgspec

from dispatch.core.events import Event
from dispatch.core.goodput import ZERO, job_time
from dispatch.core.model import State
from dispatch.core.record import Job
from dispatch.core.status import project

K = TypeVar("K", bound=Hashable)
V = TypeVar("V", int, timedelta)


class Part(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True,
           gc=False):
    """What one job adds to the record's metrics. A msgspec struct (of strings, numbers and
    tuples of them, so never in a cycle: ``gc=False``), so that the store's cached parts
    decode straight into it (http/part_codec.py)."""

    state: str | None  # None: the record cannot be used
    outcomes: tuple[tuple[str, str], ...] = ()  # (state, cause kind)
    recoveries: tuple[str, ...] = ()
    escalations: tuple[str, ...] = ()
    app_error: str | None = None
    budget: tuple[tuple[str, str, int], ...] = ()  # (scope, rule, used) of an unfinished job
    backend: str = ""
    live: bool = False
    submitted: bool = False  # holds a submission token: its scheduler can be asked about it
    seconds: tuple[tuple[tuple[str, str, str], timedelta], ...] = ()  # (phase, cause, backend)
    lost: tuple[tuple[tuple[str, str], timedelta], ...] = ()  # (cause, backend)


UNUSABLE = Part(state=None)


def part_of(job: Job, events: Sequence[Event], now: datetime) -> Part:
    """The part of a job folded from ``events`` (its whole record). ``now`` is only the
    fold's: nothing here counts the piece of time still running to it."""
    s = project(job, None, now)
    outcomes, recoveries = [], []
    for t in s.history:
        if t.state is State.RECOVERING and t.cause is not None:
            recoveries.append(t.cause.kind.value)
        elif t.state.terminal and t.cause is not None:
            outcomes.append((t.state.value, t.cause.kind.value))
    live = not s.state.terminal
    jt = job_time(events, now)
    seconds: dict[tuple[str, str, str], timedelta] = {}
    for x in jt.segments[: jt.closed]:
        key = (x.phase.value, x.cause.value, jt.backend)
        seconds[key] = seconds.get(key, ZERO) + (x.end - x.start) * x.nodes
    lost: dict[tuple[str, str], timedelta] = {}
    for x in jt.lost:
        lkey = (x.cause.value, jt.backend)
        lost[lkey] = lost.get(lkey, ZERO) + (x.end - x.start) * x.nodes
    return Part(
        state=s.state.value,
        outcomes=tuple(outcomes),
        recoveries=tuple(recoveries),
        escalations=tuple(
            x.cause.kind.value if x.cause is not None else "none" for x in s.escalations
        ),
        # the kind only: never the words
        app_error=(
            s.cause.kind.value
            if s.settled and s.error is not None and s.cause is not None
            else None
        ),
        budget=tuple((s.scope or s.backend, rule, n) for rule, n in s.budget_used.items())
        if live
        else (),
        backend=s.backend,
        live=live,
        submitted=bool(job.submissions),
        seconds=tuple(sorted(seconds.items())),
        lost=tuple(sorted(lost.items())),
    )


class Sums(Generic[K, V]):
    """Sums by key, each key kept while any part holds it (its count of holders)."""

    def __init__(self) -> None:
        self.total: dict[K, V] = {}
        self.holders: Counter[K] = Counter()

    def move(self, key: K, value: V, sign: int) -> None:
        self.holders[key] += sign
        if self.holders[key] == 0:
            del self.holders[key]
            del self.total[key]
            return
        old = self.total.get(key)
        self.total[key] = value * sign if old is None else old + value * sign

    def items(self) -> list[tuple[K, V]]:
        return sorted(self.total.items(), key=lambda kv: kv[0])  # type: ignore[arg-type,return-value]


class Totals:
    """The fleet's sums of parts, changed by one part at a time."""

    def __init__(self) -> None:
        self.states: Counter[str] = Counter()
        self.unusable = 0
        self.outcomes: Sums[tuple[str, str], int] = Sums()
        self.recoveries: Sums[str, int] = Sums()
        self.escalations: Sums[str, int] = Sums()
        self.app_errors: Sums[str, int] = Sums()
        self.budget: Sums[tuple[str, str], int] = Sums()
        self.live: Sums[str, int] = Sums()  # backend -> unfinished jobs
        self.seconds: Sums[tuple[str, str, str], timedelta] = Sums()
        self.lost: Sums[tuple[str, str], timedelta] = Sums()
        self.submitted: dict[str, set[str]] = {}  # backend -> its live jobs with a token

    def add(self, job_id: str, p: Part) -> None:
        self._move(job_id, p, 1)

    def take(self, job_id: str, p: Part) -> None:
        self._move(job_id, p, -1)

    def _move(self, job_id: str, p: Part, sign: int) -> None:
        if p.state is None:
            self.unusable += sign
            return
        self.states[p.state] += sign
        for o in p.outcomes:
            self.outcomes.move(o, 1, sign)
        for r in p.recoveries:
            self.recoveries.move(r, 1, sign)
        for e in p.escalations:
            self.escalations.move(e, 1, sign)
        if p.app_error is not None:
            self.app_errors.move(p.app_error, 1, sign)
        for scope, rule, n in p.budget:
            self.budget.move((scope, rule), n, sign)
        if p.live:
            self.live.move(p.backend, 1, sign)
            if p.submitted:
                held = self.submitted.setdefault(p.backend, set())
                if sign > 0:
                    held.add(job_id)
                else:
                    held.discard(job_id)
                    if not held:
                        del self.submitted[p.backend]
        for key, v in p.seconds:
            self.seconds.move(key, v, sign)
        for lkey, v in p.lost:
            self.lost.move(lkey, v, sign)

    def probes(self) -> dict[str, str | None]:
        """For each backend with unfinished jobs, one of them its scheduler can be asked
        about (None: none was submitted yet, so there is nothing to ask)."""
        return {
            backend: next(iter(self.submitted.get(backend, ())), None)
            for backend, _ in self.live.items()
        }


def totals_of(parts: Iterable[tuple[str, Part]]) -> Totals:
    out = Totals()
    for job_id, p in parts:
        out.add(job_id, p)
    return out


__all__ = ["UNUSABLE", "Part", "Sums", "Totals", "part_of", "totals_of"]
