"""Which live jobs are held, without folding every live job at every list refresh.

A server keeps the live jobs folded between refreshes (stores/live.py, as a supervisor does):
each refresh asks the store which jobs were written to since its last look and folds on only
those. The answer is read from the folded jobs, so it is the record's own word (a folded-on
job equals the whole fold: tests/property/test_incremental_fold.py); nothing is marked or
stored beside the record. Shared by a server's requests; each refresh reads through the
store of the request that asks.

The first refresh folds every live job, which takes long at thousands of them: a server
builds it in the background when it starts (``warm``). Until it is built, the held jobs are
found among the few live jobs that may be held, which the store names from its tables
(stores/held_candidates.py: a hold writes its cause there), each folded through its
snapshot: the same answer, without the wait (issue 49). Where those are many (more than
``CANDIDATES_MAX``), or the store cannot name them, a list says the count is not known yet
(``held_if_ready`` is None) rather than wait (issue 36).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime

from dispatch.core.record import Job
from dispatch.core.status import record_state
from dispatch.stores.base import RecordStore, sort_key_us
from dispatch.stores.held_candidates import may_be_held
from dispatch.stores.live import LiveFolds, SharedFolds
from dispatch.stores.snapshot import fold_with_snapshots
from dispatch.support.gc_pause import gc_paused

log = logging.getLogger(__name__)

CANDIDATES_MAX = 5000  # beyond this, folding them at each request costs what waiting does


def is_held(job: Job) -> bool:
    """Held as the record says (core/status.py: a hold and no outcome)."""
    return job.outcome is None and job.hold is not None


class HeldIndex:
    """The live jobs of every scope, folded on between refreshes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: LiveFolds | None = None
        # Shared with this server's in-process supervisors (http/server.py): each live job
        # folded once, kept once (stores/live.py, issue 49).
        self.shared = SharedFolds()
        self._built = threading.Event()
        self._warming = False  # the background build runs: requests do not wait for it
        # The last refresh's jobs and what they give: reused while a refresh returns the
        # very same Job objects (immutable), so that a list asks no record_state or is_held
        # of 100,000 jobs when nothing changed (issue 49).
        self._answered: list[Job] = []
        self._states: dict[str, int] = {}
        self._held: list[str] = []

    def live(self, store: RecordStore, now: datetime) -> list[Job]:
        """The live jobs, folded at their current versions. A job whose record cannot be
        read is left out, as a list leaves out its broken rows' state, and is read whole
        next time."""
        return self._refreshed(store, now)[0]

    def _refreshed(self, store: RecordStore, now: datetime
                   ) -> tuple[list[Job], dict[str, int], list[str]]:
        """``live``, with the live jobs' counts by the state their record says and the
        held ones' ids, newest first."""
        with self._lock:
            if self._live is None:
                self._live = LiveFolds(store, shared=self.shared)
            self._live.store = store  # the asking request's connection to the same store
            # The first build folds every live job: the cyclic collector would spend about
            # as much CPU as the fold, rescanning what is kept (support/gc_pause.py).
            with gc_paused() if not self._built.is_set() else nullcontext():
                jobs, _broken = self._live.refresh(now)
            self._built.set()
            last = self._answered
            if len(last) != len(jobs) or any(a is not b for a, b in zip(last, jobs, strict=True)):
                states: dict[str, int] = {}
                for job in jobs:
                    state = record_state(job).value
                    states[state] = states.get(state, 0) + 1
                self._answered, self._states = jobs, states
                self._held = _newest_first(j for j in jobs if is_held(j))
            return jobs, self._states, self._held

    def state_counts_if_ready(self, store: RecordStore, now: datetime) -> dict[str, int] | None:
        """The live jobs' counts by the state their record says (a copy) once the index is
        built; None while its first build runs."""
        if not self._built.is_set():
            return None
        return dict(self._refreshed(store, now)[1])

    def live_if_ready(self, store: RecordStore, now: datetime) -> list[Job] | None:
        """``live`` once the index is built; None while its first build runs."""
        return self.live(store, now) if self._built.is_set() else None

    def held(self, store: RecordStore, now: datetime) -> list[str]:
        """The held live jobs' ids, newest first (``live``; while the background build
        runs, from the jobs that may be held where the store names them)."""
        if self._warming and not self._built.is_set():
            early = self.held_among_candidates(store, now)
            if early is not None:
                return early
        return list(self._refreshed(store, now)[2])

    @staticmethod
    def held_among_candidates(store: RecordStore, now: datetime) -> list[str] | None:
        """The held jobs among those the store says may be held, each folded through its
        snapshot (a record that cannot be used is left out, as ``live`` leaves it out);
        None where the store cannot name them or they are more than ``CANDIDATES_MAX``."""
        ids = may_be_held(store)
        if ids is None or len(ids) > CANDIDATES_MAX:
            return None
        jobs, _broken = fold_with_snapshots(store, ids, now)
        return _newest_first(j for j in jobs if is_held(j))

    def held_if_ready(self, store: RecordStore, now: datetime) -> list[str] | None:
        """``held`` once the index is built (a later refresh folds on only what changed);
        while its first build runs, the held jobs among the candidates, or None where those
        cannot be named: no request waits for the build."""
        if not self._built.is_set():
            return self.held_among_candidates(store, now)
        return self.held(store, now)

    def warm(self, open_store: Callable[[], AbstractContextManager[RecordStore]],
             clock: Callable[[], datetime]) -> threading.Thread:
        """Build the index in a background thread, through a store of its own."""
        def build() -> None:
            try:
                with open_store() as store:
                    self.live(store, clock())
            except Exception:  # noqa: BLE001 - the next request that asks builds it
                log.exception("the held index could not be built in the background")
                self._built.set()
            finally:
                self._warming = False
        self._warming = True
        thread = threading.Thread(target=build, name="held-index", daemon=True)
        thread.start()
        return thread


def _newest_first(jobs: Iterable[Job]) -> list[str]:
    return [j.id for j in sorted(jobs, key=lambda j: (sort_key_us(j.created_at), j.id),
                                 reverse=True)]


__all__ = ["CANDIDATES_MAX", "HeldIndex", "is_held"]
