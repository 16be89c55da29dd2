"""One look per backend for a group of jobs, guarded: a backend that cannot be built or
reached yields a problem for its own jobs and never stops the others.

Used by the supervisor's tick and by every read (status, ls, watch): one ``discover`` per
backend per call, for all the jobs asked about, never one per job. A read looks with a
deadline per backend (``look_all(deadline_s=...)``, a few seconds): a backend that has not
answered by then shows its jobs as their record says, marked unreachable, and the tools it
was running are killed. The supervisor's tick
looks through a ``Lookout``: each look on a thread of its own, waited for up to a deadline,
so a scheduler tool that hangs holds up no more than its own backend's jobs, and the
supervisor keeps its lease while it waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from dispatch.backends.base import Backend
from dispatch.core.model import Discovery, SchedulerUnreachable
from dispatch.core.record import Job
from dispatch.errors import DispatchError
from dispatch.support.deadline import READ_DEADLINE_ENV, tools_within

log = logging.getLogger("dispatch.supervise.discovery")

OK = "ok"
UNREACHABLE = "unreachable"
UNUSABLE = "unusable"


@dataclass(frozen=True, slots=True)
class Look:
    """What one backend showed of a group of jobs (``discovery``), or why it showed nothing:
    ``scheduler`` is ok, unreachable (it could not be asked) or unusable (the backend cannot
    be built here), ``problem`` the words. ``backend`` is None when it could not be built."""

    name: str
    backend: Backend | None
    discovery: Discovery | None
    scheduler: str = OK
    problem: str = ""


def tokens_and_refs(jobs: Iterable[Job]) -> tuple[list[str], list[str]]:
    tokens: list[str] = []
    refs: list[str] = []
    for job in jobs:
        for s in job.submissions:
            tokens.append(s.token)
            if s.ref is not None:
                refs.append(s.ref)
    return tokens, refs


def look(name: str, jobs: Sequence[Job], backend_for: Callable[[str], Backend],
         now: datetime) -> Look:
    """One guarded discover() for ``jobs`` (all on backend ``name``). Jobs that never
    submitted anything need no scheduler: their look is empty and complete without asking
    (so a job that never reached a scheduler can be cancelled without one)."""
    tokens, refs = tokens_and_refs(jobs)
    try:
        backend = backend_for(name)
        backend.ready()
    except DispatchError as err:
        log.info("backend %s cannot be used: %s", name, err)
        empty = Discovery(at=now) if not tokens else None
        return Look(name, None, empty, UNUSABLE, str(err))
    if not tokens:
        return Look(name, backend, Discovery(at=now), OK)
    try:
        return Look(name, backend, backend.discover(tokens, refs))
    except SchedulerUnreachable as err:
        log.info("%s; no transition that needs it", err)
        # "<backend>: <reason>", as the deadline's problem: a reader says "scheduler
        # unreachable" before it, so the exception's own text would say it twice
        return Look(name, backend, None, UNREACHABLE, f"{name}: {err.reason}")
    except DispatchError as err:
        log.info("backend %s failed: %s", name, err)
        return Look(name, backend, None, UNUSABLE, str(err))


def by_backend(jobs: Iterable[Job]) -> dict[str, list[Job]]:
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.spec.backend, []).append(job)
    return groups


# The reader's margin past the deadline for a look to return on its own: the tool it ran is
# killed at the deadline (dispatch.support.deadline), so the look ends and leaves nothing behind.
READ_GRACE_S = 1.0


def look_all(jobs: Iterable[Job], backend_for: Callable[[str], Backend],
             now: datetime, *, deadline_s: float | None = None) -> dict[str, Look]:
    """One look per backend. ``deadline_s`` (a read's): every backend asked at once, each
    on a thread of its own whose tools are killed at the deadline; a backend that has not
    answered by then (+ READ_GRACE_S) is unreachable for this read, and the others are
    not held up by it (R5)."""
    groups = by_backend(jobs)
    if deadline_s is None:
        return {name: look(name, group, backend_for, now) for name, group in groups.items()}
    for name in groups:
        # Built here, before the deadline: building a backend asks no scheduler, and its
        # time (imports, on a loaded machine seconds) is not the scheduler's. One that
        # cannot be built says so in its look, as without a deadline.
        try:
            backend_for(name)
        except DispatchError:
            pass
    answers: dict[str, Look] = {}
    errors: dict[str, BaseException] = {}

    def one(name: str, group: Sequence[Job]) -> None:
        try:
            with tools_within(deadline_s):
                answers[name] = look(name, group, backend_for, now)
        except BaseException as err:  # noqa: BLE001 - raised again in the reader
            errors[name] = err

    threads = {name: threading.Thread(target=one, args=(name, group), daemon=True,
                                      name=f"dispatch-read-{name}")
               for name, group in groups.items()}
    for t in threads.values():
        t.start()
    until = time.monotonic() + deadline_s + READ_GRACE_S
    out: dict[str, Look] = {}
    for name, t in threads.items():
        t.join(max(0.0, until - time.monotonic()))
        if name in errors:
            raise errors[name]
        if t.is_alive() or name not in answers:
            log.warning("backend %s: no answer within %gs; its jobs show their record",
                        name, deadline_s)
            out[name] = Look(name, None, None, UNREACHABLE,
                             f"{name}: no answer within {deadline_s:g}s ({READ_DEADLINE_ENV})")
            continue
        out[name] = answers[name]
    return out


# How long a tick waits for one backend's look before it goes on without it (the scheduler
# counts as unreachable for that tick). The Slurm tools time out on their own after 30 s.
LOOK_DEADLINE_S = 60.0
# While waiting, the waiter's keep_alive (its lease guard) is called this often.
KEEP_ALIVE_EVERY_S = 0.2


@dataclass
class _Looking:
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    result: Look | None = None
    error: BaseException | None = None


class Lookout:
    """Looks with a deadline: each on a thread of its own, at most one in flight per backend
    (a look still running past its deadline is not asked again until it returns; its late
    answer is dropped, since the tick went on without it)."""

    def __init__(self, deadline_s: float = LOOK_DEADLINE_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.deadline_s = deadline_s
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._in_flight: dict[str, _Looking] = {}

    def look(self, name: str, jobs: Sequence[Job], backend_for: Callable[[str], Backend],
             now: datetime, *, keep_alive: Callable[[], object] = lambda: None,
             stopping: threading.Event | None = None) -> Look:
        """``look()`` for ``jobs``, or, when backend ``name`` has not answered within the
        deadline (or a look of it from an earlier tick is still running), an unreachable
        look without a backend: no action on that scheduler this tick. ``keep_alive`` is
        called while waiting (a lease renewed when due; what it raises ends the wait, the
        look goes on alone); ``stopping`` set ends the wait too."""
        # no job submitted anything: no scheduler needed (look() answers so without one)
        empty = None if any(j.submissions for j in jobs) else Discovery(at=now)
        with self._lock:
            running = self._in_flight.get(name)
            if running is None:
                looking = self._in_flight[name] = _Looking(self.monotonic())
        if running is not None:
            return Look(name, None, empty, UNREACHABLE,
                        f"{name}: its last look has not returned after "
                        f"{self.monotonic() - running.started:.0f}s")
        threading.Thread(target=self._run, args=(looking, name, list(jobs), backend_for, now),
                         name=f"dispatch-look-{name}", daemon=True).start()
        deadline = looking.started + self.deadline_s
        while not looking.done.wait(max(0.0, min(KEEP_ALIVE_EVERY_S,
                                                 deadline - self.monotonic()))):
            if stopping is not None and stopping.is_set():
                return Look(name, None, empty, UNREACHABLE, f"{name}: stopped waiting for it")
            if self.monotonic() >= deadline:
                log.warning("backend %s: no answer within %gs; its jobs wait", name,
                            self.deadline_s)
                return Look(name, None, empty, UNREACHABLE,
                            f"{name}: no answer within {self.deadline_s:g}s")
            keep_alive()
        if looking.error is not None:
            raise looking.error
        assert looking.result is not None
        return looking.result

    def _run(self, looking: _Looking, name: str, jobs: Sequence[Job],
             backend_for: Callable[[str], Backend], now: datetime) -> None:
        try:
            looking.result = look(name, jobs, backend_for, now)
        except BaseException as err:  # noqa: BLE001 - raised again in the waiting tick
            looking.error = err
        finally:
            with self._lock:
                if self._in_flight.get(name) is looking:
                    del self._in_flight[name]
            looking.done.set()
