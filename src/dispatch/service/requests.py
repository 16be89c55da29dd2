"""What people do to jobs: create, cancel, resubmit from a hold, give up, supersede.

Each is an append to the record with optimistic concurrency; the supervisor's next tick
carries it out on the scheduler. Errors are typed and name the job.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from datetime import datetime

from dispatch.core import events as ev
from dispatch.core.person_requests import PersonRequest, judge
from dispatch.core.policy import Declarations
from dispatch.core.record import Job, fold
from dispatch.core.spec import JobSpec
from dispatch.errors import StateConflict
from dispatch.stores.base import AlreadySuperseded, ConflictError, RecordStore, StoreError


class JobStateError(StateConflict, ValueError):
    """The request does not fit the job's state (e.g. resubmit of a job that isn't held)."""


class JobAlreadySuperseded(AlreadySuperseded, JobStateError):
    """The store's AlreadySuperseded, caught wherever a JobStateError is (exit 6)."""


def new_job_id() -> str:
    import secrets  # here: hmac and hashlib are not needed by commands that only read

    return secrets.token_hex(5)


def whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def create_job(store: RecordStore, spec: JobSpec, declarations: Declarations, now: datetime,
               *, supersedes: str | None = None, actor: str | None = None,
               job_id: str | None = None, scope: str | None = None) -> str:
    job_id = job_id or new_job_id()
    store.create(ev.JobCreated(seq=1, at=now, job_id=job_id, spec=spec,
                               declarations=declarations, supersedes=supersedes,
                               actor=actor or whoami(), scope=scope))
    return job_id


def _request(store: RecordStore, job_id: str, now: datetime,
             make: Callable[[Job, int], ev.Event | None]) -> Job:
    for _ in range(10):
        job = fold(store.read(job_id), now, job_id=job_id)
        event = make(job, job.version + 1)
        if event is None:
            return job
        try:
            store.append(job_id, [event], job.version)
            return fold(store.read(job_id), now, job_id=job_id)
        except ConflictError:
            continue
    raise StoreError(f"job {job_id}: too many concurrent writers")


def _person(store: RecordStore, job_id: str, now: datetime, request: PersonRequest,
            event: Callable[[int], ev.Event]) -> Job:
    """Record ``request`` if it fits the job's record (core.person_requests.judge): the same
    request already pending records nothing; a conflicting one is refused (exit 6)."""
    def make(job: Job, seq: int) -> ev.Event | None:
        answer = judge(job, request)
        if answer.refusal is not None:
            raise JobStateError(answer.refusal)
        return event(seq) if answer.record else None
    return _request(store, job_id, now, make)


def request_cancel(store: RecordStore, job_id: str, now: datetime, actor: str) -> Job:
    return _person(store, job_id, now, PersonRequest.CANCEL,
                   lambda seq: ev.CancelRequested(seq=seq, at=now, actor=actor))


def resubmit_from_hold(store: RecordStore, job_id: str, now: datetime, actor: str) -> Job:
    return _person(store, job_id, now, PersonRequest.RESUBMIT,
                   lambda seq: ev.HoldReleased(seq=seq, at=now, actor=actor))


def give_up(store: RecordStore, job_id: str, now: datetime, actor: str) -> Job:
    return _person(store, job_id, now, PersonRequest.GIVE_UP,
                   lambda seq: ev.GiveUpRequested(seq=seq, at=now, actor=actor))


def supersede(store: RecordStore, job_id: str, now: datetime, actor: str,
              declarations: Declarations, *, new_id: str | None = None) -> str:
    """S7: running a finished job again is a new job that names the old one.

    The new job and the old job's Superseded event are written in one transaction, and the
    store keeps one successor per job: of two concurrent supersedes one wins and the other
    creates nothing (JobAlreadySuperseded naming the winner)."""
    new_id = new_id or new_job_id()
    for _ in range(10):
        old = fold(store.read(job_id), now)
        if old.outcome is None:
            raise JobStateError(f"job {job_id} is not finished; only a committed job can be "
                                "superseded (cancel it first)")
        if old.superseded_by is not None:
            raise JobAlreadySuperseded(job_id, old.superseded_by)
        created = ev.JobCreated(seq=1, at=now, job_id=new_id, spec=old.spec,
                                declarations=declarations, supersedes=job_id,
                                actor=actor or whoami(),
                                scope=old.scope)  # the same scheduler serves the rerun
        superseded = ev.Superseded(seq=old.version + 1, at=now, by=new_id, actor=actor)
        try:
            store.create_successor(created, superseded, old.version)
            return new_id
        except AlreadySuperseded as err:
            raise JobAlreadySuperseded(job_id, err.by) from None
        except ConflictError:
            continue  # the old job moved on (e.g. an escalation): fold it again
    raise StoreError(f"job {job_id}: too many concurrent writers")
