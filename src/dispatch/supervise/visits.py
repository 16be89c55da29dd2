"""Which live jobs a tick visits (issue 49): not every one, when nothing says it may have
changed.

A quiet job (supervise/quiet.py) stays quiet while its record, its objects, the look's
completeness and its attempts' holders stay the same and no time-based decision is due. When
a backend reports changes (Discovery.changes) and this supervisor consumed each of its looks
in turn (this look's changes run from the look its previous tick used: no reader's look, no
failed look, no tick of some jobs in between), a tick visits only:

- the jobs whose record was read again this tick (LiveFolds: the store's changes);
- the jobs some of whose objects changed (a ref or token of theirs among the changes);
- the jobs whose time-based decision came due (a heap of due times, core/next_due.py);
- the jobs that were not quiet after their last visit (a decision, an error);
- the jobs visited at every tick: with a submit attempt not resolved (its holders are judged
  each tick), with segment health (its files are reconciled each tick), watched after their
  outcome (the supervisor's ``chasing``).

Every other job is quiet and nothing it depends on changed since the look its quiet answer
was given on (by induction over unbroken looks), so deciding it would decide nothing: it is
not visited, and counted as skipped. Anything else (the first tick, a broken chain of
looks, the completeness changed, the clock set back, a takeover) visits every job, as before.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from datetime import datetime

from dispatch.core.model import Changes, Discovery, parse_token
from dispatch.core.record import Job
from dispatch.supervise.quiet import Quiet


def changes_of(backend: object, discovery: Discovery | None) -> Changes | None:
    """What changed among a backend's objects, when it declares that it reports changes (a
    job's quiet answer says which look its objects were last seen in)."""
    changes = discovery.changes if discovery is not None else None
    return changes if getattr(backend, "reports_changes", False) else None


class Visits:
    """What a supervisor keeps to choose the jobs a tick visits."""

    def __init__(self) -> None:
        self.due: list[tuple[datetime, str]] = []  # (due, job id), a heap; may hold stale
        self.every_tick: set[str] = set()
        self.busy: set[str] = set()  # not quiet after their last visit
        self.job_of_ref: dict[str, str] = {}
        self.last_look: dict[str, int] = {}  # backend -> the look its previous tick used
        self.complete: dict[str, bool] = {}
        self.last_now: datetime | None = None

    def reset(self) -> None:
        """Visit every job at the next tick (the quiet answers were forgotten)."""
        self.last_look.clear()

    def choose(self, name: str, changes: Changes | None, complete: bool | None,
               read: Iterable[str], now: datetime) -> set[str] | None:
        """The ids of backend ``name``'s jobs to visit at this tick; None: every one. Until
        ``consumed`` says every chosen job was visited, the next tick visits every one."""
        last, was_complete = self.last_look.pop(name, None), self.complete.pop(name, None)
        if changes is None or complete is None or last != changes.since \
                or was_complete != complete or self.last_now is None or now < self.last_now:
            return None
        ids = set(read) | self.every_tick | self.busy
        for key in changes.keys:
            job = self.job_of_ref.get(key)
            parsed = parse_token(key) if job is None else None
            ids.add(job if job is not None else parsed[0] if parsed is not None else key)
        while self.due and self.due[0][0] <= now:
            ids.add(heapq.heappop(self.due)[1])
        return ids

    @staticmethod
    def pick(ids: Iterable[str], name: str | None, find: Callable[[str], Job | None]
             ) -> list[Job]:
        """The jobs ``ids`` that ``find`` knows (of backend ``name``, unless None), by id."""
        return [j for i in sorted(ids) if (j := find(i)) is not None
                and (name is None or j.spec.backend == name)]

    def consumed(self, name: str, changes: Changes | None, complete: bool | None) -> None:
        """Every job of ``name`` this tick chose was visited on the look ``changes`` ran to."""
        if changes is not None and complete is not None:
            self.last_look[name], self.complete[name] = changes.look, complete

    def forget(self, ticked: set[str]) -> None:
        """Only the jobs ``ticked`` are kept (the others left the tick); the map of refs is
        rebuilt once it holds twice what it needs (amortized)."""
        self.busy &= ticked
        self.every_tick &= ticked
        if len(self.job_of_ref) > 2 * len(ticked) + 64:
            self.job_of_ref = {r: j for r, j in self.job_of_ref.items() if j in ticked}

    def visited(self, job: Job, before: Quiet | None, after: Quiet | None,
                chased: bool) -> None:
        """After ``job``'s visit: its quiet answer ``after`` (None: it was not quiet)."""
        for s in job.submissions:
            if s.ref is not None:
                self.job_of_ref[s.ref] = job.id
        if chased or job.spec.segment_health is not None or any(
                s.unresolved for s in job.submissions):
            self.every_tick.add(job.id)
        else:
            self.every_tick.discard(job.id)
        if after is None:
            self.busy.add(job.id)
            return
        self.busy.discard(job.id)
        if after is not before and after.due is not None:
            heapq.heappush(self.due, (after.due, job.id))

    def ticked(self, now: datetime, quiet: dict[str, Quiet]) -> None:
        """The tick is over. The heap keeps one entry per quiet answer given (a job whose
        answer is given again at each visit adds one each time): rebuilt from the answers
        held once it holds twice as many (amortized)."""
        self.last_now = now
        if len(self.due) > 2 * len(quiet) + 64:
            self.due = [(q.due, k) for k, q in quiet.items() if q.due is not None]
            heapq.heapify(self.due)
