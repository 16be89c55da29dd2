"""A supervisor's live jobs, kept folded between ticks: each tick reads only what changed.

The first look lists every live job of the scope and folds each whole record; every later
look asks the store which jobs were written to since (one indexed query, stores/changes.py)
and reads, for those only, the events after the version already folded (one query), which
``record.advance`` folds on: the same Job a whole fold gives (tests/property/
test_incremental_fold.py). A job that ends leaves the set; one whose record cannot be used
is set aside with its error, as ``reading.fold_records`` does, and read whole again next time.

A read of many jobs (a first look: every live job) runs with the cyclic collector paused
(support/gc_pause.py): it allocates millions of objects that all stay alive, and the
collector rescanning them cost a supervisor's first tick about 40 % of its CPU at 100,000
live jobs (issue 49). The LiveFolds of one process over one store may share their folded
jobs (``SharedFolds``): serve keeps the live jobs folded for its held index and its
supervisors for their ticks, and each job folded at a version is then folded, and kept,
once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from datetime import datetime

from dispatch.core.events import Event
from dispatch.core.record import Job, advance
from dispatch.errors import DispatchError
from dispatch.stores.base import RecordStore
from dispatch.stores.reading import RECORD_ERRORS, fold_own
from dispatch.support.gc_pause import gc_paused

BULK = 1000  # a read of this many jobs or more runs with the cyclic collector paused
CHUNK = 250  # jobs read and folded at a time: what a chunk decodes stays in the CPU's caches


class SharedFolds:
    """The LiveFolds of one process over one store that may take each other's folded jobs:
    a job another one folded at the very version this one's look asks for is taken as it
    is, unread, and both then keep the one object (issue 49: serve's held index and its
    in-process supervisors fold 100,000 live jobs once). A folded job is a pure function of
    its record's events up to its version, and events are append-only, so it is the same
    job whoever folded it. (A stored event edited in place by hand, which marks its job,
    docs/scale.md, is no more seen by a LiveFolds that already holds the job at that
    version than before: each reads a job again only when its version moves.)

    Nothing is copied or kept here: the jobs are looked up in the others' own tables, so a
    LiveFolds that shares pays nothing until another one has jobs to give. A lookup is one
    dict read, atomic under the interpreter lock, and a job is taken only at exactly the
    version asked for, so a race with the other's thread can only make this one fold the
    job itself."""

    def __init__(self) -> None:
        self._members: weakref.WeakSet[LiveFolds] = weakref.WeakSet()
        self._lock = threading.Lock()  # members join from their own threads
        # A read of many jobs at a time: the second waits, then takes the first's jobs.
        self.reading = threading.Lock()

    def join(self, member: LiveFolds) -> None:
        with self._lock:
            self._members.add(member)

    def find(self, asking: LiveFolds, ids: Iterable[str]) -> dict[str, Job]:
        """The jobs of ``ids`` another member holds at exactly the versions ``asking``
        wants."""
        with self._lock:
            others = [m for m in self._members if m is not asking]
        tables = [m.folded for m in others if m.folded]
        if not tables:
            return {}
        wanted = asking.wanted
        out: dict[str, Job] = {}
        for job_id in ids:
            for table in tables:
                job = table.get(job_id)
                if job is not None and job.version == wanted[job_id]:
                    out[job_id] = job
                    break
        return out


class LiveFolds:
    """The live jobs of ``scope`` (None: every scope), folded at the version last read."""

    def __init__(self, store: RecordStore, scope: str | None = None,
                 shared: SharedFolds | None = None) -> None:
        self.store = store
        self.scope = scope
        self.shared = shared
        self.mark: int | None = None
        self.wanted: dict[str, int] = {}  # live job -> its version as the store last said
        self.folded: dict[str, Job] = {}
        self.unfolded: set[str] = set()  # live jobs whose record could not be used
        self.fresh: set[str] = set()  # the jobs read at the last refresh
        if shared is not None:
            shared.join(self)

    def refresh(self, now: datetime) -> tuple[list[Job], dict[str, DispatchError]]:
        """The live jobs, folded at their current versions (creation order), and the ones
        whose record cannot be used, each with its error."""
        changes, self.mark = self.store.changes(self.mark, scope=self.scope)
        # Only the jobs written to since, and those set aside last time, are read: a tick
        # costs what changed, not the live set (issue 49).
        stale = dict.fromkeys(self.unfolded & self.wanted.keys(), 0)
        for c in changes:
            if c.terminal:
                self.wanted.pop(c.job_id, None)
                self.folded.pop(c.job_id, None)
                stale.pop(c.job_id, None)
                continue
            self.wanted[c.job_id] = c.version
            held = self.folded.get(c.job_id)
            if held is None or held.version > c.version:
                stale[c.job_id] = 0
            elif held.version < c.version:
                stale[c.job_id] = held.version
        errors = self._catch_up(stale, now)
        self.fresh = set(stale)
        # set aside, or not caught up (nothing read): read whole at the next refresh
        self.unfolded = {j for j in stale if j not in self.folded
                         or self.folded[j].version < self.wanted.get(j, 0)}
        if len(self.folded) == len(self.wanted):  # every live job folded: in their order
            return list(self.folded.values()), errors
        return [self.folded[j] for j in self.wanted if j in self.folded], errors

    def _catch_up(self, stale: dict[str, int], now: datetime) -> dict[str, DispatchError]:
        if len(stale) < BULK:
            return self._read(stale, now)
        with (self.shared.reading if self.shared is not None else nullcontext()), \
                gc_paused():
            return self._read(stale, now)

    def _read(self, stale: dict[str, int], now: datetime) -> dict[str, DispatchError]:
        """Read and fold ``stale`` in chunks of ``CHUNK`` jobs: the rows and events of one
        chunk are dropped once folded, so a first look never holds every live record's
        stored and decoded events at once (issue 49: most of its peak memory)."""
        errors: dict[str, DispatchError] = {}
        # Many jobs are read in the order of their ids, the key of the stores' tables. Ids
        # are random (service/requests.py), so the live jobs in creation order lie on pages
        # all over the tables, and each chunk read most of its pages again (the first
        # look's SQL at 100,000 live jobs: 0.76 s of CPU in creation order, 0.53 s sorted).
        many = len(stale) >= BULK
        ids = sorted(stale) if many else list(stale)
        # the jobs not held yet: read in key order, they go where ``stale`` has them after
        new = [j for j in stale if j not in self.folded] if many else []
        for start in range(0, len(ids), CHUNK):
            self._read_chunk({j: stale[j] for j in ids[start:start + CHUNK]}, now, errors)
        for job_id in errors:
            self.folded.pop(job_id, None)  # read whole next time
        folded = self.folded
        for job_id in new:  # in the order refresh answers in (a job held keeps its place)
            job = folded.pop(job_id, None)
            if job is not None:
                folded[job_id] = job
        return errors

    def _read_chunk(self, stale: dict[str, int], now: datetime,
                    errors: dict[str, DispatchError]) -> None:
        shared = self.shared
        # folded by another LiveFolds at the version wanted
        found = shared.find(self, stale) if shared is not None else {}
        unread = {j: a for j, a in stale.items() if j not in found} if found else stale
        tails: dict[str, list[Event]] = {}
        if unread:
            try:
                tails = self.store.read_after(unread)
            except RECORD_ERRORS:
                for job_id, after in unread.items():  # one bad record never hides the others
                    try:
                        tails.update(self.store.read_after({job_id: after}))
                    except RECORD_ERRORS as err:
                        errors[job_id] = err
        for job_id in stale:  # in the order they were found (the live jobs' order)
            kept = found.get(job_id)
            if kept is not None:
                self.folded[job_id] = kept
                continue
            events = tails.get(job_id)
            if events is None:
                continue
            try:
                self.folded[job_id] = self._fold_on(job_id, stale[job_id], events, now)
            except RECORD_ERRORS as err:
                errors[job_id] = err

    def _fold_on(self, job_id: str, after: int, events: Sequence[Event], now: datetime
                 ) -> Job:
        if after == 0:
            return fold_own(events, now, job_id)
        return advance(self.folded[job_id], events)
