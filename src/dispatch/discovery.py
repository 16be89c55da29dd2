"""One look per backend for a group of jobs, guarded: a backend that cannot be built or
reached yields a problem for its own jobs and never stops the others.

Used by the supervisor's tick and by every read (status, ls, watch): one ``discover`` per
backend per call, for all the jobs asked about, never one per job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from dispatch.backends.base import Backend
from dispatch.core.model import Discovery, SchedulerUnreachable
from dispatch.core.record import Job
from dispatch.errors import DispatchError

log = logging.getLogger("dispatch.discovery")

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
        return Look(name, backend, None, UNREACHABLE, str(err))
    except DispatchError as err:
        log.info("backend %s failed: %s", name, err)
        return Look(name, backend, None, UNUSABLE, str(err))


def by_backend(jobs: Iterable[Job]) -> dict[str, list[Job]]:
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.spec.backend, []).append(job)
    return groups


def look_all(jobs: Iterable[Job], backend_for: Callable[[str], Backend],
             now: datetime) -> dict[str, Look]:
    return {name: look(name, group, backend_for, now)
            for name, group in by_backend(jobs).items()}
